//! The first slab's take-over (issue 38, "a take-over that pins
//! nothing"). The recorded steps' blocks live in regions of their own; the
//! blocks a step carries into the next (gradients kept to the next
//! `zero_grad`, set to `None` only after the forward) are still alive there
//! when the slab takes over. The plan gives those blocks' successors the
//! bytes the carried ones hold at a step's start: mapped at the take-over,
//! they would be held twice until the carried blocks are freed, so the
//! slab used to wait (up to [`ACTIVATE_WAIT`] requests, their blocks in
//! regions of their own, held twice as well).
//!
//! Now, in a mapped range, the slab serves from the step's first request
//! with none of its pages mapped ([`Metered::reserve_low_deferred`]). While
//! blocks of the step before are still alive, a block gets only its own
//! pages mapped, [`DEFERRED_MAPS`] blocks at most; past them every page but
//! those lying wholly inside the slots of the plan's carried sites is
//! mapped, and those stay unmapped until a block lands on them (its own
//! pages, as many blocks again): the placement gives no other site those
//! bytes while the carried blocks hold them. Once the step before's
//! blocks are all freed, or at the step's end, the rest is mapped in one
//! go (a call a run), after the idle pages (the carried blocks' freed
//! regions) are unmapped. Pages mapped past the run's peak first unmap
//! idle pages (the carried blocks' freed regions), so the take-over step
//! holds what a later step holds.
//!
//! The pages outside the carried slots were mapped at the step's first
//! request until session 16: with the step before's blocks still alive
//! elsewhere, the take-over step held them twice for its first few
//! requests (generated `loop-25-018`, 0.33 MiB: 1.198x the live lower
//! bound at the take-over, 1.057x deferred; replays of every set, 761
//! loops: 17 lower, 5 higher by more than 0.02, loops above 1.12x 16 ->
//! 10, take-over steps above 1.05x the later peak 4 -> 1, device calls
//! +1.8%).

use super::*;

/// Blocks of a take-over step that may map only their own deferred pages
/// while blocks of the step before are alive; the next maps every deferred
/// page at once (device calls stay few).
const DEFERRED_MAPS: u32 = 8;

impl PlannedAllocator {
    /// Byte ranges `(offset, length)` of `plan`'s slab that blocks carried
    /// into the next step held in the steps it was made from: the slots
    /// (both, for a site with an alternate) of every site whose request
    /// was freed in the step after its own.
    fn carried_slots(&self, plan: &site_plan::SitePlan) -> Vec<(u64, u64)> {
        self.carried_slots_of(plan, &self.basis)
    }

    /// [`PlannedAllocator::carried_slots`] of `plan` made from `basis`.
    pub(super) fn carried_slots_of(
        &self,
        plan: &site_plan::SitePlan,
        basis: &[StepRecord],
    ) -> Vec<(u64, u64)> {
        let latest = self.step.saturating_sub(1);
        let mut sites: Vec<bool> = vec![false; plan.sites.len()];
        for rec in basis {
            let Some(map) = plan.merged.map(rec.step) else {
                continue;
            };
            let fresh = self.records.get(rec.step).unwrap_or(rec);
            for (k, req) in fresh.requests.iter().enumerate() {
                if let (Life::NextStep(_), Some(&j)) = (req.life(rec.step, latest), map.get(k))
                    && let Some(seen) = sites.get_mut(j as usize)
                {
                    *seen = true;
                }
            }
        }
        let mut slots = Vec::new();
        for (site, _) in plan.sites.iter().zip(&sites).filter(|(_, c)| **c) {
            if site.unplanned.is_some() {
                continue;
            }
            slots.push((site.offset, site.slot));
            if let Some(a) = site.alternate {
                slots.push((a, site.slot));
            }
        }
        slots
    }

    /// Reserves the awaited region of `plan` inside a step, none of its
    /// pages mapped yet (see the module's comment); `None` (the fallback
    /// serves) when the backing refuses.
    /// Whether it may go in now is [`PlannedAllocator::defer_now`]'s.
    pub(super) fn reserve_deferring(&mut self, plan: site_plan::SitePlan) -> Option<PlannedSlab> {
        self.counters.plan_moved_this_step = true;
        let bytes = plan.slab_bytes.max(site_plan::GRANULE) as usize;
        // Every page deferred, the carried slots' held past the cap.
        let carried = self.carried_slots(&plan);
        match self
            .backing
            .reserve_low_deferred(bytes, &[(0, bytes as u64)])
        {
            Ok((base, later)) => {
                if self.checked {
                    // Only the mapped pages; the others when they are.
                    let mut at = base;
                    for &(a, l) in later.iter().chain(std::iter::once(&(base + bytes, 0))) {
                        if a > at {
                            let _ = self.backing.fill(at, a - at, POISON_BYTE);
                        }
                        at = a + l;
                    }
                }
                self.deferred = later;
                self.deferred_maps = 0;
                self.deferred_held = carried
                    .iter()
                    .map(|&(o, l)| (base + o as usize, l as usize))
                    .collect();
                Some(PlannedSlab::new(plan, base, bytes))
            }
            Err(e) => {
                self.error(Kind::Replan, || {
                    format!("the plan's {bytes}-byte slab could not be reserved: {e}; the fallback serves")
                });
                None
            }
        }
    }

    /// Whether the awaited region of `plan` goes in at this request, its
    /// carried slots' pages deferred: in a mapped range, when the bytes the
    /// step before still holds beyond those pages (held twice once the slab
    /// is mapped) are at most 1/16 of the slab, as the wait for the carried
    /// blocks allows (with 2 MiB granules, small carried slots defer
    /// little: the wait stays).
    pub(super) fn defer_now(&self, plan: &site_plan::SitePlan) -> bool {
        if !self.ranged() {
            return false;
        }
        let bytes = plan.slab_bytes.max(site_plan::GRANULE) as usize;
        let deferrable = self.backing.deferrable(bytes, &self.carried_slots(plan)) as u64;
        self.live_prev_bytes
            .saturating_sub(deferrable)
            .saturating_mul(16)
            <= plan.slab_bytes
    }

    /// Maps the deferred pages `[addr, addr + slot)` touches before a
    /// block is placed there: only those while blocks of the step before
    /// are alive (the other slot of a site with two, whose first holds the
    /// carried instance in the steps after), every deferred page once none
    /// is, or once [`DEFERRED_MAPS`] blocks mapped their own; in a step
    /// that lent pages (allocator/lending.rs), once `LEND_MAPS` blocks
    /// mapped their own, the lent runs the block touches. `false` when
    /// the backing refused (the block goes elsewhere).
    pub(super) fn map_slot(&mut self, addr: usize, slot: u64) -> bool {
        let end = addr + slot as usize;
        if !self.deferred.iter().any(|&(a, l)| a < end && addr < a + l) {
            return true;
        }
        let prev_alive = self.live_prev_bytes > 0 || !self.retiring.is_empty();
        // Pages a missing step lent (allocator/lending.rs) come back block
        // by block, for more blocks.
        let cap = if self.lending {
            super::lending::LEND_MAPS
        } else {
            DEFERRED_MAPS
        };
        // Past the cap, a step that lent maps the lent runs the block
        // touches, whole: every lent page at once set a new peak where
        // the pages lent were still idle (generated `loop-1-061`, misses
        // borrowing a cut: 1.115x the live lower bound against 1.011x).
        // A run mapped whole is mapped once: at most the runs lent, and
        // those the capped blocks split, a call each.
        if self.lending && self.deferred_maps >= cap {
            return self.map_runs_touching(addr, end);
        }
        if !prev_alive && !self.lending {
            return self.map_all_deferred();
        }
        if self.deferred_maps >= cap {
            if !prev_alive || self.lending || self.deferred_held.is_empty() {
                return self.map_all_deferred();
            }
            // The whole slab was deferred: past the cap, every page but
            // the carried slots' (still held by the step before's blocks
            // elsewhere), then this block's own.
            let held = std::mem::take(&mut self.deferred_held);
            if !self.map_deferred_outside(&held) {
                return false;
            }
            // The carried slots' pages count their own blocks from here,
            // as where only they were deferred.
            self.deferred_maps = 0;
            if !self.deferred.iter().any(|&(a, l)| a < end && addr < a + l) {
                return true;
            }
        }
        self.deferred_maps += 1;
        let page = self.backing.space().map_or(1, |s| s.page());
        let (lo, hi) = (addr / page * page, end.next_multiple_of(page));
        // Lent pages mapped back past the run's peak: the slab lends a
        // cut of its idle pages elsewhere first, as a miss does
        // (allocator/lending.rs).
        if self.lending {
            let back: usize = self
                .deferred
                .iter()
                .map(|&(a, l)| (a + l).min(hi).saturating_sub(a.max(lo)))
                .sum();
            if back > 0 {
                self.lend_before_mapping_back(back as u64);
            }
        }
        let mut keep = Vec::with_capacity(self.deferred.len() + 1);
        let mut ok = true;
        for (a, l) in std::mem::take(&mut self.deferred) {
            let (s, e) = (a.max(lo), (a + l).min(hi));
            if s >= e || !ok {
                keep.push((a, l));
                continue;
            }
            if a < s {
                keep.push((a, s - a));
            }
            if self.map_pages(s, e - s) {
                if e < a + l {
                    keep.push((e, a + l - e));
                }
            } else {
                ok = false;
                keep.push((s, a + l - s));
            }
        }
        self.deferred = keep;
        ok
    }

    /// At a step's end: the deferred pages mapped again where they keep
    /// the run's peak (idle pages unmapped first); the others stay
    /// deferred, mapped as blocks land on them or at a later step's end.
    /// A block a miss put outside the slab on lent pages may outlive the
    /// step (a gradient refused by its site, alive to the next
    /// `zero_grad`): mapping every lent page back beside it set the run's
    /// peak at the step's end (generated `loop-14-000`, fixed shapes and
    /// a masked select: 2.51 MiB reserved for 1.96 live at step 29, 1.276x
    /// the live lower bound over the run; 1.022x now).
    pub(super) fn map_deferred_under_peak(&mut self) {
        self.backing.trim(TRIM_CALLS);
        let mut keep = Vec::new();
        for (a, l) in std::mem::take(&mut self.deferred) {
            if self.backing.current() + l as u64 > self.backing.peak() || !self.map_pages(a, l) {
                keep.push((a, l));
            }
        }
        self.deferred = keep;
    }

    /// Maps the deferred runs that `[addr, end)` touches, whole; `false`
    /// when the backing refused one (it and those not reached stay
    /// deferred).
    fn map_runs_touching(&mut self, addr: usize, end: usize) -> bool {
        let mut ok = true;
        let mut keep = Vec::with_capacity(self.deferred.len());
        for (a, l) in std::mem::take(&mut self.deferred) {
            if ok && a < end && addr < a + l {
                if self.map_pages(a, l) {
                    continue;
                }
                ok = false;
            }
            keep.push((a, l));
        }
        self.deferred = keep;
        ok
    }

    /// Maps the deferred pages lying outside every range of `held`
    /// (pages wholly inside one stay deferred); `false` when the backing
    /// refused one.
    fn map_deferred_outside(&mut self, held: &[(usize, usize)]) -> bool {
        let page = self.backing.space().map_or(1, |s| s.page());
        // Page-aligned interiors of the held ranges, in address order.
        let mut inside: Vec<(usize, usize)> = held
            .iter()
            .map(|&(a, l)| (a.next_multiple_of(page), (a + l) / page * page))
            .filter(|&(s, e)| s < e)
            .collect();
        inside.sort_unstable();
        let mut keep = Vec::new();
        let mut ok = true;
        for (a, l) in std::mem::take(&mut self.deferred) {
            let end = a + l;
            let mut at = a;
            for &(s, e) in &inside {
                if e <= at || s >= end {
                    continue;
                }
                let s = s.max(at);
                if s > at && !(ok && self.map_pages(at, s - at)) {
                    ok = false;
                    keep.push((at, s - at));
                }
                let e = e.min(end);
                keep.push((s, e - s));
                at = e;
            }
            if at < end && !(ok && self.map_pages(at, end - at)) {
                ok = false;
                keep.push((at, end - at));
            }
        }
        keep.sort_unstable();
        self.deferred = keep;
        ok
    }

    /// Maps every deferred page; `false` when the backing refused some
    /// (they stay deferred).
    pub(super) fn map_all_deferred(&mut self) -> bool {
        let runs = std::mem::take(&mut self.deferred);
        for (i, &(a, l)) in runs.iter().enumerate() {
            if !self.map_pages(a, l) {
                self.deferred = runs[i..].to_vec();
                return false;
            }
        }
        true
    }

    /// Maps one deferred run (room made first, see
    /// [`Metered::map_deferred`]), poisoned in checked mode.
    fn map_pages(&mut self, addr: usize, len: usize) -> bool {
        if self.backing.map_deferred(addr, len, TRIM_CALLS).is_err() {
            return false;
        }
        if self.checked {
            let _ = self.backing.fill(addr, len, POISON_BYTE);
        }
        // torch's statistics see the range's mappings (allocator/streams.rs).
        self.sync_slabs();
        true
    }
}
