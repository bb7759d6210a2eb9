//! Checking a placement: no shared bytes among buffers alive together,
//! everything within the capacity.

use super::Interval;

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
    if let Some(cap) = capacity
        && let Some(i) = (0..items.len()).find(|&i| offsets[i].saturating_add(items[i].size) > cap)
    {
        return Err(Violation::OverCapacity {
            item: i,
            end: offsets[i].saturating_add(items[i].size),
            capacity: cap,
        });
    }
    // A sweep over time keeping the live buffers by offset: they never
    // share a byte while no violation is found, so a new buffer can only
    // collide with its neighbours in offset order. O(n log n) whatever the
    // placement (a scan by offset alone was quadratic where many buffers
    // alive at different times share offsets, as repeated pieces do).
    let mut events: Vec<(usize, bool, usize)> = Vec::with_capacity(items.len() * 2);
    for (i, it) in items.iter().enumerate() {
        if it.size > 0 && it.lower < it.upper {
            events.push((it.lower, true, i));
            events.push((it.upper, false, i));
        }
    }
    // Ends before starts at the same time: lifetimes are half-open.
    events.sort_unstable_by_key(|&(t, is_start, i)| (t, is_start, i));
    let mut live: std::collections::BTreeMap<usize, usize> = std::collections::BTreeMap::new();
    for (_, is_start, i) in events {
        let (lo, hi) = (offsets[i], offsets[i].saturating_add(items[i].size));
        if !is_start {
            live.remove(&lo);
            continue;
        }
        if let Some((&o, &j)) = live.range(..=lo).next_back()
            && o.saturating_add(items[j].size) > lo
        {
            return Err(Violation::Overlap { a: j, b: i });
        }
        if let Some((_, &j)) = live.range(lo..hi).next() {
            return Err(Violation::Overlap { a: j, b: i });
        }
        live.insert(lo, i);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{iv, xorshift};
    use super::*;

    #[test]
    fn validate_reports_overlap_and_capacity() {
        let items = [iv(0, 2, 10), iv(1, 3, 10)];
        assert_eq!(
            validate(&items, &[0, 5], None),
            Err(Violation::Overlap { a: 0, b: 1 })
        );
        assert_eq!(validate(&items, &[0, 10], Some(20)), Ok(()));
        assert!(matches!(
            validate(&items, &[0, 10], Some(19)),
            Err(Violation::OverCapacity { item: 1, .. })
        ));
        assert!(matches!(
            validate(&items, &[0], None),
            Err(Violation::Count { .. })
        ));
    }

    #[test]
    fn agrees_with_every_pair_compared() {
        // Random placements, many invalid: the sweep finds a collision
        // exactly when one of the pairs has one.
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let mut invalid = 0;
        for _ in 0..2000 {
            let n = 1 + next(8);
            let items: Vec<Interval> = (0..n)
                .map(|_| {
                    let l = next(6);
                    iv(l, l + next(4), next(5))
                })
                .collect();
            let offsets: Vec<usize> = (0..n).map(|_| next(12)).collect();
            let pairwise = (0..n).any(|i| {
                (0..i).any(|j| {
                    let (a, b) = (&items[i], &items[j]);
                    a.size > 0
                        && b.size > 0
                        && a.overlaps_in_time(b)
                        && offsets[i] < offsets[j] + b.size
                        && offsets[j] < offsets[i] + a.size
                })
            });
            let found = validate(&items, &offsets, None);
            assert_eq!(
                found.is_err(),
                pairwise,
                "{items:?} at {offsets:?}: {found:?}"
            );
            if let Err(Violation::Overlap { a, b }) = found {
                assert!(items[a].overlaps_in_time(&items[b]));
            }
            invalid += usize::from(pairwise);
        }
        assert!(invalid > 100);
    }

    #[test]
    fn trivial_buffers_never_collide() {
        // An empty lifetime or a zero size shares bytes with nothing.
        let items = [iv(0, 4, 10), iv(2, 2, 10), iv(1, 3, 0)];
        assert_eq!(validate(&items, &[0, 0, 5], None), Ok(()));
        // Offsets near usize::MAX saturate instead of overflowing.
        assert!(matches!(
            validate(&items[..1], &[usize::MAX], Some(100)),
            Err(Violation::OverCapacity { .. })
        ));
    }
}
