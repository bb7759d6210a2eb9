//! The search's view of a problem: sections of the time axis, which buffers
//! live in each, which buffers overlap, and where the problem falls apart
//! into independent pieces.
//!
//! A *section* is the set of buffers alive just before some buffer ends.
//! Every set of buffers alive at one time is contained in some section, so
//! the sections carry every capacity constraint, and two buffers overlap in
//! time exactly when their (contiguous) section ranges intersect: the
//! section at the earlier of their two ends holds both.

use super::Interval;

/// Compressed sparse rows: the items of row `r` are
/// `items[start[r]..start[r + 1]]`.
#[derive(Debug, Clone, Default)]
pub(super) struct Csr {
    start: Vec<u32>,
    items: Vec<u32>,
}

impl Csr {
    fn from_rows(rows: usize, pairs: impl Iterator<Item = (u32, u32)> + Clone) -> Csr {
        let mut start = vec![0u32; rows + 1];
        for (r, _) in pairs.clone() {
            start[r as usize + 1] += 1;
        }
        for r in 0..rows {
            start[r + 1] += start[r];
        }
        let mut fill = start.clone();
        let mut items = vec![0u32; start[rows] as usize];
        for (r, x) in pairs {
            let at = &mut fill[r as usize];
            items[*at as usize] = x;
            *at += 1;
        }
        Csr { start, items }
    }

    #[inline]
    pub(super) fn row(&self, r: u32) -> &[u32] {
        let r = r as usize;
        &self.items[self.start[r] as usize..self.start[r + 1] as usize]
    }
}

/// The swept problem. Only non-trivial buffers take part; `ids` maps the
/// search's buffer numbers back to the caller's indices.
#[derive(Debug, Clone, Default)]
pub(super) struct Sweep {
    pub ids: Vec<usize>,
    pub size: Vec<usize>,
    pub width: Vec<usize>,
    /// Section range `[sec_lo, sec_hi)` of each buffer.
    pub sec_lo: Vec<u32>,
    pub sec_hi: Vec<u32>,
    /// Buffers of each section.
    pub members: Csr,
    /// Buffers each buffer overlaps in time.
    pub overlaps: Csr,
    /// Initial total size of each section.
    pub totals: Vec<usize>,
    /// `cuts[s]`: buffers alive in both section `s` and `s + 1`.
    pub cuts: Vec<u32>,
}

/// Why a problem was not swept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TooLarge {
    /// More than [`MAX_BUFFERS`] buffers that take room.
    Buffers,
    /// The section or overlap tables would exceed the memory budget.
    Tables,
    /// Sizes add up to half of `usize` or more, too close to the search's
    /// "placed" marker.
    Sizes,
}

/// The most buffers the search takes on: every level of its depth-first
/// search keeps an ordering of the buffers still unplaced, so its memory
/// grows with the square of this (about 130 MiB at 4096).
pub(super) const MAX_BUFFERS: usize = 4096;

/// Upper bound on section memberships plus overlap pairs (u32 each): keeps
/// the search's tables within a few hundred MiB on dense problems.
const MAX_TABLE_ENTRIES: u64 = 1 << 25;

impl Sweep {
    pub(super) fn new(items: &[Interval]) -> Result<Sweep, TooLarge> {
        let ids: Vec<usize> = (0..items.len())
            .filter(|&i| !items[i].is_trivial())
            .collect();
        if ids.len() > MAX_BUFFERS {
            return Err(TooLarge::Buffers);
        }
        let total = items
            .iter()
            .try_fold(0usize, |acc, it| acc.checked_add(it.size));
        if total.is_none_or(|t| t >= usize::MAX / 2) {
            return Err(TooLarge::Sizes);
        }
        let n = ids.len();
        let its: Vec<&Interval> = ids.iter().map(|&i| &items[i]).collect();
        // One section per distinct end time u: the buffers with lower < u <= upper.
        let mut ends: Vec<usize> = its.iter().map(|it| it.upper).collect();
        ends.sort_unstable();
        ends.dedup();
        let sections = ends.len();
        let sec_lo: Vec<u32> = its
            .iter()
            .map(|it| ends.partition_point(|&u| u <= it.lower) as u32)
            .collect();
        let sec_hi: Vec<u32> = its
            .iter()
            .map(|it| ends.partition_point(|&u| u <= it.upper) as u32)
            .collect();
        let memberships: u64 = (0..n).map(|b| u64::from(sec_hi[b] - sec_lo[b])).sum();
        if memberships > MAX_TABLE_ENTRIES {
            return Err(TooLarge::Tables);
        }
        let member_pairs = (0..n as u32)
            .flat_map(|b| (sec_lo[b as usize]..sec_hi[b as usize]).map(move |s| (s, b)));
        let members = Csr::from_rows(sections, member_pairs);

        // Each overlapping pair is met once, in the section where the later
        // of the two starts (the lower index on a tie meets it).
        let mut pairs: Vec<(u32, u32)> = Vec::new();
        for s in 0..sections as u32 {
            for &b in members.row(s).iter().filter(|&&b| sec_lo[b as usize] == s) {
                for &c in members.row(s) {
                    let lo_c = sec_lo[c as usize];
                    if lo_c < s || (lo_c == s && c > b) {
                        pairs.push((b, c));
                        pairs.push((c, b));
                    }
                }
            }
            if pairs.len() as u64 + memberships > MAX_TABLE_ENTRIES {
                return Err(TooLarge::Tables);
            }
        }
        let overlaps = Csr::from_rows(n, pairs.iter().copied());

        let size: Vec<usize> = its.iter().map(|it| it.size).collect();
        let totals: Vec<usize> = (0..sections as u32)
            .map(|s| {
                members
                    .row(s)
                    .iter()
                    .fold(0usize, |acc, &b| acc.saturating_add(size[b as usize]))
            })
            .collect();
        let mut cuts = vec![0u32; sections.saturating_sub(1)];
        for b in 0..n {
            for s in sec_lo[b]..sec_hi[b].saturating_sub(1) {
                cuts[s as usize] += 1;
            }
        }
        Ok(Sweep {
            width: its.iter().map(|it| it.upper - it.lower).collect(),
            ids,
            size,
            sec_lo,
            sec_hi,
            members,
            overlaps,
            totals,
            cuts,
        })
    }

    /// Number of buffers the search places.
    pub(super) fn len(&self) -> usize {
        self.ids.len()
    }

    /// Number of sections.
    pub(super) fn sections(&self) -> usize {
        self.totals.len()
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::iv;
    use super::*;

    #[test]
    fn sections_overlaps_and_cuts() {
        // a [0,4), b [1,2), c [2,5), d [6,7), trivial e
        let items = [
            iv(0, 4, 10),
            iv(1, 2, 20),
            iv(2, 5, 30),
            iv(6, 7, 40),
            iv(3, 3, 50),
        ];
        let sw = Sweep::new(&items).unwrap();
        assert_eq!(sw.ids, vec![0, 1, 2, 3]);
        // ends 2, 4, 5, 7: sections {a,b}, {a,c}, {c}, {d}
        assert_eq!(sw.sections(), 4);
        assert_eq!(sw.members.row(0), &[0, 1]);
        assert_eq!(sw.members.row(1), &[0, 2]);
        assert_eq!(sw.members.row(2), &[2]);
        assert_eq!(sw.members.row(3), &[3]);
        assert_eq!(sw.totals, vec![30, 40, 30, 40]);
        let mut ov: Vec<Vec<u32>> = (0..4).map(|b| sw.overlaps.row(b).to_vec()).collect();
        ov.iter_mut().for_each(|r| r.sort_unstable());
        assert_eq!(ov, vec![vec![1, 2], vec![0], vec![0], vec![]]);
        // a spans sections 0-1, c spans 1-2; nothing spans 2-3.
        assert_eq!(sw.cuts, vec![1, 1, 0]);
    }

    #[test]
    fn overlaps_match_the_definition() {
        let items: Vec<Interval> = (0..40)
            .map(|i| iv((i * 7) % 13, (i * 7) % 13 + 1 + (i * 3) % 5, 1 + i))
            .collect();
        let sw = Sweep::new(&items).unwrap();
        for a in 0..items.len() {
            let mut got: Vec<u32> = sw.overlaps.row(a as u32).to_vec();
            got.sort_unstable();
            let want: Vec<u32> = (0..items.len())
                .filter(|&b| b != a && items[a].overlaps_in_time(&items[b]))
                .map(|b| b as u32)
                .collect();
            assert_eq!(got, want, "buffer {a}");
        }
    }
}
