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
    /// A table: one line per buffer, then the slab totals.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let report = self.report();
        let header = [
            "buffer",
            "dtype",
            "shape",
            "padded",
            "bytes",
            "slab bytes",
            "offset",
            "lifetime",
        ];
        let rows: Vec<[String; 8]> = report
            .buffers
            .iter()
            .map(|b| {
                [
                    b.name.clone(),
                    b.dtype.clone(),
                    format!("{:?}", b.shape),
                    format!("{:?}", b.padded_shape),
                    b.bytes.to_string(),
                    b.slab_bytes.to_string(),
                    b.offset.to_string(),
                    b.lifetime.clone(),
                ]
            })
            .collect();
        let mut widths = header.map(str::len);
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
        let line = |f: &mut fmt::Formatter<'_>, cells: [&str; 8]| -> fmt::Result {
            for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
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
        line(f, header)?;
        for row in &rows {
            line(f, row.each_ref().map(String::as_str))?;
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
        )
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
    }
}
