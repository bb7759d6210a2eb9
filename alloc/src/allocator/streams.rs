//! The planned allocator's side of torch's allocator contract beyond
//! alloc/free: device statistics in the caching allocator's schema,
//! stream-safe reuse (`record_stream` / `erase_stream`), `empty_cache`,
//! the memory fraction and `cache_info`. The policy module calls the
//! hooks here at a few points (alloc, free, step boundaries, plan, reset);
//! everything else lives here.
//!
//! Stream-safe reuse: a live block may be marked as used on other streams
//! than its allocation stream. At its free, an event is recorded on each
//! of them through the backing; until every one has completed, its bytes
//! are not handed out again: a planned slot stays out of serving (a
//! request whose slot holds such bytes is a `pending` miss, served by the
//! fallback), a fallback or scratch block stays allocated in its caching
//! model, an exact region stays reserved, and no slab holding such bytes
//! goes back to the device. The free itself is recorded as lasting to the
//! end of the next step, so the next plan gives the site two slots used
//! by alternate steps, each alive for the whole step: the side stream has
//! a whole step to finish before the bytes are planned again.

use tensor_arena::caching::rules::round_size_for;

use super::{Kind, PlannedAllocator};
use crate::backing::{Backing, Capped};
use crate::device_stats::{DeviceStats, PoolSegments, Tracker, is_small};
use crate::error::{Error, Result};
use crate::fallback::Fallback;
use crate::pending::{Home, Pending, StreamUses};
use crate::record::{FreedAt, Origin};
use crate::site_plan::{GRANULE, SitePlan};
use crate::slab::PlannedSlab;

/// The allocator's state for the hooks.
pub(super) struct Side {
    pub(super) uses: StreamUses,
    pub(super) stats: Tracker,
    /// The plan of a slab `empty_cache` gave back while idle; reserved
    /// again at the next step's start.
    parked: Option<SitePlan>,
    /// Slab regions (base, bytes) as the statistics last counted them.
    slabs_seen: Vec<(usize, u64)>,
    /// With a mapped range: its mapped bytes and map / unmap calls as the
    /// statistics last saw them (their segments are the range's pages).
    range_seen: (u64, u64, u64),
    /// Exact regions' reserved bytes as last counted.
    exact_seen: u64,
    /// Out-of-memory answers as last counted.
    ooms_seen: u64,
    /// Requests served from the plan as last counted.
    served_seen: u64,
}

impl Side {
    pub(super) fn new(max_split_size: Option<u64>) -> Side {
        Side {
            uses: StreamUses::default(),
            stats: Tracker::new(max_split_size),
            parked: None,
            slabs_seen: Vec::new(),
            range_seen: (0, 0, 0),
            exact_seen: 0,
            ooms_seen: 0,
            served_seen: 0,
        }
    }
}

/// What the free hook decided.
pub(super) enum Freeing {
    /// No stream was recorded on the block: the usual free.
    Plain,
    /// Streams were recorded and their events have completed already: the
    /// usual free, noted in the records at this time.
    Late(FreedAt),
    /// Handled here (a block waiting for events, or a second free of one).
    Done,
}

/// Where a live block is.
#[derive(Clone, Copy)]
enum Place {
    Slab,
    Retiring(usize),
    Pool(usize),
    Exact,
}

fn granule(size: u64) -> u64 {
    size.div_ceil(GRANULE).saturating_mul(GRANULE)
}

/// Segments per pool (small, large) of a caching pool.
fn pool_segments(pool: &Fallback) -> PoolSegments {
    let mut out = [(0, 0); 2];
    for (_, seg) in pool.segments() {
        let p = &mut out[usize::from(!seg.small)];
        p.0 += 1;
        p.1 += seg.mapped_bytes();
    }
    out
}

/// Whether a request of `size` bytes comes from the small pool of `pool`.
fn pool_small(pool: &Fallback, size: u64) -> bool {
    is_small(round_size_for(pool.model().config().platform, size))
}

/// Drops the completed events of `p`; `Ok(true)` when none is left.
fn drain(backing: &mut dyn Backing, p: &mut Pending) -> Result<bool> {
    let mut failed = None;
    p.events.retain(|&(_, e)| match backing.event_done(e) {
        Ok(true) => {
            backing.destroy_event(e);
            false
        }
        Ok(false) => true,
        Err(err) => {
            failed = Some(err);
            true
        }
    });
    match failed {
        Some(err) => Err(err),
        None => Ok(p.events.is_empty() && !p.stuck),
    }
}

impl PlannedAllocator {
    // ---- hooks the policy calls ----

    /// Completes the waiting blocks whose events are done (each alloc,
    /// free and step boundary; nothing to do, and nothing allocated, when
    /// no block waits).
    pub(super) fn poll_pending(&mut self) {
        if self.side.uses.is_idle() {
            return;
        }
        let mut i = 0;
        while i < self.side.uses.pending().len() {
            let p = &mut self.side.uses.pending_mut()[i];
            match drain(&mut self.backing, p) {
                Ok(true) => {
                    let p = self.side.uses.pending_mut().swap_remove(i);
                    self.complete(p);
                }
                Ok(false) => i += 1,
                Err(e) => {
                    p.stuck = true;
                    let addr = p.addr;
                    self.counters.errors.event_failed += 1;
                    self.error(Kind::Event, || {
                        format!("querying the events of the block freed at {addr:#x} failed: {e}; its bytes stay out of use until reset")
                    });
                    i += 1;
                }
            }
        }
    }

    /// After a request: the statistics take in what the pools did, and an
    /// out-of-memory answer.
    pub(super) fn after_alloc(&mut self, size: u64) {
        if self.counters.served != self.side.served_seen {
            // Served from the plan (counted then): the pools did not move.
            self.side.served_seen = self.counters.served;
            return;
        }
        self.stats_pool_sync(size);
        let ooms = self.counters.errors.out_of_memory;
        if ooms != self.side.ooms_seen {
            for _ in self.side.ooms_seen..ooms {
                self.side.stats.oom();
            }
            self.side.ooms_seen = ooms;
        }
    }

    /// A planned slot of `slot` bytes was served for `size`: counted.
    pub(super) fn planned_served(&mut self, slot: u64, size: u64) {
        self.side.stats.block_alloc(is_small(slot), slot, size);
    }

    /// A planned block of `size` bytes in a `slot` was freed (no stream
    /// to wait for).
    pub(super) fn stats_planned_free(&mut self, slot: u64, size: u64) {
        let small = is_small(slot);
        self.side.stats.block_freed(small, slot);
        self.side.stats.block_inactive(small, slot, size);
    }

    /// The caching pools or the exact regions served or freed a block of
    /// `size` bytes: the statistics take in the change.
    pub(super) fn stats_pool_sync(&mut self, size: u64) {
        for which in 0..2 {
            let pool = if which == 0 {
                &self.fallback
            } else {
                &self.scratch
            };
            let model = pool.model().stats();
            if self.side.stats.changed(which, &model) {
                let small = pool_small(pool, size);
                self.side
                    .stats
                    .observe(which, model, small, false, || pool_segments(pool));
            }
        }
        let exact = self.exact.reserved_bytes();
        let seen = self.side.exact_seen;
        let ranged = self.backing.space().is_some();
        if exact != seen {
            let asked = granule(size);
            let small = is_small(asked);
            let s = &mut self.side.stats;
            if exact > seen {
                if !ranged {
                    s.segment_alloc(small, exact - seen);
                }
                s.block_alloc(small, asked, size);
            } else {
                s.block_freed(small, asked);
                s.block_inactive(small, asked, size);
                if !ranged {
                    s.segment_free(small, seen - exact);
                }
            }
            self.side.exact_seen = exact;
        }
        if ranged {
            self.sync_range();
        }
    }

    /// With a mapped range, torch's segments are its mappings: one segment
    /// allocated per map call and one freed per unmap call (in the large
    /// pool), so that the reserved bytes and the device calls torch reads
    /// are the pages the device holds and the calls made for them.
    pub(super) fn sync_range(&mut self) {
        let calls = self.backing.calls();
        let mapped = self.backing.mapped_bytes() as u64;
        let (bytes, maps, unmaps) = self.side.range_seen;
        if (mapped, calls.map, calls.unmap) == (bytes, maps, unmaps) {
            return;
        }
        let s = &mut self.side.stats;
        // The bytes of the new maps and unmaps since the last look, net of
        // each other: the first call of each kind carries them.
        let (mut up, mut down) = if mapped >= bytes {
            (mapped - bytes, 0)
        } else {
            (0, bytes - mapped)
        };
        // One segment per map call, one freed per unmap call, except that
        // an unmap inside the mappings (idle pages of the slab lent to a
        // miss, allocator/lending.rs; a trimmed run inside a chunk) can
        // outnumber the maps: the segment count then never goes below one
        // while bytes stay mapped (the unmap gives bytes back, not a
        // segment), so that its books stay whole.
        let new_maps = calls.map - maps;
        let keep = u64::from(mapped > 0 && new_maps == 0);
        let segments = s.stats().segment.large_pool.current;
        let frees = (calls.unmap - unmaps).min(segments.saturating_sub(keep));
        for _ in 0..frees {
            s.segment_free(false, std::mem::take(&mut down));
        }
        for _ in maps..calls.map {
            s.segment_alloc(false, std::mem::take(&mut up));
        }
        // Bytes unmapped by calls that freed no segment (above), and net
        // movement with no matching call (cannot happen: every byte is
        // mapped or unmapped by a call), kept exact all the same.
        if up > 0 {
            s.segment_alloc(false, up);
        }
        if down > 0 {
            s.segment_shrunk(false, down);
        }
        self.side.range_seen = (mapped, calls.map, calls.unmap);
    }

    /// Slab regions reserved or released since the last look: large-pool
    /// segments.
    pub(super) fn sync_slabs(&mut self) {
        if self.backing.space().is_some() {
            // The range's pages are the segments (sync_range).
            self.sync_range();
            return;
        }
        // Each region of a slab (more than one after a re-plan grew it) is
        // one segment.
        let now: Vec<(usize, u64)> = self
            .slab
            .iter()
            .chain(self.retiring.iter())
            .flat_map(|s| s.regions())
            .collect();
        if now == self.side.slabs_seen {
            return;
        }
        for &(base, bytes) in &self.side.slabs_seen {
            if !now.contains(&(base, bytes)) {
                self.side.stats.segment_free(false, bytes);
            }
        }
        for &(base, bytes) in &now {
            if !self.side.slabs_seen.contains(&(base, bytes)) {
                self.side.stats.segment_alloc(false, bytes);
            }
        }
        self.side.slabs_seen = now;
    }

    /// A step begins: a parked slab is reserved again.
    pub(super) fn at_step_begin(&mut self) {
        self.poll_pending();
        if self.slab.is_some() {
            self.side.parked = None;
        } else if let Some(plan) = self.side.parked.take() {
            let bytes = plan.slab_bytes.max(GRANULE) as usize;
            match self.backing.reserve_low(bytes) {
                Ok(base) => {
                    if self.checked {
                        let _ = self
                            .backing
                            .fill(base, bytes, tensor_arena::arena::POISON_BYTE);
                    }
                    self.slab = Some(PlannedSlab::new(plan, base, bytes));
                    self.sync_slabs();
                }
                // No room now: the fallback serves, the next step tries again.
                Err(_) => self.side.parked = Some(plan),
            }
        }
    }

    /// A step ended (plans and cache releases may have happened).
    pub(super) fn at_step_end(&mut self) {
        self.poll_pending();
        self.stats_pool_sync(0);
        self.sync_slabs();
    }

    /// Whether a waiting block holds bytes of the region at `base`.
    pub(super) fn pending_in(&self, base: usize, bytes: usize) -> bool {
        !self.side.uses.is_idle() && self.side.uses.overlaps(base, bytes as u64)
    }

    /// How far into the region at `base` (of `bytes`) waiting blocks reach:
    /// the end of the highest, as an offset from `base` (0 when none waits
    /// there).
    pub(super) fn pending_end_in(&self, base: usize, bytes: usize) -> u64 {
        let end = base as u128 + bytes as u128;
        self.side
            .uses
            .pending()
            .iter()
            .filter(|p| (p.addr as u128) < end && base as u128 <= p.addr as u128 + p.len as u128)
            .map(|p| (p.addr as u128 + p.len as u128).min(end) - base as u128)
            .max()
            .map_or(0, |e| e as u64)
    }

    /// Whether a waiting block holds bytes of one of `slab`'s regions.
    pub(super) fn pending_in_slab(&self, slab: &PlannedSlab) -> bool {
        slab.regions()
            .any(|(base, bytes)| self.pending_in(base, bytes as usize))
    }

    /// `reset`: the events of waiting blocks are destroyed (their memory
    /// goes back with everything else).
    pub(super) fn forget_streams(&mut self) {
        let pending = std::mem::take(self.side.uses.pending_mut());
        for p in pending {
            for (_, e) in p.events {
                self.backing.destroy_event(e);
            }
        }
    }

    /// Before a free: a block with recorded streams records its events and,
    /// while they are pending, waits here instead of being freed.
    pub(super) fn before_free(&mut self, addr: usize) -> Freeing {
        self.poll_pending();
        if !self.side.uses.is_idle() && self.side.uses.pending_at(addr).is_some() {
            self.error(Kind::DoubleFree, || {
                format!("free of {addr:#x}: the block was freed already and waits for other streams (double free?)")
            });
            return Freeing::Done;
        }
        let Some(streams) = self.side.uses.take(addr) else {
            return Freeing::Plain;
        };
        let Some((origin, place)) = self.locate(addr) else {
            return Freeing::Plain;
        };
        let late = self.late_free(origin);
        let mut events = Vec::with_capacity(streams.len());
        let mut stuck = false;
        for s in streams {
            match self.backing.record_event(s) {
                Ok(e) => events.push((s, e)),
                Err(err) => {
                    stuck = true;
                    self.counters.errors.event_failed += 1;
                    self.error(Kind::Event, || {
                        format!("recording an event on stream {s:#x} at the free of {addr:#x} failed: {err}; its bytes stay out of use until reset")
                    });
                }
            }
        }
        let mut p = Pending {
            addr,
            len: 0,
            home: Home::Exact,
            events,
            stuck,
        };
        if matches!(drain(&mut self.backing, &mut p), Ok(true)) {
            return Freeing::Late(late);
        }
        match place {
            Place::Slab | Place::Retiring(_) => {
                let slab = match place {
                    Place::Retiring(i) => self.retiring.get_mut(i),
                    _ => self.slab.as_mut(),
                };
                let Some(slab) = slab else {
                    return Freeing::Plain;
                };
                let Some(block) = slab.free(addr) else {
                    return Freeing::Plain;
                };
                let (slot, size) = (block.slot, block.size);
                self.records.freed(block.origin, late);
                self.note_freed(block.origin, size);
                self.counters.live_sub(size);
                self.side.stats.block_freed(is_small(slot), slot);
                p.len = slot;
                p.home = Home::Slab { slot, size };
            }
            Place::Pool(which) => {
                let pool = if which == 0 {
                    &self.fallback
                } else {
                    &self.scratch
                };
                let Some(block) = pool.block(addr).copied() else {
                    return Freeing::Plain;
                };
                let rounded = pool.model().block_size(block.id).unwrap_or(block.size);
                let small = pool_small(pool, block.size);
                if block.origin.step > 0 {
                    self.records.freed(block.origin, late);
                }
                self.counters.live_sub(block.size);
                self.side.stats.block_freed(small, rounded);
                p.len = block.size;
                p.home = if which == 0 {
                    Home::Fallback
                } else {
                    Home::Scratch
                };
            }
            Place::Exact => {
                let Some((size, _, origin)) = self.exact.region(addr) else {
                    return Freeing::Plain;
                };
                if origin.step > 0 {
                    self.records.freed(origin, late);
                }
                self.counters.live_sub(size);
                self.side
                    .stats
                    .block_freed(is_small(granule(size)), granule(size));
                p.len = size;
            }
        }
        self.side.uses.push(p);
        Freeing::Done
    }

    // ---- the public side ----

    /// Marks the live block at `addr` as used on `stream` (a runtime stream
    /// handle) besides its allocation stream: at its free, its bytes wait
    /// for an event recorded on `stream` (torch's `recordStream`). `false`
    /// when `addr` is not a live block or `stream` is its allocation stream
    /// or recorded already.
    ///
    /// ```
    /// use tensor_arena_alloc::{Config, PlannedAllocator};
    /// // No warm-up: the first step is recorded, served by the scratch pool.
    /// let mut a = PlannedAllocator::new(Config::from_json(r#"{"warmup_steps": 0}"#)?)?;
    /// a.step_begin()?;
    /// let p = a.alloc(4096, 0, 0).unwrap();
    /// assert!(a.record_stream(p, 0x5000));
    /// assert!(!a.record_stream(p, 0x5000)); // recorded already
    /// assert!(!a.record_stream(p, 0)); // its allocation stream
    /// a.free(p); // host memory: the event completes at once
    /// assert_eq!(a.pending_blocks(), 0);
    /// a.step_end()?;
    /// # Ok::<(), tensor_arena_alloc::Error>(())
    /// ```
    pub fn record_stream(&mut self, addr: usize, stream: usize) -> bool {
        // A freed block still waiting is not live (its pool still holds it).
        if !self.side.uses.is_idle() && self.side.uses.pending_at(addr).is_some() {
            return false;
        }
        let id = self.stream_id(stream);
        let allocated_on = match self.locate(addr) {
            None => return false,
            Some((_, Place::Slab)) => self.slab.as_ref().map(|s| s.plan.stream),
            Some((_, Place::Retiring(i))) => self.retiring.get(i).map(|s| s.plan.stream),
            Some((_, Place::Pool(0))) => self.fallback.block(addr).map(|b| b.stream),
            Some((_, Place::Pool(_))) => self.scratch.block(addr).map(|b| b.stream),
            Some((_, Place::Exact)) => self.exact.stream_of(addr),
        };
        if allocated_on == Some(id) {
            return false;
        }
        self.side.uses.record(addr, stream)
    }

    /// Forgets that the block at `addr` is used on `stream` (torch_npu's
    /// `eraseStream`): for a live block, no event will be recorded there;
    /// for a freed block waiting, its events on `stream` are dropped and it
    /// completes when none is left. `false` when nothing was recorded.
    pub fn erase_stream(&mut self, addr: usize, stream: usize) -> bool {
        if self.side.uses.erase_live(addr, stream) {
            return true;
        }
        let Some(i) = self.side.uses.pending_at(addr) else {
            return false;
        };
        let p = &mut self.side.uses.pending_mut()[i];
        let before = p.events.len();
        let backing = &mut self.backing;
        p.events.retain(|&(s, e)| {
            if s == stream {
                backing.destroy_event(e);
                false
            } else {
                true
            }
        });
        let erased = p.events.len() != before;
        if p.events.is_empty() && !p.stuck {
            let p = self.side.uses.pending_mut().swap_remove(i);
            self.complete(p);
        }
        erased
    }

    /// Freed blocks waiting for other streams' events.
    pub fn pending_blocks(&self) -> usize {
        self.side.uses.pending().len()
    }

    /// Gives the fallback's and the scratch pool's free cached segments and
    /// idle slabs (no live block, no waiting bytes) back to the device
    /// (torch's `emptyCache`). Waits for nothing: waiting blocks stay. A
    /// serving plan whose slab went back reserves it again at the next
    /// step's start.
    pub fn empty_cache(&mut self) {
        self.poll_pending();
        self.fallback.release_cached(&mut self.backing);
        self.scratch.release_cached(&mut self.backing);
        self.stats_pool_sync(0);
        self.release_idle_retiring();
        let idle = self
            .slab
            .as_ref()
            .is_some_and(|s| s.live_count() == 0 && !self.pending_in_slab(s));
        if idle && let Some(slab) = self.slab.take() {
            for (base, _) in slab.regions() {
                self.backing.release(base);
            }
            self.side.parked = Some(slab.plan);
        }
        // A mapped range gives its idle pages back (every run: the caller
        // asked for the cache to go).
        self.backing.trim(usize::MAX);
        self.sync_slabs();
    }

    /// Caps reserved bytes at `fraction` of the device's memory (torch's
    /// `set_per_process_memory_fraction`): past it, a reservation is
    /// refused as the device refuses one, the fallback empties its cache
    /// and tries again, then the request is answered NULL (out of memory).
    pub fn set_memory_fraction(&mut self, fraction: f64, device: i32) -> Result<()> {
        let bad = |reason: String| Error::MemoryFraction {
            fraction,
            device,
            reason,
        };
        if !(fraction.is_finite() && (0.0..=1.0).contains(&fraction)) {
            return Err(bad("it must lie within 0 and 1".to_owned()));
        }
        let mine = self.backing.device();
        if device >= 0 && mine >= 0 && device != mine {
            return Err(bad(format!("this allocator serves device {mine}")));
        }
        let total = self.backing.total_memory().ok_or_else(|| {
            bad(format!(
                "{} does not tell its capacity",
                self.backing.name()
            ))
        })?;
        let cap = (total as f64 * fraction) as u64;
        if !self.backing.set_reserve_cap(cap) {
            self.backing
                .map_inner(|inner| Box::new(Capped::new(inner, cap)));
        }
        Ok(())
    }

    /// The largest free block in bytes (torch's `cacheInfo`): the largest
    /// gap of the current slab that no live or waiting block holds, or the
    /// largest cached free block of the caching pools.
    pub fn cache_info(&self) -> u64 {
        let pools = self
            .fallback
            .model()
            .largest_free_block()
            .max(self.scratch.model().largest_free_block());
        // A mapped range's idle pages serve without a device call too.
        let idle = self.backing.largest_idle_run() as u64;
        pools
            .max(idle)
            .max(self.slab.as_ref().map_or(0, |s| self.largest_gap(s)))
    }

    /// The statistics in the caching allocator's schema.
    pub fn device_stats(&self) -> DeviceStats {
        *self.side.stats.stats()
    }

    /// Every peak of [`PlannedAllocator::device_stats`] back to its current
    /// value (torch's `resetPeakStats`).
    pub fn reset_peak_stats(&mut self) {
        self.side.stats.reset_peak();
    }

    /// The `allocated` / `freed` totals and the plain counters of
    /// [`PlannedAllocator::device_stats`] back to 0 (torch's
    /// `resetAccumulatedStats`).
    pub fn reset_accumulated_stats(&mut self) {
        self.side.stats.reset_accumulated();
    }

    // ---- helpers ----

    fn largest_gap(&self, slab: &PlannedSlab) -> u64 {
        let mut best = 0;
        for (base, len) in slab.regions() {
            let (start, end) = (base as u64, base as u64 + len);
            let mut busy: Vec<(u64, u64)> = slab
                .live_blocks()
                .map(|(addr, slot, _)| (addr as u64, addr as u64 + slot))
                .chain(
                    self.side
                        .uses
                        .pending()
                        .iter()
                        .map(|p| (p.addr as u64, p.addr as u64 + p.len)),
                )
                .filter(|&(a, b)| a < end && b > start)
                .collect();
            busy.sort_unstable();
            let mut at = start;
            for (a, b) in busy {
                best = best.max(a.saturating_sub(at));
                at = at.max(b);
            }
            best = best.max(end.saturating_sub(at));
        }
        best
    }

    fn locate(&self, addr: usize) -> Option<(Origin, Place)> {
        if let Some(s) = self.slab.as_ref().filter(|s| s.contains(addr)) {
            return s.live_block_at(addr).map(|b| (b.origin, Place::Slab));
        }
        if let Some(i) = self.retiring.iter().position(|s| s.contains(addr)) {
            return self.retiring[i]
                .live_block_at(addr)
                .map(|b| (b.origin, Place::Retiring(i)));
        }
        if let Some(b) = self.fallback.block(addr) {
            return Some((b.origin, Place::Pool(0)));
        }
        if let Some(b) = self.scratch.block(addr) {
            return Some((b.origin, Place::Pool(1)));
        }
        self.exact
            .region(addr)
            .map(|(_, _, origin)| (origin, Place::Exact))
    }

    /// The free time the records note for a block used across streams: the
    /// end of the step after its own (so the plan keeps its bytes for two
    /// whole steps, alternating), or now if that is later.
    fn late_free(&self, origin: Origin) -> FreedAt {
        let now = self.now();
        if origin.step == 0 || now.step > origin.step + 1 {
            now
        } else {
            FreedAt {
                step: origin.step + 1,
                clock: u32::MAX,
            }
        }
    }

    fn complete(&mut self, p: Pending) {
        match p.home {
            Home::Slab { slot, size } => {
                self.side.stats.block_inactive(is_small(slot), slot, size);
                if self.checked {
                    self.check_and_poison(p.addr, size, slot);
                }
                self.release_idle_retiring();
            }
            Home::Fallback | Home::Scratch => {
                let which = usize::from(p.home == Home::Scratch);
                let pool = if which == 0 {
                    &mut self.fallback
                } else {
                    &mut self.scratch
                };
                let Some(block) = pool.block(p.addr).copied() else {
                    return;
                };
                pool.free(&mut self.backing, p.addr);
                let pool = if which == 0 {
                    &self.fallback
                } else {
                    &self.scratch
                };
                let small = pool_small(pool, block.size);
                let model = pool.model().stats();
                self.side
                    .stats
                    .observe(which, model, small, true, || pool_segments(pool));
            }
            Home::Exact => {
                if let Some((size, bytes, _)) = self.exact.region(p.addr) {
                    self.exact.free(&mut self.backing, p.addr);
                    let small = is_small(granule(size));
                    self.side.stats.block_inactive(small, granule(size), size);
                    self.side.stats.segment_free(small, bytes);
                    self.side.exact_seen = self.exact.reserved_bytes();
                }
            }
        }
    }

    /// Retiring slabs with no live block and no waiting bytes go back.
    fn release_idle_retiring(&mut self) {
        let mut i = 0;
        while i < self.retiring.len() {
            let s = &self.retiring[i];
            if s.live_count() == 0 && !self.pending_in_slab(s) {
                let old = self.retiring.swap_remove(i);
                for (base, _) in old.regions() {
                    self.backing.release(base);
                }
            } else {
                i += 1;
            }
        }
        self.sync_slabs();
    }
}
