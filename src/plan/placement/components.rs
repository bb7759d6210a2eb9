//! Independent pieces of a placement problem: groups of buffers whose
//! lifetimes chain together, separated by times at which nothing is alive.
//!
//! Best fit only looks at placed buffers alive with the one it places, so
//! buffers of different pieces never see each other: placing each piece on
//! its own gives the same offsets as placing them all together, and a scan
//! over the placed buffers of one piece replaces a scan over all of them.
//! The default strategy's re-ordering rounds use this; on k time-shifted
//! copies of an instance a round costs k times one copy's, not k².

use super::Interval;

/// Piece number of every item, and the number of pieces. Buffers that
/// take no room ([`Interval::is_trivial`]) get piece 0; the placers skip
/// them. O(n log n).
pub(crate) fn components(items: &[Interval]) -> (Vec<u32>, usize) {
    let mut piece = vec![0u32; items.len()];
    let mut order: Vec<usize> = (0..items.len())
        .filter(|&i| !items[i].is_trivial())
        .collect();
    order.sort_unstable_by_key(|&i| (items[i].lower, i));
    let mut count = 0usize;
    let mut reach = 0usize; // the latest end in the current piece
    for i in order {
        let it = &items[i];
        if count == 0 || it.lower >= reach {
            count += 1;
            reach = it.upper;
        } else {
            reach = reach.max(it.upper);
        }
        piece[i] = u32::try_from(count - 1).unwrap_or(u32::MAX);
    }
    (piece, count.max(1))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::iv;
    use super::*;

    #[test]
    fn pieces_split_where_nothing_is_alive() {
        // [0,3) and [2,5) chain; [5,6) starts when both ended (half-open);
        // [9,9) and the zero-size buffer take no room.
        let items = [
            iv(2, 5, 1),
            iv(5, 6, 1),
            iv(0, 3, 1),
            iv(9, 9, 4),
            iv(7, 8, 0),
        ];
        let (piece, count) = components(&items);
        assert_eq!(count, 2);
        assert_eq!(piece, vec![0, 1, 0, 0, 0]);
        assert_eq!(components(&[]), (vec![], 1));
    }
}
