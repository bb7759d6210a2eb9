//! Offset assignment for buffers with lifetimes: the dynamic storage
//! allocation problem in its static form.
//!
//! A buffer is an [`Interval`]: alive during the half-open time range
//! `[lower, upper)` and `size` bytes long. A placement gives every buffer an
//! offset so that buffers alive at the same time never share a byte; its
//! height is the largest `offset + size`. This module knows nothing of specs
//! or devices, so the planner, the MiniMalloc CSV tools and the trace replay
//! all go through the same code.

use serde::{Deserialize, Serialize};

/// One buffer to place: alive in `[lower, upper)`, `size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Interval {
    /// First time step at which the buffer is alive.
    pub lower: usize,
    /// First time step at which it is no longer alive.
    pub upper: usize,
    /// Bytes it occupies.
    pub size: usize,
}

impl Interval {
    /// Whether two buffers are alive at some common time.
    pub fn overlaps_in_time(&self, other: &Interval) -> bool {
        self.lower < other.upper && other.lower < self.upper
    }
}

/// The largest total size of buffers alive at one time: no placement can be
/// lower than this.
pub fn lower_bound(items: &[Interval]) -> usize {
    // Sweep over start/end events; ends sort before starts at the same time
    // because intervals are half-open.
    let mut events: Vec<(usize, bool, usize)> = Vec::with_capacity(items.len() * 2);
    for it in items.iter().filter(|it| it.lower < it.upper) {
        events.push((it.lower, true, it.size));
        events.push((it.upper, false, it.size));
    }
    events.sort_unstable_by_key(|&(t, is_start, _)| (t, is_start));
    let (mut live, mut best) = (0usize, 0usize);
    for (_, is_start, size) in events {
        if is_start {
            live = live.saturating_add(size);
            best = best.max(live);
        } else {
            live -= size;
        }
    }
    best
}

/// The order in which the greedy placer considers buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GreedyOrder {
    /// Largest first (TFLite's and XLA's "greedy by size").
    Size,
}

/// Places every buffer greedily in `order`, each into the tightest gap
/// between already placed, time-overlapping buffers that holds it (best
/// fit), or on top of them when no gap does. Returns one offset per item.
///
/// Runs in O(n²) time: placed buffers are kept sorted by offset, so each
/// placement is one linear scan.
pub fn greedy(items: &[Interval], order: GreedyOrder) -> Vec<usize> {
    let mut sequence: Vec<usize> = (0..items.len()).collect();
    match order {
        GreedyOrder::Size => sequence.sort_by(|&a, &b| {
            let (x, y) = (&items[a], &items[b]);
            y.size
                .cmp(&x.size)
                .then((y.upper - y.lower).cmp(&(x.upper - x.lower)))
                .then(a.cmp(&b))
        }),
    }
    place_in_sequence(items, &sequence)
}

/// Best-fit placement of `items` taken in the order of `sequence`.
pub fn place_in_sequence(items: &[Interval], sequence: &[usize]) -> Vec<usize> {
    let mut offsets = vec![0usize; items.len()];
    // Placed buffers as (offset, item index), sorted by offset.
    let mut placed: Vec<(usize, usize)> = Vec::with_capacity(items.len());
    for &i in sequence {
        let it = &items[i];
        let mut cursor = 0usize;
        let mut best: Option<(usize, usize)> = None; // (gap, offset)
        for &(off, j) in &placed {
            let other = &items[j];
            if !it.overlaps_in_time(other) {
                continue;
            }
            if off > cursor {
                let gap = off - cursor;
                if gap >= it.size && best.is_none_or(|(g, _)| gap < g) {
                    best = Some((gap, cursor));
                }
            }
            cursor = cursor.max(off + other.size);
        }
        let offset = best.map_or(cursor, |(_, o)| o);
        offsets[i] = offset;
        let at = placed.partition_point(|&(o, _)| o <= offset);
        placed.insert(at, (offset, i));
    }
    offsets
}

/// Height of a placement: the largest `offset + size`.
pub fn height(items: &[Interval], offsets: &[usize]) -> usize {
    items
        .iter()
        .zip(offsets)
        .map(|(it, &o)| o.saturating_add(it.size))
        .max()
        .unwrap_or(0)
}

/// Why a placement is invalid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// Two buffers alive at the same time share bytes.
    Overlap {
        /// Index of the first buffer.
        a: usize,
        /// Index of the second buffer.
        b: usize,
    },
    /// A buffer ends above the capacity.
    OverCapacity {
        /// Index of the buffer.
        item: usize,
        /// Its end offset.
        end: usize,
        /// The capacity.
        capacity: usize,
    },
    /// A buffer's offset is not a multiple of the required alignment.
    Misaligned {
        /// Index of the buffer.
        item: usize,
        /// The alignment.
        align: usize,
    },
    /// The number of offsets differs from the number of buffers.
    Count {
        /// Buffers.
        items: usize,
        /// Offsets given.
        offsets: usize,
    },
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Violation::Overlap { a, b } => write!(
                f,
                "buffers {a} and {b} are alive at the same time and share bytes"
            ),
            Violation::OverCapacity {
                item,
                end,
                capacity,
            } => write!(
                f,
                "buffer {item} ends at {end}, above the capacity {capacity}"
            ),
            Violation::Misaligned { item, align } => {
                write!(f, "buffer {item} is not aligned to {align} bytes")
            }
            Violation::Count { items, offsets } => {
                write!(f, "{offsets} offsets given for {items} buffers")
            }
        }
    }
}

impl std::error::Error for Violation {}

/// Checks that no two time-overlapping buffers share a byte and, when
/// `capacity` is given, that every buffer ends within it.
pub fn validate(
    items: &[Interval],
    offsets: &[usize],
    capacity: Option<usize>,
) -> Result<(), Violation> {
    if items.len() != offsets.len() {
        return Err(Violation::Count {
            items: items.len(),
            offsets: offsets.len(),
        });
    }
    let mut by_offset: Vec<usize> = (0..items.len()).collect();
    by_offset.sort_by_key(|&i| offsets[i]);
    for (k, &i) in by_offset.iter().enumerate() {
        let end = offsets[i].saturating_add(items[i].size);
        if let Some(cap) = capacity
            && end > cap
        {
            return Err(Violation::OverCapacity {
                item: i,
                end,
                capacity: cap,
            });
        }
        // Later buffers start at or after offsets[i]; those starting before
        // `end` share bytes with i.
        for &j in &by_offset[k + 1..] {
            if offsets[j] >= end {
                break;
            }
            if items[j].size > 0 && items[i].size > 0 && items[i].overlaps_in_time(&items[j]) {
                return Err(Violation::Overlap { a: i, b: j });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(lower: usize, upper: usize, size: usize) -> Interval {
        Interval { lower, upper, size }
    }

    #[test]
    fn lower_bound_counts_simultaneous_bytes() {
        let items = [iv(0, 2, 10), iv(1, 3, 20), iv(2, 4, 5)];
        // t=1: 10+20, t=2: 20+5
        assert_eq!(lower_bound(&items), 30);
        assert_eq!(lower_bound(&[]), 0);
    }

    #[test]
    fn disjoint_lifetimes_share_bytes() {
        let items = [iv(0, 1, 100), iv(1, 2, 100)];
        let off = greedy(&items, GreedyOrder::Size);
        assert_eq!(off, vec![0, 0]);
        assert_eq!(height(&items, &off), 100);
        validate(&items, &off, Some(100)).unwrap();
    }

    #[test]
    fn best_fit_takes_the_tightest_gap() {
        // Two long-lived buffers leave gaps of 30 and 10 bytes (made by
        // short-lived fillers); a 10-byte buffer must take the 10-byte gap.
        let items = [
            iv(0, 4, 100), // bottom
            iv(0, 1, 30),  // filler above bottom, frees at t=1
            iv(0, 4, 50),  // middle
            iv(0, 1, 10),  // filler above middle
            iv(0, 4, 60),  // top
            iv(2, 3, 10),  // the buffer to place
        ];
        let seq = [0, 1, 2, 3, 4, 5];
        let off = place_in_sequence(&items, &seq);
        assert_eq!(&off[..5], &[0, 100, 130, 180, 190]);
        assert_eq!(off[5], 180, "best fit picks the 10-byte gap");
        validate(&items, &off, None).unwrap();
    }

    #[test]
    fn validate_reports_overlap_and_capacity() {
        let items = [iv(0, 2, 10), iv(1, 3, 10)];
        assert_eq!(
            validate(&items, &[0, 5], None),
            Err(Violation::Overlap { a: 0, b: 1 })
        );
        assert!(validate(&items, &[0, 10], Some(20)).is_ok());
        assert!(matches!(
            validate(&items, &[0, 10], Some(19)),
            Err(Violation::OverCapacity { item: 1, .. })
        ));
        assert!(matches!(
            validate(&items, &[0], None),
            Err(Violation::Count { .. })
        ));
    }
}
