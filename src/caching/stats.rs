//! Counters named as in `torch.npu.memory_stats()` (the "all" pool).

use std::collections::BTreeMap;

use serde::Serialize;

/// One counter as torch keeps it: current value, peak, and running totals
/// of increases and decreases.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Stat {
    /// Value now.
    pub current: u64,
    /// Highest value since the allocator was created.
    pub peak: u64,
    /// Sum of all increases.
    pub allocated: u64,
    /// Sum of all decreases.
    pub freed: u64,
}

impl Stat {
    /// Adds `amount` (which may be negative), as torch's `update_stat`.
    pub(super) fn update(&mut self, amount: i64) {
        if amount >= 0 {
            self.add(amount.unsigned_abs());
        } else {
            self.sub(amount.unsigned_abs());
        }
    }

    #[inline]
    pub(super) fn add(&mut self, amount: u64) {
        self.current += amount;
        self.allocated += amount;
        self.peak = self.peak.max(self.current);
    }

    #[inline]
    pub(super) fn sub(&mut self, amount: u64) {
        debug_assert!(self.current >= amount, "stat would go negative");
        self.current = self.current.saturating_sub(amount);
        self.freed += amount;
    }
}

/// The allocator's counters, named as the keys of `memory_stats()`
/// (`allocated_bytes.all.current` is `allocated_bytes.current`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CachingStats {
    /// Blocks handed out.
    pub allocation: Stat,
    /// Segments obtained with `aclrtMalloc` (expandable segments are not
    /// counted here, as in torch).
    pub segment: Stat,
    /// Blocks handed out or waiting for their stream (equal to
    /// `allocation` in this single-stream-free model).
    pub active: Stat,
    /// Free blocks that are part of a split segment: cached memory that
    /// cannot be returned to the device.
    pub inactive_split: Stat,
    /// Bytes in blocks handed out (rounded sizes).
    pub allocated_bytes: Stat,
    /// Bytes obtained from the device: segments plus mapped pages.
    pub reserved_bytes: Stat,
    /// Bytes in active blocks.
    pub active_bytes: Stat,
    /// Bytes in `inactive_split` blocks.
    pub inactive_split_bytes: Stat,
    /// Bytes the caller asked for (before rounding).
    pub requested_bytes: Stat,
    /// Blocks handed out of at least `max_split_size`.
    pub oversize_allocations: Stat,
    /// Segments of at least `max_split_size`.
    pub oversize_segments: Stat,
    /// Allocations that freed every cached block and tried again.
    pub num_alloc_retries: u64,
    /// Allocations that failed.
    pub num_ooms: u64,
    /// Device allocations: `aclrtMalloc` calls plus physical pages mapped.
    pub num_device_alloc: u64,
    /// Device frees: `aclrtFree` calls plus physical pages unmapped.
    pub num_device_free: u64,
}

impl CachingStats {
    /// The counters as `memory_stats()` keys them, e.g.
    /// `"reserved_bytes.all.peak"`, `"num_alloc_retries"`.
    ///
    /// ```
    /// use tensor_arena::caching::{CachingAllocator, CachingConfig};
    /// let mut a = CachingAllocator::new(CachingConfig::default());
    /// a.malloc(1000).unwrap();
    /// let stats = a.stats().memory_stats();
    /// assert_eq!(stats["reserved_bytes.all.current"], 2 << 20);
    /// assert_eq!(stats["allocated_bytes.all.current"], 1536);
    /// ```
    pub fn memory_stats(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        let stats: [(&str, &Stat); 9] = [
            ("allocation", &self.allocation),
            ("segment", &self.segment),
            ("active", &self.active),
            ("inactive_split", &self.inactive_split),
            ("allocated_bytes", &self.allocated_bytes),
            ("reserved_bytes", &self.reserved_bytes),
            ("active_bytes", &self.active_bytes),
            ("inactive_split_bytes", &self.inactive_split_bytes),
            ("requested_bytes", &self.requested_bytes),
        ];
        for (name, s) in stats {
            for (field, v) in fields(s) {
                out.insert(format!("{name}.all.{field}"), v);
            }
        }
        for (name, s) in [
            ("oversize_allocations", &self.oversize_allocations),
            ("oversize_segments", &self.oversize_segments),
        ] {
            for (field, v) in fields(s) {
                out.insert(format!("{name}.{field}"), v);
            }
        }
        out.insert("num_alloc_retries".to_owned(), self.num_alloc_retries);
        out.insert("num_ooms".to_owned(), self.num_ooms);
        out.insert("num_device_alloc".to_owned(), self.num_device_alloc);
        out.insert("num_device_free".to_owned(), self.num_device_free);
        out
    }
}

fn fields(s: &Stat) -> [(&'static str, u64); 4] {
    [
        ("current", s.current),
        ("peak", s.peak),
        ("allocated", s.allocated),
        ("freed", s.freed),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_tracks_peak_and_totals() {
        let mut s = Stat::default();
        s.add(10);
        s.sub(4);
        s.update(2);
        assert_eq!(
            s,
            Stat {
                current: 8,
                peak: 10,
                allocated: 12,
                freed: 4
            }
        );
    }
}
