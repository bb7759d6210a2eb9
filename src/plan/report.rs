//! The plan report: a table for people and a serde form for tools.

use std::fmt;

use serde::Serialize;

use super::planned::{LifetimeKind, Plan, PlannedBuffer};
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
    /// `persistent`, `step`, or `first..last` phase names.
    pub lifetime: String,
    /// Steps a [`Recorder`](crate::record::Recorder) learned the spec from;
    /// absent for specs declared by hand.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recorded_steps: Option<u64>,
}

/// A serialisable summary of a [`Plan`] (`serde_json::to_string(&plan.report())`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanReport {
    /// Phase names in order.
    pub phases: Vec<String>,
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
        PlanReport {
            phases: self.phases.clone(),
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
                let name = |i: usize| self.phases.get(i).map_or("?", String::as_str);
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
    /// A table: one line per buffer, then the slab totals. When some specs
    /// were learned by a recorder, an `origin` column says which, and over
    /// how many steps; plans declared by hand print without it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let report = self.report();
        let recorded = report
            .buffers
            .iter()
            .filter(|b| b.recorded_steps.is_some())
            .count();
        let mut header = vec![
            "buffer",
            "dtype",
            "shape",
            "padded",
            "bytes",
            "slab bytes",
            "offset",
            "lifetime",
        ];
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
                    b.lifetime.clone(),
                ];
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
        let phases = if report.phases.is_empty() {
            "none declared".to_owned()
        } else {
            report.phases.join(" -> ")
        };
        writeln!(
            f,
            "plan: {} buffers; phases: {phases}; offsets aligned to {} B",
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
