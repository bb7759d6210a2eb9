//! A planned slab being served: the plan's sites at their offsets in one
//! reserved region, and which of them hold a live block.
//!
//! Live blocks never share a byte: a site is served only when no live
//! site's bytes intersect its own, which one predecessor query over the
//! sites sorted by offset answers (live blocks are disjoint, so the live
//! site starting last below the new block's end is the only candidate).

use std::collections::HashMap;

use crate::align;
use crate::live_set::LiveSet;
use crate::record::Origin;
use crate::request_phase::RequestPhase;
use crate::site_plan::SitePlan;

/// The sites to come whose slots a miss put in a gap keeps clear of
/// where a gap elsewhere fits ([`PlannedSlab::place_in_gap`]). Replays
/// of the generated loops (seeds 1 / 2 / 3 / 4) and the suite, planned /
/// LB geomean and p90 against none: 4 1.064 / 1.064 / 1.071 / 1.055 /
/// 1.020, 16 1.067 / 1.063 / 1.071 / 1.056 / 1.020, 32 1.065 / 1.063 /
/// 1.070 / 1.055 / 1.019 (p90 1.139 / 1.116 / 1.119 / 1.127 / 1.043),
/// 64 1.065 / 1.066 / 1.070 / 1.054 / 1.020; none 1.069 / 1.064 / 1.069 /
/// 1.055 / 1.021 (p90 1.160 / 1.131 / 1.113 / 1.127 / 1.065).
const GAP_LOOKAHEAD: usize = 32;

/// Entries of [`PlannedSlab`]'s table of served blocks, at most: a
/// power of two (the table has the positions' count rounded up to one,
/// between 64 and this).
const RECENT_MAX: usize = 4096;

/// A served slab.
pub struct PlannedSlab {
    /// The plan.
    pub plan: SitePlan,
    /// Address of the slab's first byte.
    pub base: usize,
    /// Bytes of the reserved region (at least the plan's slab).
    pub region_bytes: usize,
    /// The regions behind the slab's offsets, in offset order: `(first
    /// offset, address, bytes)`, contiguous in offsets. One, unless a
    /// re-plan grew the slab: the larger plan then keeps the region it
    /// had and gets one more for the offsets past it, so the old and a new
    /// whole region are never held at once. A slot that would straddle two
    /// regions is not served at its offset.
    pieces: Vec<(u64, usize, u64)>,
    /// Per position: whether its slot straddles two regions.
    straddles: Vec<bool>,
    /// Position of each site's slots in offset order (the second one for
    /// a site with an alternate slot, else the first again).
    position: Vec<[u32; 2]>,
    /// Per site with one slot per kind of step (the plan's `kinds`): the
    /// position of each kind's slot (empty for a site common to every
    /// kind).
    kind_position: Vec<Vec<u32>>,
    /// Per segment of the plan's kinds: the step's kind there, once its
    /// request at the segment's deciding site came.
    kind: Vec<Option<usize>>,
    /// Offset-ordered slots: `(offset, end, site)`.
    by_offset: Vec<(u64, u64, u32)>,
    /// Per position: the first position whose offset is at or past the
    /// slot's end (the bound of its overlap query, fixed by the plan).
    end_bound: Vec<u32>,
    live: LiveSet,
    /// Served blocks by a hash of their offset, `(offset, position)`: a
    /// free finds its block's position in one look-up where the search of
    /// `by_offset` (a chain of dependent loads, a fifth of the C ABI's
    /// alloc + free pair in `benches/alloc_pair.rs`) is needed only on a
    /// collision. An entry is trusted only while its position is live and
    /// starts at the offset: live slots are disjoint, so that is the one
    /// block starting there.
    recent: Vec<(u64, u32)>,
    /// Per position: the request that holds it and its bytes.
    live_block: Vec<(Origin, u64)>,
    live_count: usize,
    /// Per phase: the step's cursor over that phase's sites (an index into
    /// the plan's sequence of the phase, [`crate::align`]).
    cursor: [usize; 2],
    /// Per phase: whether a request of that phase came in this step.
    begun: [bool; 2],
    /// Per phase: another place a recorded step of the phase started at
    /// (the plan's `entries`) whose site the step's first request of the
    /// phase fitted as well as the entry it took, until a request of the
    /// phase is matched from the cursor: a second request that only fits
    /// after that other place moves the cursor there.
    other_entry: [Option<usize>; 2],
    /// Sites that always had one size, by that size, stream and phase, as
    /// indices into their phase's sequence, in order: where a step that
    /// left the plan's order (a block of requests the plan does not know,
    /// longer than the matcher's window) finds its place again.
    fixed_by_size: HashMap<(u64, u32, RequestPhase), Vec<u32>>,
    /// Per phase: the place in its sequence the last unmatched request
    /// would have matched further on: a second unmatched request matching
    /// just after it moves the cursor there.
    resync: [Option<usize>; 2],
    /// The site the last [`PlannedSlab::serve`] call's matcher gave its
    /// request, served or refused ([`crate::merge::NO_SITE`] for none):
    /// the request's anchor ([`crate::merge`]).
    pub last_site: u32,
    /// Whether the last [`PlannedSlab::serve`] call was refused because a
    /// block that a miss of the same step was put in a gap held the
    /// site's bytes.
    pub refused_by_gap_block: bool,
    /// Blocks of an earlier plan that were alive in this region when this
    /// plan took it over: `(offset, end, origin, bytes)`. Served sites
    /// must not overlap them; they are few and freed early in the next
    /// step.
    carried: Vec<(u64, u64, Origin, u64)>,
}

/// A live block of a slab: its address, the request that made it and its
/// bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlabBlock {
    /// The site it occupies, `None` for a block carried from an earlier
    /// plan.
    pub site: Option<usize>,
    /// The request that made it.
    pub origin: Origin,
    /// Bytes asked for.
    pub size: u64,
    /// Bytes of the slot it held.
    pub slot: u64,
}

/// Why a planned site could not be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Every site of the plan was taken already this step.
    Order,
    /// No site at or after the cursor matches the request: one the plan
    /// does not know.
    Unmatched,
    /// The site has no slot (its request outlived steps, or another
    /// stream).
    Unplanned,
    /// Larger than the site's capacity.
    Size,
    /// A live block holds some of the site's bytes.
    Overlap,
    /// The site's slot straddles two of the slab's regions (a plan that
    /// grew the slab): it is served elsewhere, by design.
    Straddle,
}

impl PlannedSlab {
    /// Serves `plan` from the `region_bytes` reserved at `base`.
    pub fn new(plan: SitePlan, base: usize, region_bytes: usize) -> PlannedSlab {
        PlannedSlab::over(plan, vec![(0, base, region_bytes as u64)], Vec::new())
    }

    /// Where the region that grows `old` for `plan` starts, in slab
    /// offsets: the end of `old`'s offsets, or earlier, at the first slot of
    /// `plan` that would cross that end (so that no slot straddles two
    /// regions; the bytes of the old region past that point go unused).
    pub fn growth_start(plan: &SitePlan, old: &PlannedSlab) -> u64 {
        let end = old.pieces.last().map_or(0, |&(o, _, l)| o + l);
        plan.all_slots()
            .into_iter()
            .map(|(o, len)| (o, o + len))
            .filter(|&(o, e)| o < end && e > end)
            .map(|(o, _)| o)
            .min()
            .unwrap_or(end)
    }

    /// Serves `plan`, larger than `old`'s regions, from those regions and
    /// the region reserved at `extra` for the offsets from `start` (see
    /// [`PlannedSlab::growth_start`]) to the plan's end; `old`'s live
    /// blocks stay where they are until freed. Offsets from `start` on are
    /// the new region's; an old block there keeps its bytes in the old
    /// region, and planned slots at the same offsets wait for it to be
    /// freed (the overlap check works on offsets: conservative).
    pub fn grow(
        plan: SitePlan,
        old: PlannedSlab,
        start: u64,
        extra: usize,
        extra_bytes: usize,
    ) -> PlannedSlab {
        let carried = old.live_as_carried();
        let mut pieces = old.pieces;
        pieces.push((start, extra, extra_bytes as u64));
        PlannedSlab::over(plan, pieces, carried)
    }

    /// The addresses of the regions behind the slab (to release them).
    pub fn regions(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.pieces.iter().map(|&(_, base, len)| (base, len))
    }

    /// The address of slab offset `offset` for a slot of `len` bytes (the
    /// last region starting at or before it holds it); `None` when the slot
    /// does not lie in that region.
    fn address(&self, offset: u64, len: u64) -> Option<usize> {
        let i = self
            .pieces
            .partition_point(|&(o, _, _)| o <= offset)
            .checked_sub(1)?;
        let (start, base, bytes) = self.pieces[i];
        (offset + len <= start + bytes).then(|| base + (offset - start) as usize)
    }

    /// The slab offset of address `addr`, if it lies in one of the regions.
    fn offset_of(&self, addr: usize) -> Option<u64> {
        self.pieces
            .iter()
            .find(|&&(_, base, bytes)| addr >= base && ((addr - base) as u64) < bytes)
            .map(|&(start, base, _)| start + (addr - base) as u64)
    }

    /// The live blocks, as blocks carried into a new plan of the same
    /// regions.
    fn live_as_carried(&self) -> Vec<(u64, u64, Origin, u64)> {
        let mut carried: Vec<(u64, u64, Origin, u64)> = self.carried.clone();
        for (p, &(offset, _, _)) in self.by_offset.iter().enumerate() {
            if self.live.contains(p) {
                let (origin, size) = self.live_block[p];
                carried.push((offset, self.block_end(p), origin, size));
            }
        }
        carried
    }

    /// The slab offsets `(start, end)` of live blocks made before step
    /// `step` (kept past their own step: a kept loss, a block a miss put
    /// in a gap), which a plan taking this region over must leave alone.
    pub fn held_before(&self, step: u64) -> Vec<(u64, u64)> {
        self.live_as_carried()
            .into_iter()
            .filter(|&(_, _, origin, _)| origin.step < step)
            .map(|(start, end, _, _)| (start, end))
            .collect()
    }

    /// Whether the slab is one region (it can grow in place).
    pub fn is_one_region(&self) -> bool {
        self.pieces.len() == 1
    }

    /// Serves `plan` from `old`'s one region grown in place to
    /// `region_bytes` (the bytes right after it, in the same mapped
    /// range), or shrunk in place to them (never below the end of a live
    /// block, [`PlannedSlab::live_end`]): `old`'s live blocks stay where
    /// they are until freed, as at a take-over, and no slot straddles
    /// anything.
    pub fn grown_in_place(plan: SitePlan, old: PlannedSlab, region_bytes: usize) -> PlannedSlab {
        let carried = old.live_as_carried();
        PlannedSlab::over(plan, vec![(0, old.base, region_bytes as u64)], carried)
    }

    /// The end, in slab offsets, of the highest live block (planned or
    /// carried): a region shrunk in place must keep it.
    pub fn live_end(&self) -> u64 {
        self.live_offsets()
            .map(|(o, slot, _)| o + slot)
            .max()
            .unwrap_or(0)
    }

    /// Serves `plan` from the region of `old`, whose live blocks stay where
    /// they are until freed.
    pub fn take_over(plan: SitePlan, old: PlannedSlab) -> PlannedSlab {
        let carried = old.live_as_carried();
        PlannedSlab::over(plan, old.pieces, carried)
    }

    fn over(
        plan: SitePlan,
        pieces: Vec<(u64, usize, u64)>,
        carried: Vec<(u64, u64, Origin, u64)>,
    ) -> PlannedSlab {
        let base = pieces.first().map_or(0, |p| p.1);
        let plan_entry = plan.entry;
        let region_bytes = pieces.iter().map(|p| p.2 as usize).sum();
        let mut by_offset: Vec<(u64, u64, u32)> = Vec::with_capacity(plan.sites.len());
        let kind_slots = |k: usize| {
            plan.kinds
                .as_ref()
                .and_then(|kinds| kinds.slots.get(k))
                .filter(|v| !v.is_empty())
        };
        for (k, s) in plan.sites.iter().enumerate() {
            if let Some(slots) = kind_slots(k) {
                for slot in slots {
                    by_offset.push((slot.offset, slot.offset + slot.slot, k as u32));
                }
                continue;
            }
            let len = if s.unplanned.is_some() { 0 } else { s.slot };
            by_offset.push((s.offset, s.offset + len, k as u32));
            if let Some(alt) = s.alternate {
                by_offset.push((alt, alt + len, k as u32));
            }
        }
        // A kind's slot of a site is told from the others by its offset
        // and length (kinds' slots of one site may share an offset; the
        // first found is then every such kind's: the same bytes).
        by_offset.sort_unstable();
        let mut position = vec![[u32::MAX; 2]; plan.sites.len()];
        let mut kind_position: Vec<Vec<u32>> = vec![Vec::new(); plan.sites.len()];
        for (k, kp) in kind_position.iter_mut().enumerate() {
            if let Some(slots) = kind_slots(k) {
                *kp = slots
                    .iter()
                    .map(|slot| {
                        let key = (slot.offset, slot.offset + slot.slot, k as u32);
                        by_offset.partition_point(|e| *e < key) as u32
                    })
                    .collect();
                let first = kp.first().copied().unwrap_or(u32::MAX);
                position[k] = [first, first];
            }
        }
        for (pos, &(offset, _, k)) in by_offset.iter().enumerate() {
            if !kind_position[k as usize].is_empty() {
                continue;
            }
            let site = &plan.sites[k as usize];
            let which = usize::from(site.alternate == Some(offset) && site.offset != offset);
            position[k as usize][which] = pos as u32;
        }
        for p in &mut position {
            if p[1] == u32::MAX {
                p[1] = p[0];
            }
        }
        let mut fixed_by_size: HashMap<(u64, u32, RequestPhase), Vec<u32>> = HashMap::new();
        for seq in &plan.sequences {
            for (j, &k) in seq.iter().enumerate() {
                let site = &plan.sites[k as usize];
                if site.min_size == site.max_size {
                    fixed_by_size
                        .entry((site.min_size, site.stream, site.phase))
                        .or_default()
                        .push(j as u32);
                }
            }
        }
        let n = by_offset.len();
        let end_bound = by_offset
            .iter()
            .map(|&(_, end, _)| by_offset.partition_point(|&(o, _, _)| o < end) as u32)
            .collect();
        let inside = |o: u64, e: u64| {
            let i = pieces.partition_point(|&(start, _, _)| start <= o);
            i > 0 && {
                let (start, _, bytes) = pieces[i - 1];
                e <= start + bytes
            }
        };
        let straddles = by_offset
            .iter()
            .map(|&(o, e, _)| e > o && !inside(o, e))
            .collect();
        PlannedSlab {
            end_bound,
            kind: vec![None; plan.kinds.as_ref().map_or(0, |k| k.segments.len())],
            kind_position,
            plan,
            base,
            region_bytes,
            pieces,
            straddles,
            position,
            by_offset,
            live: LiveSet::new(n),
            recent: vec![(u64::MAX, 0); n.next_power_of_two().clamp(64, RECENT_MAX)],
            live_block: vec![(Origin::OUTSIDE, 0); n],
            live_count: carried.len(),
            cursor: plan_entry,
            begun: [false; 2],
            other_entry: [None; 2],
            fixed_by_size,
            resync: [None; 2],
            last_site: crate::merge::NO_SITE,
            refused_by_gap_block: false,
            carried,
        }
    }

    /// Whether `addr` lies in one of this slab's regions.
    pub fn contains(&self, addr: usize) -> bool {
        self.offset_of(addr).is_some()
    }

    /// A step begins: each phase's cursor goes back to its entry.
    pub fn begin_step(&mut self) {
        self.kind.iter_mut().for_each(|k| *k = None);
        self.cursor = self.plan.entry;
        self.begun = [false; 2];
        self.other_entry = [None; 2];
        self.resync = [None; 2];
    }

    /// The site past the cursor, beyond the matcher's window, that a
    /// request left unmatched rejoins the plan at: when the previous
    /// unmatched request pointed just before it (two in a row agree), the
    /// step has moved on to that part of the plan.
    fn rejoin(&mut self, size: u64, stream: u32, phase: RequestPhase) -> Option<usize> {
        /// How far apart two agreeing unmatched requests may point.
        const AGREE: usize = 8;
        let p = phase.index();
        let sites = self.fixed_by_size.get(&(size, stream, phase))?;
        let next = sites.partition_point(|&k| (k as usize) < self.cursor[p]);
        let Some(&j) = sites.get(next) else {
            self.resync[p] = None;
            return None;
        };
        let j = j as usize;
        let agreed = self.resync[p].is_some_and(|r| r < j && j <= r + AGREE);
        self.resync[p] = Some(j);
        agreed.then_some(j)
    }

    /// Live blocks in the slab.
    pub fn live_count(&self) -> usize {
        self.live_count
    }

    /// Serves the request `origin` of `size` bytes on `stream`, made in
    /// `phase`: the site of that phase the matcher gives it
    /// ([`crate::align`]; each phase has a cursor of its own over its own
    /// sites), when no live block holds any of that site's bytes. A
    /// refused request that took a site still moves its cursor past it.
    /// Returns the address and the slot's bytes.
    pub fn serve(
        &mut self,
        origin: Origin,
        size: u64,
        stream: u32,
        phase: RequestPhase,
    ) -> Result<(usize, u64), Refusal> {
        self.last_site = crate::merge::NO_SITE;
        self.refused_by_gap_block = false;
        let p = phase.index();
        let (sites, seq) = (&self.plan.sites, &self.plan.sequences[p]);
        let shape = |&k: &u32| sites[k as usize].shape();
        let cursor = self.cursor[p];
        let mut found = align::find(seq, shape, cursor, size, stream);
        // The step's first request of the phase: most steps start at the
        // entry site; a step that starts with a block only some steps make
        // (an eval pass) at the place a recorded step like it started, when
        // that site is the request's own (and the entry's is not); else at
        // the first site, when only that one matches.
        let own = |&e: &usize| {
            seq.get(e).is_some_and(|&k| {
                let s = sites[k as usize].shape();
                s.stream == stream && s.min <= size && size <= s.max
            })
        };
        if !self.begun[p] && cursor == self.plan.entry[p] {
            let other = self.plan.entries[p].iter().skip(1).find(|e| own(e));
            // The entry took the request only as a site whose size
            // changes, and it is too small for it: another place a
            // recorded step started at whose sizes bracket it is the
            // step's (a program that settled into a shape larger than
            // every one before, planned with those).
            let too_small = seq
                .get(cursor)
                .is_some_and(|&k| size > sites[k as usize].capacity);
            if found == Some(cursor) && !(too_small && other.is_some()) {
                // Both fit: the entry is kept, the other remembered (a
                // validation pass and an optimizer step under `no_grad`
                // may both start with a small block of one size).
                self.other_entry[p] = other.copied();
            } else {
                found = match other {
                    Some(&e) => Some(e),
                    None => found.or_else(|| align::find(seq, shape, 0, size, stream)),
                };
            }
        } else if let Some(e) = self.other_entry[p] {
            // The second request of the phase: it fits only after the
            // other entry, so the step started there (Lightning's
            // validation steps were unmatched from their second request
            // on: 87% of the suite loop's requests served).
            self.other_entry[p] = None;
            if found.is_none() {
                found = align::find(seq, shape, e + 1, size, stream);
            }
        }
        self.begun[p] = true;
        let Some(j) = found.or_else(|| self.rejoin(size, stream, phase)) else {
            return Err(if self.cursor[p] >= self.plan.sequences[p].len() {
                Refusal::Order
            } else {
                Refusal::Unmatched
            });
        };
        if found.is_some() {
            self.resync[p] = None;
        }
        self.cursor[p] = j + 1;
        let k = self.plan.sequences[p][j] as usize;
        self.last_site = k as u32;
        let site = self.plan.sites[k];
        if site.unplanned.is_some() {
            return Err(Refusal::Unplanned);
        }
        if size > site.capacity {
            return Err(Refusal::Size);
        }
        if let Some(kinds) = &self.plan.kinds
            && let Some(g) = kinds.deciding(k)
            && let Some(kind @ None) = self.kind.get_mut(g)
        {
            *kind = Some(kinds.segments[g].kind_of(size));
        }
        let (pos, capacity) = self.slot_of(k, origin.step);
        if size > capacity || capacity == 0 {
            return Err(Refusal::Size);
        }
        let (offset, end, _) = self.by_offset[pos];
        if self.straddles[pos] {
            return Err(Refusal::Straddle);
        }
        // The bytes the block takes, not its slot's: a plan places sites
        // by the sizes the recorded steps had (step_conflicts.rs), so a
        // smaller block may sit right under a site its slot would reach.
        let taken = self.extent(size, end - offset);
        let bound = if taken == end - offset {
            self.end_bound[pos] as usize
        } else {
            self.by_offset
                .partition_point(|&(o, _, _)| o < offset + taken)
        };
        if let Some(p) = self.live.predecessor(bound)
            && self.block_end(p) > offset
        {
            return Err(Refusal::Overlap);
        }
        if let Some(c) = self
            .carried
            .iter()
            .find(|&&(o, e, _, _)| o < offset + taken && offset < e)
        {
            // Carried blocks of this step are misses put in gaps (those
            // of a plan taken over are older).
            self.refused_by_gap_block = c.2.step == origin.step;
            return Err(Refusal::Overlap);
        }
        let addr = self.address(offset, taken).ok_or(Refusal::Straddle)?;
        self.live.insert(pos);
        let slot = self.recent_slot(offset);
        self.recent[slot] = (offset, pos as u32);
        self.live_block[pos] = (origin, size);
        self.live_count += 1;
        Ok((addr, taken))
    }

    /// The position of site `k`'s slot in a step of number `step` (its
    /// parity's, or its kind's) and the largest request it takes. A step
    /// whose kind is not known yet takes the first kind's slot.
    fn slot_of(&self, k: usize, step: u64) -> (usize, u64) {
        match self.kind_position.get(k).filter(|v| !v.is_empty()) {
            Some(positions) => {
                let segment = self
                    .plan
                    .kinds
                    .as_ref()
                    .and_then(|kinds| kinds.segment_of.get(k))
                    .copied()
                    .unwrap_or(0) as usize;
                let kind = self.kind.get(segment).copied().flatten().unwrap_or(0);
                let capacity = self
                    .plan
                    .kinds
                    .as_ref()
                    .and_then(|kinds| kinds.slots.get(k)?.get(kind))
                    .map_or(0, |s| s.capacity);
                (positions.get(kind).copied().unwrap_or(0) as usize, capacity)
            }
            None => (
                self.position[k][(step % 2) as usize] as usize,
                self.plan.sites[k].capacity,
            ),
        }
    }

    /// The extents `(start, end)` in slab offsets that live blocks hold
    /// (carried ones, planned ones by their own bytes), and an empty one at
    /// each region boundary past the first (a wall: a gap never spans two
    /// regions), sorted.
    fn held_extents(&self) -> Vec<(u64, u64)> {
        let mut live: Vec<(u64, u64)> = self.carried.iter().map(|c| (c.0, c.1)).collect();
        live.extend(
            self.by_offset
                .iter()
                .enumerate()
                .filter(|(p, _)| self.live.contains(*p))
                .map(|(p, &(o, _, _))| (o, self.block_end(p))),
        );
        live.extend(self.pieces.iter().skip(1).map(|&(o, _, _)| (o, o)));
        live.sort_unstable();
        live
    }

    /// Every stretch of the region no live block holds, as addresses
    /// `(addr, len)` (a gap never spans two regions).
    pub fn free_extents(&self) -> Vec<(usize, usize)> {
        let live = self.held_extents();
        let mut out = Vec::new();
        let mut at = 0u64;
        let mut push = |a: u64, b: u64| {
            if b > a
                && let Some(addr) = self.address(a, b - a)
            {
                out.push((addr, (b - a) as usize));
            }
        };
        for &(o, e) in &live {
            if o > at {
                push(at, o);
            }
            at = at.max(e);
        }
        push(at, self.region_bytes as u64);
        out
    }

    /// Places a block of `slot` bytes (`size` asked for) for `origin` in
    /// the smallest gap of the region that no live block holds and that is
    /// large enough (best fit), preferring a gap whose start leaves the
    /// slots of the next [`GAP_LOOKAHEAD`] sites of `phase`'s sequence
    /// alone: a miss put on the slot of a site still to come makes that
    /// site's request miss too, and its block, put in another gap, the
    /// next (generated `loop-1-048`: three overlap misses in four were
    /// refused by such a block). Its address, or `None` when no gap fits.
    /// Such a block is tracked like a block carried from an earlier plan:
    /// planned sites that overlap it wait until it is freed.
    pub fn place_in_gap(
        &mut self,
        origin: Origin,
        size: u64,
        slot: u64,
        phase: RequestPhase,
    ) -> Option<usize> {
        let live = self.held_extents();
        let region = self.region_bytes as u64;
        let mut gaps: Vec<(u64, u64)> = Vec::new();
        let mut at = 0;
        for &(o, e) in &live {
            if o > at {
                gaps.push((at, o - at));
            }
            at = at.max(e);
        }
        if region > at {
            gaps.push((at, region - at));
        }
        let upcoming = self.upcoming_slots(phase, origin.step);
        let holds_upcoming =
            |start: u64| upcoming.iter().any(|&(o, e)| o < start + slot && start < e);
        // Clear of the sites to come first, then best fit.
        let (_, _, offset) = gaps
            .into_iter()
            .filter(|&(_, len)| len >= slot)
            .map(|(start, len)| (holds_upcoming(start), len, start))
            .min()?;
        let addr = self.address(offset, slot)?;
        self.carried.push((offset, offset + slot, origin, size));
        self.live_count += 1;
        Some(addr)
    }

    /// The slots `(start, end)` of the next [`GAP_LOOKAHEAD`] planned
    /// sites of `phase`'s sequence after its cursor, in a step of `step`'s
    /// parity.
    fn upcoming_slots(&self, phase: RequestPhase, step: u64) -> Vec<(u64, u64)> {
        let parity = (step % 2) as usize;
        let p = phase.index();
        self.plan.sequences[p]
            .get(self.cursor[p]..)
            .unwrap_or(&[])
            .iter()
            .take(GAP_LOOKAHEAD)
            .filter_map(|&k| {
                let k = k as usize;
                if self.plan.sites.get(k)?.unplanned.is_some() {
                    return None;
                }
                let pos = if self.kind_position.get(k)?.is_empty() {
                    *self.position.get(k)?.get(parity)? as usize
                } else {
                    self.slot_of(k, step).0
                };
                let &(o, e, _) = self.by_offset.get(pos)?;
                Some((o, e))
            })
            .collect()
    }

    /// Frees the live block at `addr`; `None` when no live block starts
    /// there.
    pub fn free(&mut self, addr: usize) -> Option<SlabBlock> {
        if !self.carried.is_empty() {
            let offset = self.offset_of(addr)?;
            if let Some(i) = self.carried.iter().position(|c| c.0 == offset) {
                let (o, e, origin, size) = self.carried.swap_remove(i);
                self.live_count -= 1;
                return Some(SlabBlock {
                    site: None,
                    origin,
                    size,
                    slot: e - o,
                });
            }
        }
        let pos = self.live_position_at(addr)?;
        let end = self.block_end(pos);
        self.live.remove(pos);
        self.live_count -= 1;
        let (origin, size) = self.live_block[pos];
        let (o, _, site) = self.by_offset[pos];
        Some(SlabBlock {
            site: Some(site as usize),
            origin,
            size,
            slot: end - o,
        })
    }

    /// Bytes a block of `size` takes in a slot of `slot` bytes: its own
    /// slot size (granules, pad and guard), at least a granule, at most
    /// the slot.
    fn extent(&self, size: u64, slot: u64) -> u64 {
        crate::site_plan::slot_for(size, self.plan.pad, self.plan.checked)
            .max(crate::site_plan::GRANULE)
            .min(slot)
    }

    /// Where the live block at position `p` ends (its bytes, not its
    /// slot's).
    fn block_end(&self, p: usize) -> u64 {
        let (offset, end, _) = self.by_offset[p];
        offset + self.extent(self.live_block[p].1, end - offset)
    }

    /// The entry of `recent` for a block at `offset` (multiply-and-shift
    /// hashing: offsets are multiples of the alignment, their low bits
    /// zero).
    fn recent_slot(&self, offset: u64) -> usize {
        let bits = self.recent.len().trailing_zeros();
        (offset.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - bits)) as usize
    }

    /// The position of the live slot whose block starts at `addr`.
    fn live_position_at(&self, addr: usize) -> Option<usize> {
        // Live slots are disjoint, so the live slot starting last at or
        // below the offset is the only one that can start at it.
        let offset = self.offset_of(addr)?;
        let (o, p) = self.recent[self.recent_slot(offset)];
        if o == offset && self.live.contains(p as usize) {
            return Some(p as usize);
        }
        let hi = self.by_offset.partition_point(|&(o, _, _)| o <= offset);
        let p = self.live.predecessor(hi)?;
        (self.by_offset[p].0 == offset).then_some(p)
    }

    /// The site whose live block starts at `addr`.
    pub fn live_site_at(&self, addr: usize) -> Option<usize> {
        self.live_position_at(addr)
            .map(|p| self.by_offset[p].2 as usize)
    }

    /// Live blocks with their slab offsets, slot bytes and bytes asked for
    /// (carried blocks of an earlier plan first).
    fn live_offsets(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        let carried = self.carried.iter().map(|&(o, e, _, size)| (o, e - o, size));
        let planned = self
            .by_offset
            .iter()
            .enumerate()
            .filter(|(p, _)| self.live.contains(*p))
            .map(|(p, &(offset, _, _))| (offset, self.block_end(p) - offset, self.live_block[p].1));
        carried.chain(planned)
    }

    /// Live blocks with their addresses, slot bytes and bytes asked for
    /// (carried blocks of an earlier plan first).
    pub fn live_blocks(&self) -> impl Iterator<Item = (usize, u64, u64)> + '_ {
        self.live_offsets()
            .filter_map(|(o, slot, size)| Some((self.address(o, slot)?, slot, size)))
    }

    /// The largest stretch of a region no live block holds (what a request
    /// could still get here, ignoring the plan).
    pub fn largest_gap(&self) -> u64 {
        let mut blocks: Vec<(u64, u64)> =
            self.live_offsets().map(|(o, slot, _)| (o, slot)).collect();
        // Region boundaries are walls.
        blocks.extend(self.pieces.iter().skip(1).map(|&(o, _, _)| (o, 0)));
        blocks.sort_unstable();
        let (mut at, mut best) = (0u64, 0u64);
        for (o, len) in blocks {
            best = best.max(o.saturating_sub(at));
            at = at.max(o + len);
        }
        best.max((self.region_bytes as u64).saturating_sub(at))
    }

    /// The live block at `addr`: the request that made it, its bytes and
    /// its slot's bytes.
    pub fn live_block_at(&self, addr: usize) -> Option<SlabBlock> {
        let offset = self.offset_of(addr)?;
        if let Some(&(o, e, origin, size)) = self.carried.iter().find(|c| c.0 == offset) {
            return Some(SlabBlock {
                site: None,
                origin,
                size,
                slot: e - o,
            });
        }
        let p = self.live_position_at(addr)?;
        let (origin, size) = self.live_block[p];
        let (o, _, site) = self.by_offset[p];
        Some(SlabBlock {
            site: Some(site as usize),
            origin,
            size,
            slot: self.block_end(p) - o,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::merge::Merger;
    use crate::record::{FreedAt, Request, StepRecord};
    use crate::site_plan::{Room, plan};

    /// `n` blocks of a few sizes, all alive to the step's end.
    fn step(s: u64, n: usize) -> StepRecord {
        let requests = (0..n)
            .map(|i| Request {
                size: 512 * (1 + (i as u64 % 7)),
                stream: 0,
                phase: RequestPhase::Train,
                freed: Some(FreedAt {
                    step: s,
                    clock: n as u32,
                }),
            })
            .collect();
        StepRecord {
            step: s,
            requests,
            ..StepRecord::default()
        }
    }

    #[test]
    fn frees_find_their_blocks_with_more_blocks_than_the_table_has_entries() {
        // More live blocks than `recent` has entries: some frees find
        // their entry taken by another block and search `by_offset`.
        let n = RECENT_MAX + 904;
        let steps = [step(1, n), step(2, n)];
        let refs: Vec<&StepRecord> = steps.iter().collect();
        let merged = Merger::new().restrict(&refs);
        let plan = plan(
            &refs,
            merged,
            2,
            0,
            false,
            Duration::from_secs(5),
            Room::default(),
        );
        let base = 1 << 20;
        let bytes = plan.slab_bytes as usize;
        let mut slab = PlannedSlab::new(plan, base, bytes);
        slab.begin_step();
        let mut served = Vec::with_capacity(n);
        for k in 0..n {
            let origin = Origin {
                step: 3,
                k: k as u32,
            };
            let size = 512 * (1 + (k as u64 % 7));
            let (addr, _) = slab
                .serve(origin, size, 0, RequestPhase::Train)
                .expect("served from the plan");
            served.push((addr, slab.last_site, k as u32));
        }
        assert!(slab.recent.len() < n);
        // Freed in a scrambled order: a stride of 7 visits every index
        // once, 7 being prime and not a factor of `n`.
        assert_ne!(n % 7, 0);
        for j in 0..n {
            let (addr, site, k) = served[(j * 7) % n];
            // Not a block's start: nothing is freed.
            assert!(slab.free(addr + 256).is_none());
            let block = slab.free(addr).expect("a live block starts there");
            assert_eq!((block.site, block.origin.k), (Some(site as usize), k));
            assert!(slab.free(addr).is_none(), "freed twice");
        }
        assert_eq!(slab.live_count, 0);
    }
}
