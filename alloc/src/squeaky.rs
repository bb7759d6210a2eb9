//! Squeaky-wheel rounds over first-fit orders, shared by the placements
//! that lay a plan's nodes first-fit in an order: the parity placement
//! (`parity.rs`) and the steps' conflicts placement of a first plan
//! (`step_conflicts.rs`). A node at the top of the current placement
//! moves to an earlier place in the order; the new order is kept when its
//! placement is no higher (so the rounds walk plateaus); the lowest
//! placement seen is returned. The random draws come from the caller's
//! fixed-seed generator, so a replay makes the same plan.

/// What a round does when the node it drew at the top is already first
/// in the order (it has no earlier place to go).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum WhenFirst {
    /// Go on with the next round.
    Skip,
    /// End the rounds.
    Stop,
}

/// The lowest placement seen over `rounds` rounds from `order`, whose
/// placement is `start` (returned when no round went lower). `draw(n)`
/// gives a number below `n` (0 for 0); `at_top(p, v)` tells whether node
/// `v` reaches the top of placement `p`; `place` lays an order first-fit.
#[allow(clippy::too_many_arguments)]
pub fn rounds<P: Clone>(
    mut order: Vec<usize>,
    start: P,
    rounds: usize,
    mut draw: impl FnMut(usize) -> usize,
    at_top: impl Fn(&P, usize) -> bool,
    height: impl Fn(&P) -> u64,
    mut place: impl FnMut(&[usize]) -> P,
    when_first: WhenFirst,
) -> P {
    let mut current = start.clone();
    let mut best = start;
    let mut tops: Vec<usize> = Vec::new();
    for _ in 0..rounds {
        tops.clear();
        tops.extend((0..order.len()).filter(|&p| at_top(&current, order[p])));
        let Some(&at) = tops.get(draw(tops.len())) else {
            break;
        };
        if at == 0 {
            match when_first {
                WhenFirst::Skip => continue,
                WhenFirst::Stop => break,
            }
        }
        let mut candidate = order.clone();
        let v = candidate.remove(at);
        candidate.insert(draw(at), v);
        let placed = place(&candidate);
        if height(&placed) <= height(&current) {
            if height(&placed) < height(&best) {
                best = placed.clone();
            }
            current = placed;
            order = candidate;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Unit-height nodes stacked in order: node `v` at the height of the
    /// nodes before it, except that node 0 placed anywhere but first
    /// lets every node go to 0 (a toy placement whose top node, moved
    /// earlier, lowers it).
    fn toy(order: &[usize]) -> (Vec<u64>, u64) {
        let mut offsets = vec![0u64; order.len()];
        if order.first() == Some(&0) {
            for (p, &v) in order.iter().enumerate() {
                offsets[v] = p as u64;
            }
            (offsets, order.len() as u64)
        } else {
            (offsets, 1)
        }
    }

    #[test]
    fn a_top_node_moved_earlier_lowers_the_placement_and_it_is_kept() {
        let order: Vec<usize> = (0..5).collect();
        let start = toy(&order);
        let mut x = 7u64;
        let draw = |n: usize| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            if n == 0 { 0 } else { (x >> 33) as usize % n }
        };
        let best = rounds(
            order,
            start,
            50,
            draw,
            |p: &(Vec<u64>, u64), v| p.0[v] + 1 == p.1,
            |p| p.1,
            toy,
            WhenFirst::Skip,
        );
        assert_eq!(best.1, 1);
    }

    #[test]
    fn no_round_is_made_without_a_node_at_the_top() {
        let start = (vec![0u64; 3], 4u64);
        let mut placed = 0;
        let best = rounds(
            vec![0, 1, 2],
            start.clone(),
            10,
            |_| 0,
            |_, _| false,
            |p| p.1,
            |_| {
                placed += 1;
                (vec![0; 3], 0)
            },
            WhenFirst::Stop,
        );
        assert_eq!((best, placed), (start, 0));
    }
}
