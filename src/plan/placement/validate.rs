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
    use super::super::test_support::iv;
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
