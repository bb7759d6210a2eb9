//! The plan report: a table for people and a serde form for tools.

use std::fmt;

use serde::Serialize;

use super::planned::{LifetimeKind, Plan, PlannedBuffer};
use crate::shape::ShapeRule;
use crate::units::format_bytes;

/// One buffer's line of a [`PlanReport`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BufferReport {
    /// Declared name.
    pub name: String,
    /// Element type name.
    pub dtype: String,
    /// Declared shape.
    pub shape: Vec<usize>,
    /// Shape after rounding.
    pub padded_shape: Vec<usize>,
    /// Bytes of the padded shape.
    pub bytes: usize,
    /// Bytes reserved in the slab.
    pub slab_bytes: usize,
    /// Offset in the slab.
    pub offset: usize,
    /// `persistent`, `step`, or `first..last` phase names (of its mode).
    pub lifetime: String,
    /// The mode of a step-scoped buffer, when modes were declared; absent
    /// for persistent buffers (every mode shares them) and plans with only
    /// the default mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// `dims` when the buffer opted in to per-dimension limits; absent for
    /// the element-count rule.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shape_rule: Option<String>,
    /// Steps a [`Recorder`](crate::record::Recorder) learned the spec from;
    /// absent for specs declared by hand.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recorded_steps: Option<u64>,
}

/// One mode's line of a [`PlanReport`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModeReport {
    /// The mode's name.
    pub name: String,
    /// Its phases, in order.
    pub phases: Vec<String>,
    /// Its step-scoped buffers.
    pub buffers: usize,
    /// Slab bytes a step of the mode touches (persistent buffers included).
    pub footprint: usize,
    /// Persistent bytes plus the mode's largest total of simultaneously
    /// live step-scoped bytes.
    pub lower_bound: usize,
}

/// A serialisable summary of a [`Plan`] (`serde_json::to_string(&plan.report())`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanReport {
    /// Phase names of the default mode, in order.
    pub phases: Vec<String>,
    /// Every declared mode with its footprint and lower bound (empty when
    /// only the default mode exists).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub modes: Vec<ModeReport>,
    /// Every buffer in declaration order.
    pub buffers: Vec<BufferReport>,
    /// Bytes of the slab.
    pub slab_bytes: usize,
    /// Largest total of simultaneously live bytes.
    pub lower_bound: usize,
    /// Bytes of persistent buffers.
    pub persistent_bytes: usize,
    /// Bytes added by rounding, device padding and alignment.
    pub padding_waste: usize,
    /// `slab_bytes / lower_bound`.
    pub footprint_ratio: f64,
    /// Alignment of offsets.
    pub offset_align: usize,
}

impl Plan {
    /// The structured report.
    pub fn report(&self) -> PlanReport {
        let modes = if self.has_modes() {
            self.modes
                .iter()
                .filter(|m| !m.is_unused())
                .map(|m| ModeReport {
                    name: m.name.clone(),
                    phases: m.phases.clone(),
                    buffers: m.buffers,
                    footprint: m.footprint,
                    lower_bound: m.lower_bound,
                })
                .collect()
        } else {
            Vec::new()
        };
        PlanReport {
            phases: self.phases().to_vec(),
            modes,
            buffers: self
                .buffers
                .iter()
                .map(|b| BufferReport {
                    name: b.name.clone(),
                    dtype: b.dtype.name().to_owned(),
                    shape: b.shape.to_vec(),
                    padded_shape: b.padded.to_vec(),
                    bytes: b.bytes,
                    slab_bytes: b.size,
                    offset: b.offset,
                    lifetime: self.lifetime_label(b),
                    mode: b
                        .mode
                        .filter(|_| self.has_modes())
                        .and_then(|m| self.modes.get(usize::from(m)))
                        .map(|m| m.name.clone()),
                    shape_rule: (b.rule == ShapeRule::Dims).then(|| b.rule.name().to_owned()),
                    recorded_steps: b.recorded_steps,
                })
                .collect(),
            slab_bytes: self.slab_bytes,
            lower_bound: self.lower_bound,
            persistent_bytes: self.persistent_bytes,
            padding_waste: self.padding_waste(),
            footprint_ratio: self.footprint_ratio(),
            offset_align: self.config.offset_align,
        }
    }

    fn lifetime_label(&self, b: &PlannedBuffer) -> String {
        match b.kind {
            LifetimeKind::Persistent => "persistent".to_owned(),
            LifetimeKind::Step => "step".to_owned(),
            LifetimeKind::Phases => {
                let name = |i: usize| self.phase_name(i);
                if b.first_phase == b.last_phase {
                    name(b.first_phase).to_owned()
                } else {
                    format!("{}..{}", name(b.first_phase), name(b.last_phase))
                }
            }
        }
    }
}

impl fmt::Display for Plan {
    /// A table: one line per buffer, then the slab totals. With modes, a
    /// `mode` column and one line per mode with its footprint and lower
    /// bound. When some buffers opted in to per-dimension limits, a `rule`
    /// column says which. When some specs were learned by a recorder, an
    /// `origin` column says which, and over how many steps; plans declared
    /// by hand print without it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let report = self.report();
        let recorded = report
            .buffers
            .iter()
            .filter(|b| b.recorded_steps.is_some())
            .count();
        let with_modes = !report.modes.is_empty();
        let with_rules = report.buffers.iter().any(|b| b.shape_rule.is_some());
        let mut header = vec![
            "buffer",
            "dtype",
            "shape",
            "padded",
            "bytes",
            "slab bytes",
            "offset",
        ];
        if with_modes {
            header.push("mode");
        }
        header.push("lifetime");
        if with_rules {
            header.push("rule");
        }
        if recorded > 0 {
            header.push("origin");
        }
        let rows: Vec<Vec<String>> = report
            .buffers
            .iter()
            .map(|b| {
                let mut row = vec![
                    b.name.clone(),
                    b.dtype.clone(),
                    format!("{:?}", b.shape),
                    format!("{:?}", b.padded_shape),
                    b.bytes.to_string(),
                    b.slab_bytes.to_string(),
                    b.offset.to_string(),
                ];
                if with_modes {
                    row.push(b.mode.clone().unwrap_or_else(|| "all".to_owned()));
                }
                row.push(b.lifetime.clone());
                if with_rules {
                    row.push(
                        b.shape_rule
                            .clone()
                            .unwrap_or_else(|| "elements".to_owned()),
                    );
                }
                if recorded > 0 {
                    row.push(origin_label(b.recorded_steps));
                }
                row
            })
            .collect();
        let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.len());
            }
        }
        let arrows = |phases: &[String]| {
            if phases.is_empty() {
                "none declared".to_owned()
            } else {
                phases.join(" -> ")
            }
        };
        let timeline = if with_modes {
            let modes: Vec<String> = report
                .modes
                .iter()
                .map(|m| format!("{} ({})", m.name, arrows(&m.phases)))
                .collect();
            format!("modes: {}", modes.join(", "))
        } else {
            format!("phases: {}", arrows(&report.phases))
        };
        writeln!(
            f,
            "plan: {} buffers; {timeline}; offsets aligned to {} B",
            rows.len(),
            report.offset_align
        )?;
        let line = |f: &mut fmt::Formatter<'_>, cells: &[&str]| -> fmt::Result {
            for (i, (cell, &w)) in cells.iter().zip(&widths).enumerate() {
                // Names and shapes read left to right; numbers line up on the right.
                if i == cells.len() - 1 {
                    write!(f, "{cell}")?;
                } else if (4..7).contains(&i) {
                    write!(f, "{cell:>w$}  ")?;
                } else {
                    write!(f, "{cell:<w$}  ")?;
                }
            }
            writeln!(f)
        };
        line(f, &header)?;
        for row in &rows {
            let cells: Vec<&str> = row.iter().map(String::as_str).collect();
            line(f, &cells)?;
        }
        writeln!(
            f,
            "slab {} ({} B); lower bound {} ({} B); footprint / lower bound {:.3}; persistent {}; padding waste {}",
            format_bytes(report.slab_bytes as u64),
            report.slab_bytes,
            format_bytes(report.lower_bound as u64),
            report.lower_bound,
            report.footprint_ratio,
            format_bytes(report.persistent_bytes as u64),
            format_bytes(report.padding_waste as u64),
        )?;
        if with_modes {
            let width = report.modes.iter().map(|m| m.name.len()).max().unwrap_or(0);
            for m in &report.modes {
                writeln!(
                    f,
                    "mode {:<width$}  {} step-scoped buffers; footprint {} ({} B); lower bound {} ({} B)",
                    m.name,
                    m.buffers,
                    format_bytes(m.footprint as u64),
                    m.footprint,
                    format_bytes(m.lower_bound as u64),
                    m.lower_bound,
                )?;
            }
            if let Some(largest) = report.modes.iter().max_by_key(|m| m.footprint) {
                writeln!(
                    f,
                    "the slab holds the persistent buffers ({}) and the largest mode, {} ({}); modes share the rest",
                    format_bytes(report.persistent_bytes as u64),
                    largest.name,
                    format_bytes((largest.footprint - report.persistent_bytes) as u64),
                )?;
            }
        }
        if recorded > 0 {
            // One recorder learns all its specs over the same steps; specs
            // merged from several sources may differ, so list each count.
            let mut steps: Vec<u64> = report
                .buffers
                .iter()
                .filter_map(|b| b.recorded_steps)
                .collect();
            steps.sort_unstable();
            steps.dedup();
            let steps: Vec<String> = steps.iter().map(u64::to_string).collect();
            writeln!(
                f,
                "specs: {recorded} of {} learned by recording ({} steps), {} declared by hand",
                rows.len(),
                steps.join(", "),
                rows.len() - recorded
            )?;
        }
        Ok(())
    }
}

fn origin_label(recorded_steps: Option<u64>) -> String {
    match recorded_steps {
        Some(1) => "recorded, 1 step".to_owned(),
        Some(n) => format!("recorded, {n} steps"),
        None => "declared".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use crate::Planner;

    #[test]
    fn table_and_json_name_every_buffer() {
        let mut p = Planner::new();
        let fwd = p.phase("forward").unwrap();
        let bwd = p.phase("backward").unwrap();
        p.persistent::<f32>("weights", &[10, 10]).unwrap();
        p.span::<f32>("act", &[4, 10], fwd, bwd).unwrap();
        let plan = p.plan().unwrap();
        let text = plan.to_string();
        assert!(
            text.contains("weights") && text.contains("forward..backward"),
            "{text}"
        );
        assert!(text.contains("[10, 16]"), "padded shape shown: {text}");
        let json = serde_json::to_value(plan.report()).unwrap();
        assert_eq!(json["buffers"][1]["lifetime"], "forward..backward");
        assert_eq!(json["slab_bytes"], plan.slab_bytes());
        assert!(json["buffers"][0].get("recorded_steps").is_none());
        assert!(
            !text.contains("origin") && !text.contains("specs:"),
            "{text}"
        );
    }

    #[test]
    fn modes_get_a_column_and_a_line_each() {
        let mut p = Planner::new();
        let train = p.mode("train").unwrap();
        let eval = p.mode("eval").unwrap();
        let fwd = p.phase_in(train, "forward").unwrap();
        let bwd = p.phase_in(train, "backward").unwrap();
        let efwd = p.phase_in(eval, "forward").unwrap();
        p.persistent::<f32>("w", &[64, 64]).unwrap();
        p.span::<f32>("h", &[32, 64], fwd, bwd).unwrap();
        p.span::<f32>("g", &[32, 64], bwd, bwd).unwrap();
        p.span::<f32>("h", &[256, 64], efwd, efwd).unwrap();
        let plan = p.plan().unwrap();
        let text = plan.to_string();
        assert!(
            text.starts_with(
                "plan: 4 buffers; modes: train (forward -> backward), eval (forward);"
            ),
            "{text}"
        );
        let header = text.lines().nth(1).unwrap();
        assert!(header.contains("offset  mode   lifetime"), "{text}");
        assert!(text.contains("mode train  2 step-scoped buffers"), "{text}");
        assert!(text.contains("mode eval   1 step-scoped buffers"), "{text}");
        assert!(text.contains("the largest mode, eval"), "{text}");
        let json = serde_json::to_value(plan.report()).unwrap();
        assert_eq!(json["modes"].as_array().map(Vec::len), Some(2));
        assert_eq!(json["buffers"][3]["mode"], "eval");
        assert!(json["buffers"][0].get("mode").is_none());
        let eval_mode = &plan.modes()[2];
        assert_eq!(plan.slab_bytes(), eval_mode.footprint());
        assert_eq!(eval_mode.lower_bound(), eval_mode.footprint());
    }

    #[test]
    fn recorded_specs_get_an_origin_column() {
        let mut p = Planner::new();
        p.persistent::<f32>("weights", &[10, 10]).unwrap();
        p.declare::<f32>(crate::BufferSpec::of::<f32>("act", &[4, 10]).recorded(12))
            .unwrap();
        let plan = p.plan().unwrap();
        let text = plan.to_string();
        let header = text.lines().nth(1).unwrap();
        assert!(header.ends_with("origin"), "{text}");
        assert!(text.lines().nth(2).unwrap().ends_with("declared"), "{text}");
        assert!(
            text.lines().nth(3).unwrap().ends_with("recorded, 12 steps"),
            "{text}"
        );
        assert!(
            text.contains("specs: 1 of 2 learned by recording (12 steps), 1 declared by hand"),
            "{text}"
        );
        let json = serde_json::to_value(plan.report()).unwrap();
        assert_eq!(json["buffers"][1]["recorded_steps"], 12);
    }
}
