//! One reserved address range for every region the allocator holds: the
//! slab, the regions of requests the plan does not serve, the fallback's
//! segments. A region becomes a sub-range of it (no device call), physical
//! pages are mapped only where a region needs them and the range's mapped
//! pages do not cover it yet, and free pages are unmapped only when the
//! policy asks ([`Space::trimmable`]), so that a steady step makes a
//! device call only when a region needs pages not mapped yet, while the
//! memory held stays the pages live blocks use. The slab sits at the low end and grows upwards in place; every
//! other region is taken from the high end, so nothing that outlives a step
//! sits where the slab would grow.
//!
//! [`Space`] only decides (offsets, page runs to map and to unmap); the
//! metering wrapper ([`crate::Metered`]) makes the backing calls. No
//! `unsafe` here.

use std::collections::{BTreeMap, HashMap};

/// Alignment of every region handed out (torch's block granule).
pub const REGION_ALIGN: usize = 512;

/// Which end of the range a region is taken from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The slab: the lowest free extent that fits, from its start.
    Low,
    /// Everything else: the highest free extent that fits, from its end.
    High,
}

/// The layout of one reserved range: free extents, live regions, mapped
/// pages (all as offsets from the range's base).
#[derive(Debug, Clone)]
pub struct Space {
    base: usize,
    size: usize,
    page: usize,
    /// Free extents: offset -> length, coalesced.
    free: BTreeMap<usize, usize>,
    /// Live regions: offset -> length (rounded to [`REGION_ALIGN`]).
    used: HashMap<usize, usize>,
    /// Mapped page runs: offset -> end, coalesced.
    mapped: BTreeMap<usize, usize>,
    mapped_bytes: usize,
}

impl Space {
    /// A range of `size` bytes at `base`, mapped in pages of `page` bytes
    /// (`size` a multiple of `page`, `page` a multiple of
    /// [`REGION_ALIGN`]); nothing mapped.
    pub fn new(base: usize, size: usize, page: usize) -> Space {
        let mut free = BTreeMap::new();
        if size > 0 {
            free.insert(0, size);
        }
        Space {
            base,
            size,
            page: page.max(1),
            free,
            used: HashMap::new(),
            mapped: BTreeMap::new(),
            mapped_bytes: 0,
        }
    }

    /// The range's base address.
    pub fn base(&self) -> usize {
        self.base
    }

    /// The mapping unit.
    pub fn page(&self) -> usize {
        self.page
    }

    /// Bytes mapped now.
    pub fn mapped_bytes(&self) -> usize {
        self.mapped_bytes
    }

    /// Live regions.
    pub fn live_regions(&self) -> usize {
        self.used.len()
    }

    /// Whether `addr` is a live region's start.
    pub fn holds_region(&self, addr: usize) -> bool {
        addr >= self.base && self.used.contains_key(&(addr - self.base))
    }

    /// Whether `addr` lies inside the range.
    pub fn contains(&self, addr: usize) -> bool {
        addr >= self.base && addr - self.base < self.size
    }

    /// Where a region of `len` bytes would go (an offset), if it fits.
    pub fn place(&self, len: usize, end: End) -> Option<usize> {
        let len = len
            .checked_next_multiple_of(REGION_ALIGN)?
            .max(REGION_ALIGN);
        match end {
            End::Low => self
                .free
                .iter()
                .find(|&(_, &l)| l >= len)
                .map(|(&off, _)| off),
            End::High => self
                .free
                .iter()
                .rev()
                .find(|&(_, &l)| l >= len)
                .map(|(&off, &l)| off + l - len),
        }
    }

    /// A region of `len` bytes at `off` (an offset [`Space::place`] gave)
    /// is live from now on; its address (`None`, and nothing changed, when
    /// `[off, off + len)` is not inside one free extent).
    pub fn take(&mut self, off: usize, len: usize) -> Option<usize> {
        let len = len.next_multiple_of(REGION_ALIGN).max(REGION_ALIGN);
        let (&start, &l) = self
            .free
            .range(..=off)
            .next_back()
            .filter(|&(&s, &l)| s + l >= off + len)?;
        self.free.remove(&start);
        if off > start {
            self.free.insert(start, off - start);
        }
        if start + l > off + len {
            self.free.insert(off + len, start + l - off - len);
        }
        self.used.insert(off, len);
        Some(self.base + off)
    }

    /// Whether the live region at `off` can grow in place to `len` bytes:
    /// the bytes right after it are one free extent long enough.
    pub fn can_grow(&self, off: usize, len: usize) -> bool {
        let Some(&have) = self.used.get(&off) else {
            return false;
        };
        let len = len.next_multiple_of(REGION_ALIGN);
        len <= have
            || self
                .free
                .get(&(off + have))
                .is_some_and(|&f| f >= len - have)
    }

    /// The live region at `off` grows in place to `len` bytes (see
    /// [`Space::can_grow`]); `false`, and nothing changed, when it cannot.
    /// Its pages past the old end are not mapped by this call.
    pub fn grow(&mut self, off: usize, len: usize) -> bool {
        if !self.can_grow(off, len) {
            return false;
        }
        let len = len.next_multiple_of(REGION_ALIGN);
        let have = self.used[&off];
        if len <= have {
            return true;
        }
        let at = off + have;
        let f = self.free.remove(&at).unwrap_or(0);
        if f > len - have {
            self.free.insert(off + len, f - (len - have));
        }
        self.used.insert(off, len);
        true
    }

    /// The live region at `off` shrinks in place to `len` bytes (at least
    /// one [`REGION_ALIGN`] granule): its bytes past that go back to the
    /// free extents, their pages still mapped (idle, for
    /// [`Space::trimmable`]). `false`, and nothing changed, when no live
    /// region starts at `off` or it is not longer than `len`.
    pub fn shrink(&mut self, off: usize, len: usize) -> bool {
        let len = len.next_multiple_of(REGION_ALIGN).max(REGION_ALIGN);
        let Some(&have) = self.used.get(&off) else {
            return false;
        };
        if len >= have {
            return false;
        }
        let (s, mut l) = (off + len, have - len);
        if let Some(nl) = self.free.remove(&(off + have)) {
            l += nl;
        }
        self.free.insert(s, l);
        self.used.insert(off, len);
        true
    }

    /// The page runs of `[off, off + len)` (widened to whole pages) that
    /// are not mapped: `(offset, length)` each.
    pub fn unmapped_runs(&self, off: usize, len: usize) -> Vec<(usize, usize)> {
        let len = len.next_multiple_of(REGION_ALIGN).max(REGION_ALIGN);
        let lo = off / self.page * self.page;
        let hi = (off + len).next_multiple_of(self.page).min(self.size);
        let mut runs = Vec::new();
        let mut at = lo;
        // The mapped run that may cover `lo`, then every one starting in
        // the window.
        let first = self.mapped.range(..=lo).next_back().map(|(&s, &e)| (s, e));
        for (s, e) in first
            .into_iter()
            .chain(self.mapped.range(lo + 1..hi).map(|(&s, &e)| (s, e)))
        {
            if e <= at {
                continue;
            }
            if s > at {
                runs.push((at, s.min(hi) - at));
            }
            at = at.max(e);
            if at >= hi {
                break;
            }
        }
        if at < hi {
            runs.push((at, hi - at));
        }
        runs
    }

    /// The page runs to map for a region of `len` bytes at `off`: its
    /// unmapped pages, and when they are fewer than `chunk` bytes, more
    /// unmapped pages of the same free extent beyond them (below the region
    /// for [`End::High`], above it for [`End::Low`]), so that a growing
    /// range maps in few, larger calls. The extra pages are free and
    /// mapped: later regions take them without a call.
    pub fn runs_to_map(
        &self,
        off: usize,
        len: usize,
        end: End,
        chunk: usize,
    ) -> Vec<(usize, usize)> {
        let mut runs = self.unmapped_runs(off, len);
        let need: usize = runs.iter().map(|&(_, l)| l).sum();
        if runs.is_empty() || need >= chunk {
            return runs;
        }
        let extra = (chunk - need).next_multiple_of(self.page);
        let Some((&fs, &fl)) = self.free.range(..=off).next_back() else {
            return runs;
        };
        if fs + fl < off + len {
            return runs;
        }
        match end {
            End::High => {
                let (first_off, first_len) = runs[0];
                let floor = fs.next_multiple_of(self.page);
                let start = first_off.saturating_sub(extra).max(floor);
                if start < first_off
                    && self.unmapped_runs(start, first_off - start) == [(start, first_off - start)]
                {
                    runs[0] = (start, first_len + first_off - start);
                }
            }
            End::Low => {
                let last = runs.len() - 1;
                let (lo, ll) = runs[last];
                let ceiling = ((fs + fl) / self.page * self.page).min(self.size);
                let stop = (lo + ll + extra).min(ceiling);
                if stop > lo + ll
                    && self.unmapped_runs(lo + ll, stop - lo - ll) == [(lo + ll, stop - lo - ll)]
                {
                    runs[last] = (lo, stop - lo);
                }
            }
        }
        runs
    }

    /// The pages `[off, off + len)` are mapped now.
    pub fn note_mapped(&mut self, off: usize, len: usize) {
        let (mut s, mut e) = (off, off + len);
        if let Some((&ps, &pe)) = self.mapped.range(..=s).next_back()
            && pe >= s
        {
            s = ps;
            e = e.max(pe);
            self.mapped.remove(&ps);
        }
        while let Some((&ns, &ne)) = self.mapped.range(s..=e).next() {
            e = e.max(ne);
            self.mapped.remove(&ns);
        }
        self.mapped.insert(s, e);
        self.mapped_bytes += len;
    }

    /// The pages `[off, off + len)` (mapped, inside one run) are unmapped
    /// now.
    pub fn note_unmapped(&mut self, off: usize, len: usize) {
        let Some((&s, &e)) = self.mapped.range(..=off).next_back() else {
            return;
        };
        if e < off + len {
            return;
        }
        self.mapped.remove(&s);
        if s < off {
            self.mapped.insert(s, off);
        }
        if off + len < e {
            self.mapped.insert(off + len, e);
        }
        self.mapped_bytes -= len;
    }

    /// The live region at `addr` is free again (its pages stay mapped);
    /// its length, or `None` when no live region starts there.
    pub fn give_back(&mut self, addr: usize) -> Option<usize> {
        let off = addr.checked_sub(self.base)?;
        let len = self.used.remove(&off)?;
        let (mut s, mut l) = (off, len);
        if let Some((&ps, &pl)) = self.free.range(..s).next_back()
            && ps + pl == s
        {
            self.free.remove(&ps);
            s = ps;
            l += pl;
        }
        if let Some(&nl) = self.free.get(&(s + l)) {
            self.free.remove(&(s + l));
            l += nl;
        }
        self.free.insert(s, l);
        Some(len)
    }

    /// The mapped runs overlapping `[lo, hi)` (whole pages, `lo < hi`),
    /// clipped to it: `(start, end)` each, in order.
    fn mapped_within(&self, lo: usize, hi: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        let first = self.mapped.range(..=lo).next_back().map(|(&s, &e)| (s, e));
        first
            .into_iter()
            .chain(self.mapped.range(lo + 1..hi).map(|(&s, &e)| (s, e)))
            .map(move |(s, e)| (s.max(lo), e.min(hi)))
            .filter(|&(a, b)| a < b)
    }

    /// The mapped page runs inside `[lo, hi)` (whole pages): `(offset,
    /// length)` each, in order; empty when `lo >= hi`.
    pub fn mapped_runs(&self, lo: usize, hi: usize) -> Vec<(usize, usize)> {
        if lo >= hi {
            return Vec::new();
        }
        self.mapped_within(lo, hi)
            .map(|(a, b)| (a, b - a))
            .collect()
    }

    /// The mapped page runs no live region touches, outside `keep` (an
    /// extent about to be used), largest first: `(offset, length)` each.
    pub fn trimmable(&self, keep: Option<(usize, usize)>) -> Vec<(usize, usize)> {
        let mut runs = Vec::new();
        for (&fs, &fl) in &self.free {
            let lo = fs.next_multiple_of(self.page);
            let hi = (fs + fl) / self.page * self.page;
            if lo >= hi {
                continue;
            }
            for (a, b) in self.mapped_within(lo, hi) {
                match keep {
                    Some((ks, kl)) => {
                        let (kl0, kh0) = (
                            ks / self.page * self.page,
                            (ks + kl).next_multiple_of(self.page),
                        );
                        if a < kl0 {
                            runs.push((a, b.min(kl0) - a));
                        }
                        if b > kh0 {
                            let a2 = a.max(kh0);
                            runs.push((a2, b - a2));
                        }
                    }
                    None => runs.push((a, b - a)),
                }
            }
        }
        runs.retain(|&(_, l)| l > 0);
        runs.sort_by_key(|&(o, l)| (std::cmp::Reverse(l), o));
        runs
    }

    /// Bytes mapped that no live region touches.
    pub fn idle_mapped_bytes(&self) -> usize {
        self.trimmable(None).iter().map(|&(_, l)| l).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const P: usize = 4096;

    #[test]
    fn low_and_high_ends_and_coalescing() {
        let mut s = Space::new(1 << 30, 64 * P, P);
        let hi = s.place(1000, End::High).unwrap();
        assert_eq!(hi, 64 * P - 1024);
        let a = s.take(hi, 1000).unwrap();
        let lo = s.place(3 * P, End::Low).unwrap();
        assert_eq!(lo, 0);
        let b = s.take(lo, 3 * P).unwrap();
        assert_eq!(s.take(lo, 3 * P), None, "taken already");
        assert_eq!(s.unmapped_runs(0, 3 * P), vec![(0, 3 * P)]);
        s.note_mapped(0, 3 * P);
        assert!(s.unmapped_runs(0, 3 * P).is_empty());
        assert_eq!(s.unmapped_runs(2 * P, 2 * P), vec![(3 * P, P)]);
        assert_eq!(s.give_back(b), Some(3 * P));
        assert_eq!(s.trimmable(None), vec![(0, 3 * P)]);
        assert_eq!(s.trimmable(Some((P, P))), vec![(0, P), (2 * P, P)]);
        assert_eq!(s.give_back(a), Some(1024));
        assert_eq!(s.free.len(), 1, "coalesced back into one extent");
        s.note_unmapped(P, P);
        assert_eq!(s.mapped_bytes(), 2 * P);
        assert_eq!(s.give_back(a), None, "twice");
    }

    #[test]
    fn a_region_shrinks_in_place_and_its_tail_pages_become_idle() {
        let mut s = Space::new(1 << 30, 64 * P, P);
        let off = s.place(8 * P, End::Low).unwrap();
        s.note_mapped(off, 8 * P);
        let addr = s.take(off, 8 * P).unwrap();
        assert!(!s.shrink(off + 1, P), "no region starts there");
        assert!(!s.shrink(off, 8 * P), "not longer");
        assert!(s.shrink(off, 3 * P));
        assert_eq!(s.free.len(), 1, "the tail joined the free extent after it");
        assert_eq!(s.trimmable(None), vec![(3 * P, 5 * P)]);
        assert!(s.can_grow(off, 8 * P), "it can grow back over its tail");
        assert_eq!(s.give_back(addr), Some(3 * P));
        assert_eq!(s.free.len(), 1);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Take(usize, bool),
        Give(usize),
        Grow(usize, usize),
        Shrink(usize, usize),
        Trim,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (1usize..20_000, any::<bool>()).prop_map(|(l, low)| Op::Take(l, low)),
            (0usize..64).prop_map(Op::Give),
            (0usize..64, 1usize..20_000).prop_map(|(k, l)| Op::Grow(k, l)),
            (0usize..64, 0usize..20_000).prop_map(|(k, l)| Op::Shrink(k, l)),
            Just(Op::Trim),
        ]
    }

    proptest! {
        /// A shadow map of bytes: no byte is in two live regions, every
        /// live region's pages are mapped once its runs are, and a trim
        /// never unmaps a page a live region touches.
        #[test]
        fn never_twice_and_never_unmapped_under_a_live_region(ops in prop::collection::vec(op(), 1..200)) {
            let size = 256 * P;
            let mut s = Space::new(1 << 30, size, P);
            let mut owner = vec![usize::MAX; size / REGION_ALIGN];
            let mut live: Vec<(usize, usize)> = Vec::new();
            for (i, o) in ops.into_iter().enumerate() {
                match o {
                    Op::Take(len, low) => {
                        let end = if low { End::Low } else { End::High };
                        if let Some(off) = s.place(len, end) {
                            for (ro, rl) in s.unmapped_runs(off, len) {
                                s.note_mapped(ro, rl);
                            }
                            let addr = s.take(off, len).unwrap();
                            let off = addr - s.base();
                            let l = len.next_multiple_of(REGION_ALIGN);
                            for o in &mut owner[off / REGION_ALIGN..(off + l) / REGION_ALIGN] {
                                prop_assert_eq!(*o, usize::MAX, "granule handed out twice");
                                *o = i;
                            }
                            prop_assert!(s.unmapped_runs(off, l).is_empty());
                            live.push((addr, l));
                        }
                    }
                    Op::Give(k) if !live.is_empty() => {
                        let (addr, l) = live.swap_remove(k % live.len());
                        prop_assert_eq!(s.give_back(addr), Some(l));
                        let off = addr - s.base();
                        owner[off / REGION_ALIGN..(off + l) / REGION_ALIGN].fill(usize::MAX);
                    }
                    Op::Give(_) => {}
                    Op::Grow(k, more) if !live.is_empty() => {
                        let j = k % live.len();
                        let (addr, l) = live[j];
                        let off = addr - s.base();
                        let want = l + more;
                        let could = s.can_grow(off, want);
                        prop_assert_eq!(s.grow(off, want), could);
                        if could {
                            let nl = want.next_multiple_of(REGION_ALIGN);
                            for (ro, rl) in s.unmapped_runs(off, nl) {
                                s.note_mapped(ro, rl);
                            }
                            for o in &mut owner[(off + l) / REGION_ALIGN..(off + nl) / REGION_ALIGN] {
                                prop_assert_eq!(*o, usize::MAX, "grown over a live granule");
                                *o = i;
                            }
                            live[j] = (addr, nl);
                        }
                    }
                    Op::Grow(..) => {}
                    Op::Shrink(k, to) if !live.is_empty() => {
                        let j = k % live.len();
                        let (addr, l) = live[j];
                        let off = addr - s.base();
                        let nl = to.next_multiple_of(REGION_ALIGN).max(REGION_ALIGN);
                        prop_assert_eq!(s.shrink(off, to), nl < l);
                        if nl < l {
                            owner[(off + nl) / REGION_ALIGN..(off + l) / REGION_ALIGN].fill(usize::MAX);
                            live[j] = (addr, nl);
                        }
                    }
                    Op::Shrink(..) => {}
                    Op::Trim => {
                        for (ro, rl) in s.trimmable(None) {
                            for &o in &owner[ro / REGION_ALIGN..(ro + rl) / REGION_ALIGN] {
                                prop_assert_eq!(o, usize::MAX, "a live byte unmapped");
                            }
                            s.note_unmapped(ro, rl);
                        }
                        prop_assert_eq!(s.idle_mapped_bytes(), 0);
                    }
                }
                let mapped: usize = s.mapped.iter().map(|(a, b)| b - a).sum();
                prop_assert_eq!(mapped, s.mapped_bytes());
            }
        }
    }
}
