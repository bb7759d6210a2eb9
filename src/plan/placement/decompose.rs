//! Never worse than the parts: an instance that splits in time is placed
//! piece by piece, and a piece repeated (the same sizes and lifetimes,
//! shifted in time) is placed once and its offsets reused.
//!
//! - *Splits.* At a time no buffer crosses, the buffers before and after are
//!   never alive together, so each side can use the address space from 0:
//!   the height is the highest piece's. Each piece gets the default
//!   strategy on its own, with a share of the time, and stops as soon as it
//!   is as low as the whole instance's target (a piece below the busiest
//!   one need not reach its own bound). Ten copies of an instance one after
//!   the other are then placed exactly as well as one.
//! - *Near splits.* Where only a few bytes cross a time (at most
//!   [`NEAR_SPLIT_SHARE`] of the load bound, e.g. weights alive through
//!   every step of a training loop), the crossing buffers are placed first,
//!   on their own, at the bottom; each piece between two such times goes
//!   above the highest crossing buffer alive during it. This is only taken
//!   when it costs nothing in the bound: every piece's load plus the
//!   crossing buffers below it must stay within the instance's load bound.
//! - *Repeats.* Pieces are compared by their buffers sorted by (start,
//!   end, size) relative to the piece's first start; equal pieces share one
//!   placement.

use std::collections::HashMap;

use super::Interval;
use super::components::components;

/// The most bytes that may cross a near split, as a fraction of the load
/// bound (1/64: 1.6%).
pub(super) const NEAR_SPLIT_SHARE: usize = 64;

/// One piece: the items it holds (indices into the instance) and the
/// offset its placement starts at.
#[derive(Debug, Clone)]
pub(super) struct Piece {
    pub(super) members: Vec<usize>,
    pub(super) base: usize,
}

/// The pieces of `items` between times no buffer crosses; buffers that take
/// no room are in none. Empty when there is at most one piece.
pub(super) fn exact_pieces(items: &[Interval]) -> Vec<Piece> {
    let (piece, count) = components(items);
    if count < 2 {
        return Vec::new();
    }
    let mut out = vec![
        Piece {
            members: Vec::new(),
            base: 0,
        };
        count
    ];
    for (i, it) in items.iter().enumerate() {
        if !it.is_trivial() {
            out[piece[i] as usize].members.push(i);
        }
    }
    out.retain(|p| !p.members.is_empty());
    if out.len() < 2 { Vec::new() } else { out }
}

/// The near splits of `items`: the buffers crossing times where at most
/// `bound / NEAR_SPLIT_SHARE` bytes cross (indices), and the pieces between
/// those times, the rest of the buffers. `None` when there is no such time.
pub(super) fn near_split(items: &[Interval], bound: usize) -> Option<(Vec<usize>, Vec<Piece>)> {
    let limit = bound / NEAR_SPLIT_SHARE;
    let mut events: Vec<(usize, bool, usize)> = Vec::with_capacity(items.len() * 2);
    for it in items.iter().filter(|it| !it.is_trivial()) {
        events.push((it.lower, true, it.size));
        events.push((it.upper, false, it.size));
    }
    events.sort_unstable_by_key(|&(t, is_start, _)| (t, is_start));
    // Bytes crossing t: alive before t and after it (ends at t processed,
    // starts at t not yet).
    let mut cuts = Vec::new();
    let mut live = 0usize;
    let mut k = 0;
    let mut started = false;
    while k < events.len() {
        let t = events[k].0;
        while k < events.len() && events[k].0 == t && !events[k].1 {
            live = live.saturating_sub(events[k].2);
            k += 1;
        }
        if started && live <= limit && cuts.last() != Some(&t) {
            cuts.push(t);
        }
        while k < events.len() && events[k].0 == t {
            live = live.saturating_add(events[k].2);
            started = true;
            k += 1;
        }
    }
    // The last time (everything ended) is no cut.
    if cuts
        .last()
        .is_some_and(|&t| t >= events.last().map_or(0, |e| e.0))
    {
        cuts.pop();
    }
    if cuts.is_empty() {
        return None;
    }
    let mut crossing = Vec::new();
    let mut pieces = vec![
        Piece {
            members: Vec::new(),
            base: 0,
        };
        cuts.len() + 1
    ];
    for (i, it) in items.iter().enumerate() {
        if it.is_trivial() {
            continue;
        }
        // The first cut after its start; it crosses it if it ends after.
        let c = cuts.partition_point(|&t| t <= it.lower);
        if c < cuts.len() && it.upper > cuts[c] {
            crossing.push(i);
        } else {
            pieces[c].members.push(i);
        }
    }
    pieces.retain(|p| !p.members.is_empty());
    if pieces.len() < 2 && crossing.is_empty() {
        return None;
    }
    Some((crossing, pieces))
}

/// Sets each piece's base: the highest top of a crossing buffer alive
/// during the piece's time span.
pub(super) fn set_bases(
    items: &[Interval],
    crossing: &[usize],
    offsets: &[usize],
    pieces: &mut [Piece],
) {
    // Crossing buffers by start, with a running view is not needed: pieces
    // are few, crossing buffers few; a sort and a scan per piece by the
    // crossing buffers' starts suffices.
    let mut by_start: Vec<(usize, usize, usize)> = crossing
        .iter()
        .zip(offsets)
        .map(|(&i, &o)| (items[i].lower, items[i].upper, o + items[i].size))
        .collect();
    by_start.sort_unstable();
    for p in pieces.iter_mut() {
        let lo = p.members.iter().map(|&i| items[i].lower).min().unwrap_or(0);
        let hi = p.members.iter().map(|&i| items[i].upper).max().unwrap_or(0);
        let end = by_start.partition_point(|&(l, _, _)| l < hi);
        p.base = by_start[..end]
            .iter()
            .filter(|&&(_, u, _)| u > lo)
            .map(|&(_, _, top)| top)
            .max()
            .unwrap_or(0);
    }
}

/// The key of a piece for finding repeats: its buffers sorted by (start,
/// end, size) relative to the first start, and that order.
pub(super) fn canonical(
    items: &[Interval],
    members: &[usize],
) -> (Vec<(usize, usize, usize)>, Vec<usize>) {
    let t0 = members.iter().map(|&i| items[i].lower).min().unwrap_or(0);
    let mut order = members.to_vec();
    order.sort_unstable_by_key(|&i| (items[i].lower, items[i].upper, items[i].size, i));
    let key = order
        .iter()
        .map(|&i| (items[i].lower - t0, items[i].upper - t0, items[i].size))
        .collect();
    (key, order)
}

/// Groups pieces that repeat: for each piece, the index of the first piece
/// equal to it (itself when it is the first), and each piece's canonical
/// order of members.
pub(super) fn repeats(items: &[Interval], pieces: &[Piece]) -> (Vec<usize>, Vec<Vec<usize>>) {
    let mut first: HashMap<Vec<(usize, usize, usize)>, usize> = HashMap::new();
    let mut same = Vec::with_capacity(pieces.len());
    let mut orders = Vec::with_capacity(pieces.len());
    for (k, p) in pieces.iter().enumerate() {
        let (key, order) = canonical(items, &p.members);
        same.push(*first.entry(key).or_insert(k));
        orders.push(order);
    }
    (same, orders)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::iv;
    use super::*;

    #[test]
    fn exact_pieces_split_where_nothing_crosses() {
        let items = [iv(0, 2, 4), iv(1, 3, 4), iv(3, 5, 4), iv(4, 4, 9)];
        let pieces = exact_pieces(&items);
        assert_eq!(pieces.len(), 2);
        assert_eq!(pieces[0].members, vec![0, 1]);
        assert_eq!(pieces[1].members, vec![2]);
        assert!(exact_pieces(&items[..2]).is_empty());
    }

    #[test]
    fn near_splits_lift_the_crossing_buffers_out() {
        // A 1-byte buffer alive throughout; two 100-byte steps.
        let items = [iv(0, 10, 1), iv(0, 5, 100), iv(5, 10, 100)];
        let (crossing, mut pieces) = near_split(&items, 101).unwrap();
        assert_eq!(crossing, vec![0]);
        assert_eq!(pieces.len(), 2);
        set_bases(&items, &crossing, &[0], &mut pieces);
        assert!(pieces.iter().all(|p| p.base == 1));
        // Nothing crosses cheaply when the bound is small: 1 > 101 / 64 fails.
        assert!(near_split(&[iv(0, 10, 50), iv(0, 5, 50), iv(5, 10, 50)], 100).is_none());
    }

    #[test]
    fn repeats_are_found_up_to_a_shift_in_time() {
        let items = [
            iv(0, 2, 4),
            iv(1, 3, 5),
            iv(11, 13, 5),
            iv(10, 12, 4),
            iv(20, 22, 4),
        ];
        let pieces = vec![
            Piece {
                members: vec![0, 1],
                base: 0,
            },
            Piece {
                members: vec![2, 3],
                base: 0,
            },
            Piece {
                members: vec![4],
                base: 0,
            },
        ];
        let (same, orders) = repeats(&items, &pieces);
        assert_eq!(same, vec![0, 0, 2]);
        assert_eq!(orders[1], vec![3, 2]);
    }
}
