//! Pages of a region mapped later than the region is taken (issue 38, the
//! slab's take-over): the first slab's bytes that the plan gives to blocks
//! carried into a step (gradients kept to the next `zero_grad`) are still
//! held, at the take-over, by the previous step's blocks in regions of
//! their own. Mapped at once, those bytes are held twice until the carried
//! blocks are freed; left unmapped until a block lands on them, the slab
//! serves from the step's first request without holding anything twice.
//! And before pages are mapped past the run's peak, idle pages (a freed
//! region's, no live region touching them) go first, a bounded number of
//! calls, so that a new peak never holds pages nobody uses.

use super::*;

/// The most page runs a region's mapping leaves for later (the largest).
const DEFERRED_RUNS: usize = 8;

impl Metered {
    /// A region of `bytes` from the low end of the default stream's range,
    /// as [`Metered::reserve_low`] takes it (every idle page outside it
    /// unmapped first), except that its pages lying wholly inside one of
    /// `defer` (byte ranges `(offset, length)` from the region's start) are
    /// left unmapped. Returns the region's address and those page runs
    /// `(address, length)`: the caller maps them with
    /// [`Metered::map_deferred`] before anything uses their bytes. Without
    /// a range: a plain region, nothing deferred.
    pub fn reserve_low_deferred(
        &mut self,
        bytes: usize,
        defer: &[(u64, u64)],
    ) -> Result<(usize, Vec<(usize, usize)>)> {
        let Some(i) = self.space_of(0) else {
            return Ok((self.reserve_region(bytes)?, Vec::new()));
        };
        let Some(off) = self.spaces[i].1.place(bytes, End::Low) else {
            return Ok((self.reserve_region(bytes)?, Vec::new()));
        };
        let later = self.map_but_deferred(i, off, bytes, defer, &[])?;
        let addr =
            self.spaces[i]
                .1
                .take(off, bytes)
                .ok_or_else(|| crate::error::Error::Backing {
                    backend: self.inner.name(),
                    reason: format!("{bytes} bytes at offset {off} of the range: not free"),
                })?;
        Ok((addr, later))
    }

    /// Grows the region at `addr` of the default stream's range in place to
    /// `bytes` (the slab's region at a larger re-plan, over the pages right
    /// after it: its own overflow's, mapped already, and more), mapping the
    /// pages not mapped yet but those lying wholly inside one of `defer`
    /// (byte ranges `(offset, length)` from the region's start): returns
    /// those page runs `(address, length)`, for the caller to map with
    /// [`Metered::map_deferred`] before anything uses their bytes; `None`,
    /// and nothing done, when the bytes past it are not free or there is no
    /// range. The unmapped pages of `known` (address runs the caller holds
    /// already: lent or deferred) are neither mapped nor returned.
    pub fn grow_in_place_deferred(
        &mut self,
        addr: usize,
        bytes: usize,
        defer: &[(u64, u64)],
        known: &[(usize, usize)],
    ) -> Result<Option<Vec<(usize, usize)>>> {
        let Some((_, space)) = self.spaces.first() else {
            return Ok(None);
        };
        if !space.contains(addr) {
            return Ok(None);
        }
        let off = addr - space.base();
        if !space.can_grow(off, bytes) {
            return Ok(None);
        }
        // As for a new slab: the idle pages outside it go first, so that
        // the pages it maps are never held beside pages nobody uses; its
        // own idle pages (the overflow's, right after it) stay and serve.
        let later = self.map_but_deferred(0, off, bytes, defer, known)?;
        Ok(self.spaces[0].1.grow(off, bytes).then_some(later))
    }

    /// Maps the pages of `[off, off + bytes)` of range `i` not mapped yet
    /// but those lying wholly inside one of `defer` (byte ranges `(offset,
    /// length)` from `off`), after unmapping the range's idle pages outside
    /// it; returns the page runs left unmapped, `(address, length)`.
    fn map_but_deferred(
        &mut self,
        i: usize,
        off: usize,
        bytes: usize,
        defer: &[(u64, u64)],
        known: &[(usize, usize)],
    ) -> Result<Vec<(usize, usize)>> {
        let mut idle = self.spaces[i].1.trimmable(Some((off, bytes)));
        idle.retain(|&(_, l)| l >= self.trim_min);
        self.unmap_runs(i, &idle);
        let held = held_pages(self.spaces[i].1.page(), off, bytes, defer);
        let base = self.spaces[i].1.base();
        let known: Vec<(usize, usize)> = known
            .iter()
            .filter_map(|&(a, l)| Some((a.checked_sub(base)?, l)))
            .collect();
        let mut later = Vec::new();
        for (ro, rl) in without(self.spaces[i].1.unmapped_runs(off, bytes), &known) {
            let (mut at, end) = (ro, ro + rl);
            for &(lo, hi) in &held {
                if hi <= at || lo >= end {
                    continue;
                }
                if lo > at {
                    self.map(base + at, lo - at)?;
                    self.spaces[i].1.note_mapped(at, lo - at);
                }
                let stop = hi.min(end);
                later.push((base + lo.max(at), stop - lo.max(at)));
                at = stop;
            }
            if at < end {
                self.map(base + at, end - at)?;
                self.spaces[i].1.note_mapped(at, end - at);
            }
        }
        Ok(later)
    }

    /// Regions taken from the high end of a range may unmap idle pages
    /// first, `calls` times at most until this is called again, when they
    /// would map pages past the run's peak ([`Metered::make_room`]). The
    /// policy allows it in every step: a step the plan serves whole maps
    /// nothing, so only a step that would set a new peak pays the calls
    /// (a call to unmap, often a call to map the pages again).
    pub fn set_room_calls(&mut self, calls: usize) {
        self.room_calls = calls;
    }

    /// The bytes [`Metered::reserve_low_deferred`] would leave unmapped for
    /// a region of `bytes` and `defer`, were it taken now (0 without a
    /// range).
    pub fn deferrable(&self, bytes: usize, defer: &[(u64, u64)]) -> usize {
        let Some((_, space)) = self.spaces.first() else {
            return 0;
        };
        let Some(off) = space.place(bytes, End::Low) else {
            return 0;
        };
        held_pages(space.page(), off, bytes, defer)
            .iter()
            .map(|&(lo, hi)| hi - lo)
            .sum()
    }

    /// Maps the page run of `len` bytes at `addr` (one that
    /// [`Metered::reserve_low_deferred`] left unmapped, or a part of one,
    /// whole pages), after unmapping the idle pages (at most `max_unmaps`
    /// runs, see [`Metered::trim`]), as the slab's first mapping did: the
    /// regions of the carried blocks freed since are idle now.
    pub fn map_deferred(&mut self, addr: usize, len: usize, max_unmaps: usize) -> Result<()> {
        let Some((_, space)) = self.spaces.first() else {
            return Ok(());
        };
        if !space.contains(addr) {
            return Ok(());
        }
        let (base, off) = (space.base(), addr - space.base());
        self.trim(max_unmaps);
        // Only what is not mapped yet (a run the slab's region took again
        // after a refused map is mapped already).
        for (ro, rl) in self.spaces[0].1.unmapped_runs(off, len) {
            self.map(base + ro, rl)?;
            self.spaces[0].1.note_mapped(ro, rl);
        }
        Ok(())
    }

    /// Unmaps the mapped whole pages of `[addr, addr + len)`, bytes of the
    /// default stream's range that no block uses (a live region's idle
    /// bytes: the slab lending its pages to a miss, allocator/lending.rs),
    /// at most `max_calls` runs, the region staying live; the runs
    /// unmapped, as addresses (for [`Metered::map_deferred`] to map again).
    pub fn lend(&mut self, addr: usize, len: usize, max_calls: usize) -> Vec<(usize, usize)> {
        let Some((_, space)) = self.spaces.first() else {
            return Vec::new();
        };
        if !space.contains(addr) || max_calls == 0 {
            return Vec::new();
        }
        let (base, page) = (space.base(), space.page());
        let lo = (addr - base).next_multiple_of(page);
        let hi = (addr + len - base) / page * page;
        let mut out = Vec::new();
        for (o, l) in space.mapped_runs(lo, hi).into_iter().take(max_calls) {
            if self.unmap(base + o, l).is_ok() {
                self.spaces[0].1.note_unmapped(o, l);
                out.push((base + o, l));
            }
        }
        out
    }

    /// When `need` more mapped bytes would raise the run's peak: unmaps
    /// idle pages (runs of at least the trim minimum, the largest first, at
    /// most `max_calls` runs; none inside `keep`, an extent `(offset,
    /// length)` of range `index` about to be used) until they no longer would, or
    /// none is left. The bytes unmapped.
    pub fn make_room(
        &mut self,
        need: u64,
        max_calls: usize,
        keep: Option<(usize, (usize, usize))>,
    ) -> usize {
        if self.current + need <= self.peak {
            return 0;
        }
        let mut runs: Vec<(usize, usize, usize)> = Vec::new();
        for (i, (_, space)) in self.spaces.iter().enumerate() {
            runs.extend(
                space
                    .trimmable(keep.filter(|&(k, _)| k == i).map(|(_, e)| e))
                    .into_iter()
                    .filter(|&(_, l)| l >= self.trim_min)
                    .map(|(o, l)| (i, o, l)),
            );
        }
        runs.sort_by_key(|&(i, o, l)| (std::cmp::Reverse(l), i, o));
        let mut done = 0;
        for (i, o, l) in runs.into_iter().take(max_calls) {
            if self.current + need <= self.peak {
                break;
            }
            done += self.unmap_runs(i, &[(o, l)]);
        }
        done
    }
}

/// `runs` (offset, length) less the bytes of `known` (offset, length).
fn without(runs: Vec<(usize, usize)>, known: &[(usize, usize)]) -> Vec<(usize, usize)> {
    if known.is_empty() {
        return runs;
    }
    let mut known = known.to_vec();
    known.sort_unstable();
    let mut out = Vec::with_capacity(runs.len());
    for (ro, rl) in runs {
        let (mut at, end) = (ro, ro + rl);
        for &(ko, kl) in &known {
            let ke = ko + kl;
            if ke <= at || ko >= end {
                continue;
            }
            if ko > at {
                out.push((at, ko - at));
            }
            at = at.max(ke);
        }
        if at < end {
            out.push((at, end - at));
        }
    }
    out
}

/// The pages (offsets in the range, `[start, end)`, sorted and apart) of
/// the region of `bytes` at `off` lying wholly inside `defer` (byte ranges
/// from the region's start, merged where they touch before they are cut to
/// whole pages: small slots side by side fill a 2 MiB granule together):
/// the [`DEFERRED_RUNS`] largest runs of them.
fn held_pages(page: usize, off: usize, bytes: usize, defer: &[(u64, u64)]) -> Vec<(usize, usize)> {
    let mut ranges: Vec<(usize, usize)> = defer
        .iter()
        .filter_map(|&(o, l)| {
            let lo = off.checked_add(usize::try_from(o).ok()?)?;
            let hi = lo.checked_add(usize::try_from(l).ok()?)?.min(off + bytes);
            (lo < hi).then_some((lo, hi))
        })
        .collect();
    ranges.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::with_capacity(ranges.len());
    for (lo, hi) in ranges {
        match merged.last_mut() {
            Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
            _ => merged.push((lo, hi)),
        }
    }
    let mut held: Vec<(usize, usize)> = merged
        .into_iter()
        .map(|(lo, hi)| (lo.next_multiple_of(page), hi / page * page))
        .filter(|&(lo, hi)| lo < hi)
        .collect();
    // The largest runs only: each deferred run costs a call to map it and
    // splits the region's own mapping in two.
    if held.len() > DEFERRED_RUNS {
        held.sort_by_key(|&(lo, hi)| (std::cmp::Reverse(hi - lo), lo));
        held.truncate(DEFERRED_RUNS);
        held.sort_unstable();
    }
    held
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: usize = 4096;

    fn metered() -> Metered {
        let mut m = Metered::new(Box::new(
            crate::replay::NullBacking::new(None).with_map_granularity(Some(P)),
        ));
        m.set_space_chunks(0, P);
        assert!(m.use_space(1 << 30));
        m
    }

    #[test]
    fn held_pages_are_whole_pages_inside_the_ranges() {
        assert_eq!(
            held_pages(P, 0, 10 * P, &[(100, 3 * P as u64)]),
            vec![(P, 3 * P)]
        );
        assert_eq!(held_pages(P, 0, 10 * P, &[(0, 100)]), vec![]);
        // Two half pages side by side fill one.
        assert_eq!(
            held_pages(
                P,
                0,
                10 * P,
                &[(P as u64 / 2, P as u64 / 2), (P as u64, P as u64 / 2)]
            ),
            vec![]
        );
        assert_eq!(
            held_pages(
                P,
                0,
                10 * P,
                &[(0, P as u64 / 2), (P as u64 / 2, P as u64 / 2)]
            ),
            vec![(0, P)]
        );
        assert_eq!(
            held_pages(
                P,
                0,
                10 * P,
                &[
                    (0, 2 * P as u64),
                    (2 * P as u64, P as u64),
                    (9 * P as u64, 4 * P as u64)
                ]
            ),
            vec![(0, 3 * P), (9 * P, 10 * P)]
        );
        // Runs of 1..=10 pages, a page apart: the largest DEFERRED_RUNS.
        let mut at = 0u64;
        let mut defer = Vec::new();
        for n in 1..=10u64 {
            defer.push((at, n * P as u64));
            at += (n + 1) * P as u64;
        }
        let held = held_pages(P, 0, at as usize, &defer);
        assert_eq!(held.len(), DEFERRED_RUNS);
        assert!(held.iter().all(|&(lo, hi)| hi - lo >= 3 * P));
        assert!(held.windows(2).all(|w| w[0].1 < w[1].0), "sorted, apart");
    }

    #[test]
    fn deferred_pages_are_mapped_when_asked_and_room_is_made_first() {
        let mut m = metered();
        // An idle 4-page run at the high end: a region freed.
        let r = m.reserve_for(4 * P, 0).unwrap();
        m.release(r);
        let peak = m.peak();
        assert_eq!(peak, 4 * P as u64);
        let (addr, later) = m
            .reserve_low_deferred(10 * P, &[(2 * P as u64, 5 * P as u64)])
            .unwrap();
        assert_eq!(later, vec![(addr + 2 * P, 5 * P)]);
        // The idle run went first; 5 pages mapped of 10.
        assert_eq!(m.current(), 5 * P as u64);
        let calls = m.calls();
        m.map_deferred(addr + 2 * P, 5 * P, 16).unwrap();
        assert_eq!(m.current(), 10 * P as u64);
        assert_eq!(m.calls().since(&calls).map, 1);
        assert!(
            m.space()
                .unwrap()
                .unmapped_runs(addr - m.space().unwrap().base(), 10 * P)
                .is_empty()
        );
    }

    #[test]
    fn a_region_grown_in_place_leaves_the_deferred_pages_of_its_growth() {
        let mut m = metered();
        let (addr, later) = m.reserve_low_deferred(4 * P, &[]).unwrap();
        assert!(later.is_empty());
        assert_eq!(m.current(), 4 * P as u64);
        // Grown to 12 pages, offsets 5P..9P deferred: the old pages stay
        // mapped, the growth's others are mapped, those four wait.
        let later = m
            .grow_in_place_deferred(addr, 12 * P, &[(5 * P as u64, 4 * P as u64)], &[])
            .unwrap();
        assert_eq!(later, Some(vec![(addr + 5 * P, 4 * P)]));
        assert_eq!(m.current(), 8 * P as u64);
        m.map_deferred(addr + 5 * P, 4 * P, 16).unwrap();
        assert_eq!(m.current(), 12 * P as u64);
        // A range the old region's pages cover defers nothing of them.
        let later = m
            .grow_in_place_deferred(addr, 16 * P, &[(0, 2 * P as u64)], &[])
            .unwrap();
        assert_eq!(later, Some(vec![]));
        assert_eq!(m.current(), 16 * P as u64);
        // Not a region of the range: nothing grows.
        assert_eq!(m.grow_in_place_deferred(1, 2 * P, &[], &[]).unwrap(), None);
    }

    #[test]
    fn a_region_grown_in_place_leaves_the_pages_it_is_told_of() {
        let mut m = metered();
        let (addr, _) = m.reserve_low_deferred(4 * P, &[]).unwrap();
        // Two pages lent (unmapped) to a miss that outlives the step.
        let lent = m.lend(addr + P, 2 * P, 8);
        assert_eq!(lent, vec![(addr + P, 2 * P)]);
        assert_eq!(m.current(), 2 * P as u64);
        // Grown to 8 pages told of them: the growth is mapped, they are
        // not, and they are not reported (the caller has them already).
        let later = m.grow_in_place_deferred(addr, 8 * P, &[], &lent).unwrap();
        assert_eq!(later, Some(vec![]));
        assert_eq!(m.current(), 6 * P as u64);
        m.map_deferred(addr + P, 2 * P, 16).unwrap();
        assert_eq!(m.current(), 8 * P as u64);
        // Not told of them, the growth maps them too.
        let mut m = metered();
        let (addr, _) = m.reserve_low_deferred(4 * P, &[]).unwrap();
        m.lend(addr + P, 2 * P, 8);
        m.grow_in_place_deferred(addr, 8 * P, &[], &[]).unwrap();
        assert_eq!(m.current(), 8 * P as u64);
    }

    #[test]
    fn make_room_unmaps_idle_runs_only_past_the_peak() {
        let mut m = metered();
        let a = m.reserve_for(8 * P, 0).unwrap();
        let b = m.reserve_for(P, 0).unwrap();
        m.release(a);
        // 8 idle pages, still mapped: at the peak already, nothing more
        // fits under it.
        assert_eq!(m.current(), 9 * P as u64);
        assert_eq!(m.make_room(0, 16, None), 0);
        assert_eq!(m.make_room(P as u64, 0, None), 0, "no calls allowed");
        assert_eq!(m.make_room(P as u64, 16, None), 8 * P);
        assert_eq!(m.current(), P as u64);
        assert_eq!(
            m.make_room(100 * P as u64, 16, None),
            0,
            "nothing idle left"
        );
        m.release(b);
    }
}
