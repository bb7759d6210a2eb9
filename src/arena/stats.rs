//! Arena statistics and a `memory_summary()` laid out like torch_npu's.

use std::fmt::Write as _;

use crate::device::DeviceCounters;
use crate::units::format_bytes;

/// A snapshot of an arena's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArenaStats {
    /// Bytes of the slab (reserved once, at creation).
    pub reserved_bytes: u64,
    /// Slab bytes of the buffers leased right now.
    pub active_bytes: u64,
    /// Highest `active_bytes` seen.
    pub peak_active_bytes: u64,
    /// Leases live right now.
    pub live_leases: u64,
    /// Highest `live_leases` seen.
    pub peak_live_leases: u64,
    /// Leases handed out since creation.
    pub total_leases: u64,
    /// Leases ended since creation.
    pub total_releases: u64,
    /// Slab bytes of all leases handed out since creation.
    pub leased_bytes: u64,
    /// Slab bytes of all leases ended since creation.
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
    /// it at a glance. "Allocated" here means leased.
    pub fn summary(&self, device: &str) -> String {
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
        let leased = [
            self.active_bytes,
            self.peak_active_bytes,
            self.leased_bytes,
            self.released_bytes,
        ];
        bytes_row(&mut out, "Allocated memory", leased);
        bytes_row(&mut out, "Active memory", leased);
        let slab = self.reserved_bytes;
        bytes_row(&mut out, "Device reserved memory", [slab, slab, slab, 0]);
        // Reserved but not leased right now: what the cache would call
        // inactive split memory. It can never be handed to anyone else.
        bytes_row(
            &mut out,
            "Non-releasable memory",
            [slab - self.active_bytes.min(slab), slab, 0, 0],
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
        count_row(&mut out, "Allocations", leases);
        count_row(&mut out, "Active allocs", leases);
        count_row(
            &mut out,
            "Device reserved segments",
            [self.segments, self.segments, self.segments, 0],
        );
        out += &rule('=');
        let _ = writeln!(
            out,
            "| {:<w$}|",
            format!(
                "steps: {}; device allocation calls: {}; device bytes in use: {}",
                self.steps,
                self.device.alloc_calls,
                format_bytes(self.device.bytes_in_use)
            ),
            w = WIDTH - 1
        );
        out += &rule('=');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_has_torch_npu_rows_and_fixed_width() {
        let s = ArenaStats {
            reserved_bytes: 4 << 20,
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
        let text = s.summary("host");
        for row in [
            "Metric",
            "Cur Usage",
            "Peak Usage",
            "Tot Alloc",
            "Tot Freed",
            "Allocated memory",
            "Active memory",
            "Device reserved memory",
            "Non-releasable memory",
            "Allocations",
            "Active allocs",
            "Device reserved segments",
        ] {
            assert!(text.contains(row), "missing {row}:\n{text}");
        }
        assert!(text.contains("3.0 MiB") && text.contains("device: host"));
        let widths: Vec<usize> = text.lines().map(|l| l.chars().count()).collect();
        assert!(widths.iter().all(|&w| w == widths[0]), "{widths:?}\n{text}");
    }
}
