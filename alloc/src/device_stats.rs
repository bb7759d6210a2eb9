//! Statistics in the schema of torch's caching allocator (c10
//! `DeviceStats`, as `torch._C._cuda_memoryStats(device)` returns them:
//! `allocation`, `segment`, `active`, `inactive_split`, `allocated_bytes`,
//! `reserved_bytes`, `active_bytes`, `inactive_split_bytes`,
//! `requested_bytes`, each over `all` / `small_pool` / `large_pool` with
//! `current`, `peak`, `allocated`, `freed`; `oversize_allocations` and
//! `oversize_segments` without pools; the plain counters), so that torch's
//! `memory_summary()`, `max_memory_allocated()` and
//! `reset_peak_memory_stats()` describe the planned allocator.
//!
//! How the library's memory counts (docs/allocator.md, "Device
//! statistics"):
//! - a planned block is one allocation of its slot's bytes (request rounded
//!   with the device pad), in the small pool when the slot is at most 1 MiB
//!   (torch's `kSmallSize` rule), else the large pool; a slab is one
//!   large-pool segment of its region's bytes;
//! - the fallback's and the scratch pool's blocks and segments count as the
//!   caching model they run counts them (its rounding, pools and splits);
//! - a warm-up exact region is one segment holding one block of its
//!   granule-rounded bytes, pooled by the same rule;
//! - a block freed while other streams may still use it stops counting in
//!   `allocation` / `allocated_bytes` at its free and in `active` /
//!   `active_bytes` / `requested_bytes` when its events complete, as in
//!   torch's `free` / `free_block`.

use serde_json::{Map, Value, json};
use tensor_arena::caching::CachingStats;

/// torch's `kSmallSize`: blocks of at most this many bytes come from the
/// small pool.
pub const SMALL_SIZE: u64 = 1 << 20;

/// One counter: value now, peak, running totals of increases and
/// decreases.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stat {
    /// Value now.
    pub current: u64,
    /// Highest value since the last peak reset.
    pub peak: u64,
    /// Sum of increases since the last accumulated reset.
    pub allocated: u64,
    /// Sum of decreases since the last accumulated reset.
    pub freed: u64,
}

impl Stat {
    fn add(&mut self, n: u64) {
        self.current += n;
        self.allocated += n;
        self.peak = self.peak.max(self.current);
    }

    fn sub(&mut self, n: u64) {
        // Never below zero: a mismatch shows as a wrong figure, not a panic
        // inside the allocator.
        self.current = self.current.saturating_sub(n);
        self.freed += n;
    }

    fn change(&mut self, from: u64, to: u64) {
        if to >= from {
            self.add(to - from);
        } else {
            self.sub(from - to);
        }
    }

    fn json(&self) -> Value {
        json!({
            "current": self.current,
            "peak": self.peak,
            "allocated": self.allocated,
            "freed": self.freed,
        })
    }
}

/// A counter per pool: all, small, large (c10 `StatArray`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatArray {
    /// Both pools.
    pub all: Stat,
    /// Blocks of at most 1 MiB.
    pub small_pool: Stat,
    /// The rest.
    pub large_pool: Stat,
}

impl StatArray {
    fn each(&mut self, small: bool, f: impl Fn(&mut Stat)) {
        f(&mut self.all);
        f(if small {
            &mut self.small_pool
        } else {
            &mut self.large_pool
        });
    }

    fn add(&mut self, small: bool, n: u64) {
        if n > 0 {
            self.each(small, |s| s.add(n));
        }
    }

    fn sub(&mut self, small: bool, n: u64) {
        if n > 0 {
            self.each(small, |s| s.sub(n));
        }
    }

    fn change(&mut self, small: bool, from: u64, to: u64) {
        if from != to {
            self.each(small, |s| s.change(from, to));
        }
    }

    fn stats_mut(&mut self) -> [&mut Stat; 3] {
        [&mut self.all, &mut self.small_pool, &mut self.large_pool]
    }

    fn json(&self) -> Value {
        json!({
            "all": self.all.json(),
            "small_pool": self.small_pool.json(),
            "large_pool": self.large_pool.json(),
        })
    }
}

/// c10 `DeviceStats`, as the library counts it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// Blocks handed out.
    pub allocation: StatArray,
    /// Regions obtained from the device.
    pub segment: StatArray,
    /// Blocks handed out or waiting for other streams' events.
    pub active: StatArray,
    /// Free blocks inside split segments (the fallback's).
    pub inactive_split: StatArray,
    /// Bytes of blocks handed out (rounded).
    pub allocated_bytes: StatArray,
    /// Bytes of regions obtained from the device.
    pub reserved_bytes: StatArray,
    /// Bytes of active blocks.
    pub active_bytes: StatArray,
    /// Bytes of inactive split blocks.
    pub inactive_split_bytes: StatArray,
    /// Bytes asked for (before rounding) by active blocks.
    pub requested_bytes: StatArray,
    /// Blocks of at least `max_split_size` (the fallback's rule).
    pub oversize_allocations: Stat,
    /// Segments of at least `max_split_size`.
    pub oversize_segments: Stat,
    /// Allocations that emptied the cache and tried again.
    pub num_alloc_retries: u64,
    /// Allocations answered NULL for lack of memory.
    pub num_ooms: u64,
    /// Waits for every stream (the library never does one).
    pub num_sync_all_streams: u64,
    /// Device allocation calls.
    pub num_device_alloc: u64,
    /// Device free calls.
    pub num_device_free: u64,
    /// Allocations rejected by an out-of-memory preemption policy (torch
    /// 2.15 has the key; the library has no such policy: always 0).
    pub num_oom_rejections: u64,
    /// The largest block that may be split, as torch reports it: -1 when
    /// unlimited (torch's `SIZE_MAX` cast to `int64_t`).
    pub max_split_size: i64,
}

impl DeviceStats {
    /// The nested dict `torch._C._cuda_memoryStats(device)` returns, as
    /// JSON.
    ///
    /// ```
    /// use tensor_arena_alloc::DeviceStats;
    /// let v = DeviceStats::default().to_json();
    /// assert_eq!(v["allocated_bytes"]["small_pool"]["peak"], 0);
    /// assert_eq!(v["oversize_segments"]["current"], 0);
    /// assert_eq!(v["num_ooms"], 0);
    /// ```
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        for (name, s) in [
            ("allocation", &self.allocation),
            ("segment", &self.segment),
            ("active", &self.active),
            ("inactive_split", &self.inactive_split),
            ("allocated_bytes", &self.allocated_bytes),
            ("reserved_bytes", &self.reserved_bytes),
            ("active_bytes", &self.active_bytes),
            ("inactive_split_bytes", &self.inactive_split_bytes),
            ("requested_bytes", &self.requested_bytes),
        ] {
            m.insert(name.to_owned(), s.json());
        }
        m.insert(
            "oversize_allocations".to_owned(),
            self.oversize_allocations.json(),
        );
        m.insert(
            "oversize_segments".to_owned(),
            self.oversize_segments.json(),
        );
        for (name, v) in [
            ("num_alloc_retries", self.num_alloc_retries),
            ("num_ooms", self.num_ooms),
            ("num_sync_all_streams", self.num_sync_all_streams),
            ("num_device_alloc", self.num_device_alloc),
            ("num_device_free", self.num_device_free),
            ("num_oom_rejections", self.num_oom_rejections),
        ] {
            m.insert(name.to_owned(), json!(v));
        }
        m.insert("max_split_size".to_owned(), json!(self.max_split_size));
        Value::Object(m)
    }

    #[cfg(test)]
    fn arrays_mut(&mut self) -> [&mut StatArray; 9] {
        [
            &mut self.allocation,
            &mut self.segment,
            &mut self.active,
            &mut self.inactive_split,
            &mut self.allocated_bytes,
            &mut self.reserved_bytes,
            &mut self.active_bytes,
            &mut self.inactive_split_bytes,
            &mut self.requested_bytes,
        ]
    }

    fn all_stats_mut(&mut self) -> Vec<&mut Stat> {
        let mut out: Vec<&mut Stat> = Vec::with_capacity(29);
        let DeviceStats {
            allocation,
            segment,
            active,
            inactive_split,
            allocated_bytes,
            reserved_bytes,
            active_bytes,
            inactive_split_bytes,
            requested_bytes,
            oversize_allocations,
            oversize_segments,
            ..
        } = self;
        for a in [
            allocation,
            segment,
            active,
            inactive_split,
            allocated_bytes,
            reserved_bytes,
            active_bytes,
            inactive_split_bytes,
            requested_bytes,
        ] {
            out.extend(a.stats_mut());
        }
        out.push(oversize_allocations);
        out.push(oversize_segments);
        out
    }

    /// Every peak back to its current value (`resetPeakStats`).
    pub fn reset_peak(&mut self) {
        for s in self.all_stats_mut() {
            s.peak = s.current;
        }
    }

    /// Every `allocated` / `freed` total and the plain counters back to 0
    /// (`resetAccumulatedStats`).
    pub fn reset_accumulated(&mut self) {
        for s in self.all_stats_mut() {
            s.allocated = 0;
            s.freed = 0;
        }
        self.num_alloc_retries = 0;
        self.num_ooms = 0;
        self.num_sync_all_streams = 0;
        self.num_device_alloc = 0;
        self.num_device_free = 0;
        self.num_oom_rejections = 0;
    }
}

/// Whether a block of `bytes` (rounded) belongs to the small pool.
pub fn is_small(bytes: u64) -> bool {
    bytes <= SMALL_SIZE
}

/// Segment count and bytes per pool (small, large) of one caching pool.
pub type PoolSegments = [(u64, u64); 2];

/// What the tracker last saw of one caching pool (the fallback or the
/// scratch pool).
#[derive(Debug, Clone, Copy, Default)]
struct Seen {
    model: CachingStats,
    segments: PoolSegments,
}

/// Keeps [`DeviceStats`] as the allocator's pools change: explicit events
/// for planned blocks, slabs and exact regions; for the caching pools, the
/// difference of their model's counters since the last look.
#[derive(Debug, Clone, Default)]
pub struct Tracker {
    stats: DeviceStats,
    seen: [Seen; 2],
}

impl Tracker {
    /// A tracker reporting `max_split_size` (`None`: unlimited).
    pub fn new(max_split_size: Option<u64>) -> Tracker {
        let mut t = Tracker::default();
        t.stats.max_split_size = max_split_size.map_or(-1, |b| b.min(i64::MAX as u64) as i64);
        t
    }

    /// The statistics now.
    pub fn stats(&self) -> &DeviceStats {
        &self.stats
    }

    /// A block of `bytes` (rounded) for a request of `requested` bytes.
    pub fn block_alloc(&mut self, small: bool, bytes: u64, requested: u64) {
        let s = &mut self.stats;
        s.allocation.add(small, 1);
        s.allocated_bytes.add(small, bytes);
        s.active.add(small, 1);
        s.active_bytes.add(small, bytes);
        s.requested_bytes.add(small, requested);
    }

    /// The caller freed a block (torch's `free`: `allocation`,
    /// `allocated_bytes`).
    pub fn block_freed(&mut self, small: bool, bytes: u64) {
        let s = &mut self.stats;
        s.allocation.sub(small, 1);
        s.allocated_bytes.sub(small, bytes);
    }

    /// A freed block's bytes may be used again (torch's `free_block`:
    /// `active`, `active_bytes`, `requested_bytes`).
    pub fn block_inactive(&mut self, small: bool, bytes: u64, requested: u64) {
        let s = &mut self.stats;
        s.active.sub(small, 1);
        s.active_bytes.sub(small, bytes);
        s.requested_bytes.sub(small, requested);
    }

    /// A region of `bytes` obtained from the device.
    pub fn segment_alloc(&mut self, small: bool, bytes: u64) {
        let s = &mut self.stats;
        s.segment.add(small, 1);
        s.reserved_bytes.add(small, bytes);
        s.num_device_alloc += 1;
    }

    /// A region of `bytes` given back to the device.
    pub fn segment_free(&mut self, small: bool, bytes: u64) {
        let s = &mut self.stats;
        s.segment.sub(small, 1);
        s.reserved_bytes.sub(small, bytes);
        s.num_device_free += 1;
    }

    /// `bytes` of a region given back while the region itself stays (an
    /// unmap inside a mapped range's only segment): reserved bytes only.
    pub fn segment_shrunk(&mut self, small: bool, bytes: u64) {
        self.stats.reserved_bytes.sub(small, bytes);
    }

    /// An allocation answered NULL for lack of memory.
    pub fn oom(&mut self) {
        self.stats.num_ooms += 1;
    }

    /// Whether caching pool `which` changed since the last
    /// [`Tracker::observe`] (cheap: one comparison of counters).
    pub fn changed(&self, which: usize, model: &CachingStats) -> bool {
        // Every malloc and free moves `allocation`'s totals, every device
        // call `reserved_bytes`'s.
        let old = &self.seen[which].model;
        old.allocation.allocated != model.allocation.allocated
            || old.allocation.freed != model.allocation.freed
            || old.reserved_bytes.allocated != model.reserved_bytes.allocated
            || old.reserved_bytes.freed != model.reserved_bytes.freed
    }

    /// Takes in what caching pool `which` (0: fallback, 1: scratch) did
    /// since the last look. Block counters move in the pool of the block the
    /// call served or freed (`small`); with `freed_already`, the caller's
    /// free was counted at the time ([`Tracker::block_freed`]) and only the
    /// rest of it moves now. `segments` is called only when the model's
    /// device calls changed: the segments per pool.
    pub fn observe(
        &mut self,
        which: usize,
        model: CachingStats,
        small: bool,
        freed_already: bool,
        segments: impl FnOnce() -> PoolSegments,
    ) {
        let old = self.seen[which];
        if old.model == model {
            return;
        }
        let s = &mut self.stats;
        let block = |a: &mut StatArray,
                     o: &tensor_arena::caching::Stat,
                     n: &tensor_arena::caching::Stat| {
            a.change(small, o.current, n.current);
        };
        if !freed_already {
            block(&mut s.allocation, &old.model.allocation, &model.allocation);
            block(
                &mut s.allocated_bytes,
                &old.model.allocated_bytes,
                &model.allocated_bytes,
            );
        }
        block(&mut s.active, &old.model.active, &model.active);
        block(
            &mut s.active_bytes,
            &old.model.active_bytes,
            &model.active_bytes,
        );
        block(
            &mut s.requested_bytes,
            &old.model.requested_bytes,
            &model.requested_bytes,
        );
        block(
            &mut s.inactive_split,
            &old.model.inactive_split,
            &model.inactive_split,
        );
        block(
            &mut s.inactive_split_bytes,
            &old.model.inactive_split_bytes,
            &model.inactive_split_bytes,
        );
        s.oversize_allocations.change(
            old.model.oversize_allocations.current,
            model.oversize_allocations.current,
        );
        s.oversize_segments.change(
            old.model.oversize_segments.current,
            model.oversize_segments.current,
        );
        s.num_alloc_retries += model.num_alloc_retries - old.model.num_alloc_retries;
        let mut segs = old.segments;
        if model.num_device_alloc != old.model.num_device_alloc
            || model.num_device_free != old.model.num_device_free
        {
            s.num_device_alloc += model.num_device_alloc - old.model.num_device_alloc;
            s.num_device_free += model.num_device_free - old.model.num_device_free;
            segs = segments();
            for (pool, small) in [(0, true), (1, false)] {
                s.segment.change(small, old.segments[pool].0, segs[pool].0);
                s.reserved_bytes
                    .change(small, old.segments[pool].1, segs[pool].1);
            }
        }
        self.seen[which] = Seen {
            model,
            segments: segs,
        };
    }

    /// Forgets caching pool `which` after it was replaced by an empty one
    /// (its segments were given back: counted as device frees).
    pub fn pool_cleared(&mut self, which: usize) {
        let old = self.seen[which];
        for (pool, small) in [(0, true), (1, false)] {
            let (count, bytes) = old.segments[pool];
            self.stats.segment.change(small, count, 0);
            self.stats.reserved_bytes.change(small, bytes, 0);
            self.stats.num_device_free += count;
        }
        self.seen[which] = Seen::default();
    }

    /// `resetPeakStats`.
    pub fn reset_peak(&mut self) {
        self.stats.reset_peak();
    }

    /// `resetAccumulatedStats`.
    pub fn reset_accumulated(&mut self) {
        self.stats.reset_accumulated();
    }

    #[cfg(test)]
    fn arrays(&mut self) -> [&mut StatArray; 9] {
        self.stats.arrays_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_add_up_and_peaks_reset_to_current() {
        let mut t = Tracker::new(None);
        t.segment_alloc(false, 8 << 20);
        t.block_alloc(true, 512, 100);
        t.block_alloc(false, 2 << 20, 2 << 20);
        t.block_freed(true, 512);
        t.block_inactive(true, 512, 100);
        for a in t.arrays() {
            assert_eq!(a.all.current, a.small_pool.current + a.large_pool.current);
            assert_eq!(
                a.all.allocated,
                a.small_pool.allocated + a.large_pool.allocated
            );
        }
        let s = *t.stats();
        assert_eq!(s.allocated_bytes.all.peak, 512 + (2 << 20));
        assert_eq!(s.allocated_bytes.all.current, 2 << 20);
        t.reset_peak();
        assert_eq!(t.stats().allocated_bytes.all.peak, 2 << 20);
        assert_eq!(t.stats().allocated_bytes.small_pool.peak, 0);
        t.reset_accumulated();
        assert_eq!(t.stats().allocated_bytes.all.allocated, 0);
        assert_eq!(t.stats().allocated_bytes.all.current, 2 << 20);
        assert_eq!(t.stats().num_device_alloc, 0);
        assert_eq!(t.stats().max_split_size, -1);
    }

    #[test]
    fn json_has_torch_keys() {
        let v = DeviceStats::default().to_json();
        for key in [
            "num_alloc_retries",
            "num_ooms",
            "max_split_size",
            "num_sync_all_streams",
            "num_device_alloc",
            "num_device_free",
        ] {
            assert!(v[key].is_number(), "{key}");
        }
        for key in [
            "allocation",
            "segment",
            "active",
            "inactive_split",
            "allocated_bytes",
            "reserved_bytes",
            "active_bytes",
            "inactive_split_bytes",
            "requested_bytes",
        ] {
            for pool in ["all", "small_pool", "large_pool"] {
                for f in ["current", "peak", "allocated", "freed"] {
                    assert!(v[key][pool][f].is_number(), "{key}.{pool}.{f}");
                }
            }
        }
        for key in ["oversize_allocations", "oversize_segments"] {
            assert!(v[key]["peak"].is_number(), "{key}");
        }
    }
}
