//! The best-fit scan of the re-ordering rounds, laid out for speed.
//!
//! Best fit in an arbitrary order looks, for every buffer, at the placed
//! buffers alive with it in offset order. Kept as one list of placed
//! buffers sorted by offset, that is a scan over all of them, most of
//! which are not alive with it (on idealloc's Y_1, one in ten is). The
//! scan here keeps that list as columns: lifetimes as 32-bit time ranks
//! apart from offsets, so the lifetime test runs over 32 buffers at a time
//! on compact data (the compiler vectorises it) and only the buffers that
//! pass are read further. The list is cut into chunks of at most 512, so
//! an insertion moves one chunk's entries (moving the whole list was a
//! third of the time on Y_1). The lists are per independent piece
//! ([`components`](super::components::components)). The offsets are the
//! same as [`best_fit_offset`](super::best_fit_offset) over the same
//! buffers gives: the tests check it.

use super::Interval;
use super::components::components;

/// What the scan needs of an instance, computed once for every round.
pub(crate) struct Timeline {
    /// Piece of every item.
    piece: Vec<u32>,
    /// Number of pieces (at least 1).
    pieces: usize,
    /// Lifetimes as ranks among the distinct start and end times, which
    /// keeps their order: `[lo, hi)` overlap exactly when the lifetimes
    /// do.
    lo: Vec<u32>,
    hi: Vec<u32>,
}

impl Timeline {
    /// O(n log n).
    pub(crate) fn new(items: &[Interval]) -> Timeline {
        let (piece, pieces) = components(items);
        let mut times: Vec<usize> = items.iter().flat_map(|it| [it.lower, it.upper]).collect();
        times.sort_unstable();
        times.dedup();
        // 2n distinct times fit in 32 bits for any instance that fits in
        // memory (n < 2^31 buffers).
        let rank = |t: usize| u32::try_from(times.partition_point(|&x| x < t)).unwrap_or(u32::MAX);
        Timeline {
            piece,
            pieces,
            lo: items.iter().map(|it| rank(it.lower)).collect(),
            hi: items.iter().map(|it| rank(it.upper)).collect(),
        }
    }

    /// Number of pieces.
    pub(crate) fn pieces(&self) -> usize {
        self.pieces
    }

    /// Lifetime of item `i` as time ranks (`[lo, hi)`), `(0, 0)` if out
    /// of range.
    pub(crate) fn ranks(&self, i: usize) -> (u32, u32) {
        (
            self.lo.get(i).copied().unwrap_or(0),
            self.hi.get(i).copied().unwrap_or(0),
        )
    }

    /// Piece of item `i` (the last piece if out of range).
    pub(crate) fn piece(&self, i: usize) -> usize {
        self.piece
            .get(i)
            .map_or(0, |&p| p as usize)
            .min(self.pieces - 1)
    }
}

/// Lanes of the lifetime test.
const LANES: usize = 32;

/// Buffers per chunk at most: inserting moves at most this many entries.
const CHUNK: usize = 16 * LANES;

/// A run of placed buffers sorted by offset, as columns.
#[derive(Default, Clone)]
struct Chunk {
    lo: Vec<u32>,
    hi: Vec<u32>,
    offset: Vec<usize>,
    end: Vec<usize>,
}

impl Chunk {
    fn len(&self) -> usize {
        self.offset.len()
    }

    /// Bits of the buffers among `base..base + LANES` (or to the end)
    /// alive with `[lo, hi)`.
    #[inline]
    fn alive_with(&self, base: usize, lo: u32, hi: u32) -> u32 {
        let mut mask = 0u32;
        if self.len() - base >= LANES {
            let (l, h) = (&self.lo[base..base + LANES], &self.hi[base..base + LANES]);
            for j in 0..LANES {
                mask |= u32::from((lo < h[j]) & (l[j] < hi)) << j;
            }
        } else {
            for k in base..self.len() {
                mask |= u32::from((lo < self.hi[k]) & (self.lo[k] < hi)) << (k - base);
            }
        }
        mask
    }

    fn insert(&mut self, at: usize, lo: u32, hi: u32, offset: usize, end: usize) {
        self.lo.insert(at, lo);
        self.hi.insert(at, hi);
        self.offset.insert(at, offset);
        self.end.insert(at, end);
    }

    /// Moves the upper half into a new chunk.
    fn split(&mut self) -> Chunk {
        let half = self.len() / 2;
        Chunk {
            lo: self.lo.split_off(half),
            hi: self.hi.split_off(half),
            offset: self.offset.split_off(half),
            end: self.end.split_off(half),
        }
    }
}

/// Placed buffers of one piece, sorted by offset: a list of chunks, so an
/// insertion moves one chunk's entries, not all of them.
#[derive(Default, Clone)]
pub(crate) struct Column {
    chunks: Vec<Chunk>,
}

impl Column {
    /// The best-fit offset for `size` bytes alive in `[lo, hi)` (time
    /// ranks): the lowest of the tightest gaps between the placed buffers
    /// alive with it, else the top of those.
    pub(crate) fn best_fit(&self, lo: u32, hi: u32, size: usize) -> usize {
        let mut cursor = 0usize;
        let mut best: Option<(usize, usize)> = None; // (gap, offset)
        for chunk in &self.chunks {
            let mut base = 0;
            while base < chunk.len() {
                let mut bits = chunk.alive_with(base, lo, hi);
                while bits != 0 {
                    let k = base + bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    let offset = chunk.offset[k];
                    if offset > cursor {
                        let gap = offset - cursor;
                        if gap >= size && best.is_none_or(|(g, _)| gap < g) {
                            if gap == size {
                                return cursor; // nothing fits tighter
                            }
                            best = Some((gap, cursor));
                        }
                    }
                    cursor = cursor.max(chunk.end[k]);
                }
                base += LANES;
            }
        }
        best.map_or(cursor, |(_, o)| o)
    }

    /// Adds a buffer alive in `[lo, hi)` at `offset..end`, keeping the
    /// offsets sorted (where among equal offsets does not change any
    /// later best fit: only the largest end below a gap counts).
    pub(crate) fn insert(&mut self, lo: u32, hi: u32, offset: usize, end: usize) {
        if self.chunks.is_empty() {
            self.chunks.push(Chunk::default());
        }
        // The last chunk starting at or below `offset` (else the first).
        let c = self
            .chunks
            .partition_point(|ch| ch.offset.first().is_some_and(|&o| o <= offset))
            .saturating_sub(1);
        let chunk = &mut self.chunks[c];
        let at = chunk.offset.partition_point(|&o| o <= offset);
        chunk.insert(at, lo, hi, offset, end);
        if chunk.len() >= CHUNK {
            let upper = chunk.split();
            self.chunks.insert(c + 1, upper);
        }
    }
}

/// Best fit of `items` in the order of `sequence`, each buffer compared
/// with the placed buffers of its piece. Buffers that take no room go to
/// offset 0. Returns `None` once `stop()` says so (asked every 1024
/// buffers).
pub(crate) fn place_columns(
    items: &[Interval],
    sequence: &[usize],
    timeline: &Timeline,
    mut stop: impl FnMut() -> bool,
) -> Option<Vec<usize>> {
    let mut offsets = vec![0usize; items.len()];
    let mut columns: Vec<Column> = vec![Column::default(); timeline.pieces()];
    for (k, &i) in sequence.iter().enumerate() {
        if k % 1024 == 1023 && stop() {
            return None;
        }
        let (Some(it), Some(&lo), Some(&hi)) =
            (items.get(i), timeline.lo.get(i), timeline.hi.get(i))
        else {
            continue;
        };
        if it.is_trivial() {
            continue;
        }
        let column = &mut columns[timeline.piece(i)];
        let offset = column.best_fit(lo, hi, it.size);
        offsets[i] = offset;
        column.insert(lo, hi, offset, offset.saturating_add(it.size));
    }
    Some(offsets)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::iv;
    use super::super::{Placed, best_fit_offset, insert_placed, validate};
    use super::*;

    /// The classic scan over one list of every placed buffer.
    fn classic(items: &[Interval], sequence: &[usize]) -> Vec<usize> {
        let mut offsets = vec![0; items.len()];
        let mut placed = Vec::new();
        for &i in sequence {
            if items[i].is_trivial() {
                continue;
            }
            offsets[i] = best_fit_offset(&placed, &items[i]);
            insert_placed(&mut placed, Placed::of(&items[i], offsets[i]));
        }
        offsets
    }

    #[test]
    fn columns_match_the_classic_scan() {
        // More than a chunk of buffers per piece, two pieces, ties and trivial
        // buffers, in a scrambled order.
        let items: Vec<Interval> = (0..1500)
            .map(|i| {
                let lower = (i * 7) % 50 + if i % 2 == 0 { 0 } else { 100 };
                iv(lower, lower + 1 + (i * 13) % 17, (i * 31) % 9)
            })
            .chain([iv(5, 5, 3), iv(60, 70, 4)])
            .collect();
        let sequence: Vec<usize> = (0..items.len()).map(|k| (k * 97) % items.len()).collect();
        let timeline = Timeline::new(&items);
        assert_eq!(timeline.pieces(), 2);
        let fast = place_columns(&items, &sequence, &timeline, || false).unwrap();
        assert_eq!(fast, classic(&items, &sequence));
        validate(&items, &fast, None).unwrap();
    }
}
