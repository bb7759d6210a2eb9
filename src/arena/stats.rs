//! Arena statistics and a `memory_summary()` laid out like torch_npu's.

use std::fmt::Write as _;

use crate::device::DeviceCounters;
use crate::units::format_bytes;

/// A snapshot of an arena's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArenaStats {
    /// Bytes the device reserved for the slab (once, at creation): the
    /// plan's [`slab_bytes`](ArenaStats::slab_bytes), rounded up as the
    /// device allocates (the host backs slabs of 2 MiB or more with whole
    /// 2 MiB pages).
    pub reserved_bytes: u64,
    /// Bytes of the slab the plan needs.
    pub slab_bytes: u64,
    /// Bytes of the persistent buffers: allocated for the whole run,
    /// whether leased or not.
    pub persistent_bytes: u64,
    /// Number of persistent buffers.
    pub persistent_buffers: u64,
    /// Slab bytes of the step-scoped buffers leased right now (persistent
    /// buffers are always allocated and counted in `persistent_bytes`).
    pub active_bytes: u64,
    /// Highest `active_bytes` seen.
    pub peak_active_bytes: u64,
    /// Leases live right now.
    pub live_leases: u64,
    /// Highest `live_leases` seen.
    pub peak_live_leases: u64,
    /// Leases handed out since creation (of any buffer).
    pub total_leases: u64,
    /// Leases ended since creation.
    pub total_releases: u64,
    /// Slab bytes of all step-scoped leases handed out since creation.
    pub leased_bytes: u64,
    /// Slab bytes of all step-scoped leases ended since creation.
    pub released_bytes: u64,
    /// Segments the arena holds: always 1.
    pub segments: u64,
    /// Steps completed.
    pub steps: u64,
    /// The device's own counters (allocation calls, bytes in use).
    pub device: DeviceCounters,
}

impl ArenaStats {
    /// The summary table: rows and columns as in
    /// `torch_npu.npu.memory_summary()` (Metric | Cur Usage | Peak Usage |
    /// Tot Alloc | Tot Freed), so people migrating from torch_npu can read
    /// it at a glance. "Allocated" means holding data: the persistent
    /// buffers always, step-scoped buffers while leased. Counts are of
    /// leases (a lease allocates nothing). The last lines put the plan's
    /// slab beside the bytes the device reserved, and say why they differ
    /// (`rounding`, from [`Device::reserve_rounding`](crate::Device::reserve_rounding)).
    pub fn summary(&self, device: &str, rounding: &str) -> String {
        const WIDTH: usize = 79;
        let rule = |c: char| format!("|{}|\n", c.to_string().repeat(WIDTH));
        let mut out = String::new();
        out += &rule('=');
        let _ = writeln!(
            out,
            "|{:^WIDTH$}|",
            format!("tensor-arena memory summary, device: {device}")
        );
        out += &rule('-');
        let _ = writeln!(
            out,
            "|{:^39}|{:^39}|",
            format!("device OOMs: {}", self.device.failed_allocs),
            format!("device malloc calls: {}", self.device.alloc_calls)
        );
        out += &rule('=');
        let _ = writeln!(
            out,
            "| {:<26}| {:>10} | {:>10} | {:>10} | {:>10} |",
            "Metric", "Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed"
        );
        out += &rule('-');
        let bytes_row = |out: &mut String, name: &str, v: [u64; 4]| {
            let _ = writeln!(
                out,
                "| {:<26}| {:>10} | {:>10} | {:>10} | {:>10} |",
                name,
                format_bytes(v[0]),
                format_bytes(v[1]),
                format_bytes(v[2]),
                format_bytes(v[3])
            );
        };
        let p = self.persistent_bytes;
        let allocated = [
            p + self.active_bytes,
            p + self.peak_active_bytes,
            p + self.leased_bytes,
            self.released_bytes,
        ];
        bytes_row(&mut out, "Allocated memory", allocated);
        bytes_row(&mut out, "  persistent buffers", [p, p, p, 0]);
        bytes_row(
            &mut out,
            "  leased step buffers",
            [
                self.active_bytes,
                self.peak_active_bytes,
                self.leased_bytes,
                self.released_bytes,
            ],
        );
        let slab = self.reserved_bytes;
        bytes_row(&mut out, "Device reserved memory", [slab, slab, slab, 0]);
        // Reserved but not holding data right now: what the cache would
        // call inactive split memory. It can never be handed to anyone else.
        bytes_row(
            &mut out,
            "Non-releasable memory",
            [slab - allocated[0].min(slab), slab, 0, 0],
        );
        out += &rule('-');
        let count_row = |out: &mut String, name: &str, v: [u64; 4]| {
            let _ = writeln!(
                out,
                "| {:<26}| {:>10} | {:>10} | {:>10} | {:>10} |",
                name, v[0], v[1], v[2], v[3]
            );
        };
        let leases = [
            self.live_leases,
            self.peak_live_leases,
            self.total_leases,
            self.total_releases,
        ];
        count_row(&mut out, "Leases (not allocations)", leases);
        let n = self.persistent_buffers;
        count_row(&mut out, "Persistent buffers", [n, n, n, 0]);
        count_row(
            &mut out,
            "Device reserved segments",
            [self.segments, self.segments, self.segments, 0],
        );
        out += &rule('=');
        let mut footer = vec![format!(
            "steps: {}; device allocation calls: {}; device bytes in use: {}",
            self.steps,
            self.device.alloc_calls,
            format_bytes(self.device.bytes_in_use)
        )];
        let (plan, reserved) = (format_bytes(self.slab_bytes), format_bytes(slab));
        if slab > self.slab_bytes {
            let why = if rounding.is_empty() {
                "the device allocates in larger units"
            } else {
                rounding
            };
            footer.push(format!(
                "slab {plan} (the plan); reserved {reserved}: {why}"
            ));
        } else {
            footer.push(format!("slab {plan} (the plan), reserved as is"));
        }
        for text in &footer {
            for line in wrap(text, WIDTH - 2) {
                let _ = writeln!(out, "| {:<w$}|", line, w = WIDTH - 1);
            }
        }
        out += &rule('=');
        out
    }
}

/// `text` in lines of at most `width` characters, broken at spaces.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in text.split(' ') {
        let last = lines.last_mut().map_or(0, |l| l.chars().count());
        if last > 0 && last + 1 + word.chars().count() > width {
            lines.push(String::new());
        }
        if let Some(l) = lines.last_mut() {
            if !l.is_empty() {
                l.push(' ');
            }
            l.push_str(word);
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_has_torch_npu_rows_and_fixed_width() {
        let s = ArenaStats {
            reserved_bytes: 4 << 20,
            slab_bytes: (3 << 20) + 12345,
            persistent_bytes: 1 << 20,
            persistent_buffers: 3,
            active_bytes: 1 << 20,
            peak_active_bytes: 3 << 20,
            live_leases: 2,
            peak_live_leases: 5,
            total_leases: 50,
            total_releases: 48,
            leased_bytes: 40 << 20,
            released_bytes: 39 << 20,
            segments: 1,
            steps: 10,
            device: DeviceCounters {
                alloc_calls: 1,
                ..DeviceCounters::default()
            },
        };
        let text = s.summary("host", "whole 2 MiB pages");
        for row in [
            "Metric",
            "Cur Usage",
            "Peak Usage",
            "Tot Alloc",
            "Tot Freed",
            "Allocated memory",
            "persistent buffers",
            "leased step buffers",
            "Device reserved memory",
            "Non-releasable memory",
            "Leases (not allocations)",
            "Persistent buffers",
            "Device reserved segments",
        ] {
            assert!(text.contains(row), "missing {row}:\n{text}");
        }
        assert!(!text.contains("Allocations") && !text.contains("Active allocs"));
        assert!(text.contains("3.0 MiB") && text.contains("device: host"));
        // Allocated: 1 MiB persistent + 1 MiB leased now, 4 MiB at the peak.
        let allocated = text
            .lines()
            .find(|l| l.contains("Allocated memory"))
            .unwrap();
        assert!(
            allocated.contains("2.0 MiB") && allocated.contains("4.0 MiB"),
            "{allocated}"
        );
        assert!(
            text.contains("reserved 4.0 MiB: whole 2 MiB pages"),
            "{text}"
        );
        let widths: Vec<usize> = text.lines().map(|l| l.chars().count()).collect();
        assert!(widths.iter().all(|&w| w == widths[0]), "{widths:?}\n{text}");
    }
}
