//! Lowering a placement by re-solving its upper layer exactly.
//!
//! The exact search on a whole instance of a few hundred buffers often
//! stops above what it could reach on fewer: two copies of MiniMalloc's D a
//! quarter span apart (426 buffers) stay 7.5% above the load bound after
//! 10 s of the default, and the search on the whole reaches 7.8%. Here the
//! buffers whose top is above a level `y` (the upper layer) are taken out
//! and placed again by the search, the others held where they are: each
//! upper buffer may not go below the highest top of the lower buffers
//! alive with it (its *release*, `search::search_above`). That is exactly
//! where the upper buffers already are (an upper buffer ends above `y`, a
//! lower one at or below it, so of two alive together the lower one is
//! below), so the current placement is the search's incumbent and the
//! result is never higher. Levels from 0.9 down to 0.2 of the height are
//! tried in turn, and the passes repeat while one lowers the height.
//!
//! Cost: per level, O(n²) to find the releases (n at most
//! [`LAYERS_BUFFERS_MAX`]) and one search of at most `node_limit` nodes.
//! The holes under a lower buffer's top are lost to the upper layer, so a
//! placement whose height is set by a column with holes low down (two
//! copies of F a quarter span apart) is proven optimal layer by layer at
//! once and left as it is.
//!
//! So when the release searches lower nothing more, and time is left, each
//! layer is searched again around obstacles (`search::search_held`): the
//! lower buffers alive with an upper one and reaching above `y -`
//! [`HELD_DEPTH`] `* height` are held where they are with their own
//! lifetimes, and an upper buffer may take a hole under or between them;
//! the lower buffers wholly below that give releases as before. The
//! current placement is again the incumbent. Cost per level: O(n²) to
//! find the held buffers and releases, one search of at most
//! `node_limit` nodes on the layer and its held buffers.

use std::time::{Duration, Instant};

use super::search::{search_above, search_held};
use super::{Interval, SearchConfig, height, time_left, validate};

/// Levels, as fractions of the height, below which buffers are held.
const LEVELS: [f64; 7] = [0.9, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2];

/// How far below a level (as a fraction of the height) the held buffers
/// reach that an upper buffer may pass under; those wholly below give
/// releases. Measured with the held searches from the first pass, two
/// copies of D a quarter span apart (10 s): 1.06140x the load bound at
/// 0.5, 1.06994x at 0.4, 1.07048x at 0.3, 1.06353x at 0.7, 1.08062x with
/// every buffer alive with the layer held (the search slower per node);
/// docs/planner.md, tenth pass.
const HELD_DEPTH: f64 = 0.5;

/// Passes over the levels at most (each after one that lowered the height).
const PASSES: usize = 8;

/// Instances above this many buffers are left alone (the releases are
/// found pair by pair).
pub(super) const LAYERS_BUFFERS_MAX: usize = 2048;

/// Lowers `offsets` (a valid placement of `items`) layer by layer until a
/// pass lowers nothing, [`PASSES`] are done, or `deadline` passes, first on
/// releases, then around held buffers (the module docs); each
/// layer's search has at most `node_limit` nodes. Returns whether the
/// height went down. Deterministic unless the deadline stops it.
pub(super) fn lower_by_layers(
    items: &[Interval],
    offsets: &mut [usize],
    deadline: Option<Instant>,
    node_limit: u64,
) -> bool {
    if items.len() > LAYERS_BUFFERS_MAX {
        return false;
    }
    let start_height = height(items, offsets);
    let mut h = start_height;
    let mut upper = vec![false; items.len()];
    // On releases alone first; then, in the time left, each layer whose
    // release search lowers nothing is searched again around the held
    // buffers near it. With both from the first pass, two copies of D half
    // overlapping went from 1.06002x to 1.06109x (docs/planner.md, tenth
    // pass): the held searches took time the release searches used better.
    for held in [false, true] {
        // In the second round every release search fails as it did at the
        // end of the first until a held search moves something.
        let mut moved = false;
        for _ in 0..PASSES {
            let mut lowered = false;
            for f in LEVELS {
                let left = time_left(deadline);
                if left.is_zero() {
                    return h < start_height;
                }
                let y = (h as f64 * f) as usize;
                let mut any = false;
                for (i, it) in items.iter().enumerate() {
                    upper[i] = !it.is_trivial() && offsets[i] + it.size > y;
                    any |= upper[i];
                }
                if !any {
                    continue;
                }
                if (!held || moved)
                    && let Some(h2) =
                        search_layer_released(items, offsets, &upper, left, node_limit)
                {
                    h = h2;
                    lowered = true;
                    continue;
                }
                if !held {
                    continue;
                }
                let left = time_left(deadline);
                if left.is_zero() {
                    return h < start_height;
                }
                let z = y.saturating_sub((HELD_DEPTH * h as f64) as usize);
                if let Some(h2) = search_layer_held(items, offsets, &upper, z, left, node_limit) {
                    h = h2;
                    lowered = true;
                    moved = true;
                }
            }
            if !lowered {
                break;
            }
        }
    }
    h < start_height
}

/// Searches the buffers marked `upper` again, each released at the
/// highest top of the other buffers alive with it (those are held, and
/// below it). Writes the result into `offsets` and returns the new height
/// where it is lower (and valid).
fn search_layer_released(
    items: &[Interval],
    offsets: &mut [usize],
    upper: &[bool],
    time_limit: Duration,
    node_limit: u64,
) -> Option<usize> {
    let rest: Vec<usize> = (0..items.len()).filter(|&i| upper[i]).collect();
    let release: Vec<usize> = rest
        .iter()
        .map(|&i| highest_top_below(items, offsets, i, |j| !upper[j]))
        .collect();
    let sub: Vec<Interval> = rest.iter().map(|&i| items[i]).collect();
    let incumbent: Vec<usize> = rest.iter().map(|&i| offsets[i]).collect();
    let config = layer_config(time_limit, node_limit);
    let out = search_above(&sub, Some(&release), Some(&incumbent), &config);
    // Checked, not assumed: the search respects the releases.
    keep_if_lower(items, offsets, &rest, &out.offsets, out.height)
}

/// The highest top of the buffers `below` that are alive with buffer `i`
/// (its release: it lies no lower than that); 0 for none.
fn highest_top_below(
    items: &[Interval],
    offsets: &[usize],
    i: usize,
    below: impl Fn(usize) -> bool,
) -> usize {
    (0..items.len())
        .filter(|&j| below(j) && !items[j].is_trivial() && items[i].overlaps_in_time(&items[j]))
        .map(|j| offsets[j] + items[j].size)
        .max()
        .unwrap_or(0)
}

/// The exact search's settings for one layer: minimise, no capacity,
/// bounded by `time_limit` and `node_limit`.
fn layer_config(time_limit: Duration, node_limit: u64) -> SearchConfig {
    SearchConfig {
        capacity: None,
        minimize: true,
        time_limit,
        node_limit: Some(node_limit),
    }
}

/// Writes `found` (the offsets of the buffers `rest`, of height
/// `found_height`) into `offsets` when the whole placement is then lower
/// and valid (checked, not assumed); the new height.
fn keep_if_lower(
    items: &[Interval],
    offsets: &mut [usize],
    rest: &[usize],
    found: &[usize],
    found_height: usize,
) -> Option<usize> {
    let h = height(items, offsets);
    if found_height >= h {
        return None;
    }
    let mut candidate = offsets.to_vec();
    for (k, &i) in rest.iter().enumerate() {
        candidate[i] = found[k];
    }
    let h2 = height(items, &candidate);
    if h2 < h && validate(items, &candidate, None).is_ok() {
        offsets.copy_from_slice(&candidate);
        return Some(h2);
    }
    None
}

/// Searches the buffers marked `upper` again around obstacles: every
/// other buffer alive with one of them and reaching above `z` is held
/// where it is, with its own lifetime, so an upper buffer may take a hole
/// under or between held buffers at the times it lives; the buffers
/// wholly below `z` give each upper buffer alive with them a release (the
/// highest of their tops), as in [`lower_by_layers`]. Writes the result
/// into `offsets` and returns the new height where it is lower (and
/// valid).
fn search_layer_held(
    items: &[Interval],
    offsets: &mut [usize],
    upper: &[bool],
    z: usize,
    time_limit: Duration,
    node_limit: u64,
) -> Option<usize> {
    let rest: Vec<usize> = (0..items.len())
        .filter(|&i| {
            !items[i].is_trivial()
                && (upper[i]
                    || (offsets[i] + items[i].size > z
                        && (0..items.len())
                            .any(|j| upper[j] && items[i].overlaps_in_time(&items[j]))))
        })
        .collect();
    let mut in_rest = vec![false; items.len()];
    for &i in &rest {
        in_rest[i] = true;
    }
    let release: Vec<usize> = rest
        .iter()
        .map(|&i| {
            if upper[i] {
                highest_top_below(items, offsets, i, |j| !in_rest[j])
            } else {
                0
            }
        })
        .collect();
    let sub: Vec<Interval> = rest.iter().map(|&i| items[i]).collect();
    let incumbent: Vec<usize> = rest.iter().map(|&i| offsets[i]).collect();
    let pin: Vec<usize> = rest
        .iter()
        .map(|&i| if upper[i] { usize::MAX } else { offsets[i] })
        .collect();
    let config = layer_config(time_limit, node_limit);
    let out = search_held(&sub, Some(&release), Some(&pin), Some(&incumbent), &config);
    // Checked, not assumed: the search keeps the held buffers in place.
    keep_if_lower(items, offsets, &rest, &out.offsets, out.height)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{iv, random_items, xorshift};
    use super::*;

    #[test]
    fn an_upper_buffer_placed_too_high_comes_down_onto_its_layer() {
        // A long buffer at the bottom; two short ones above it, not alive
        // together, placed one on the other (height 20 where 15 will do).
        let items = [iv(0, 10, 10), iv(0, 5, 5), iv(5, 10, 5)];
        let mut offsets = [0, 10, 15];
        let deadline = Instant::now().checked_add(Duration::from_secs(10));
        assert!(lower_by_layers(&items, &mut offsets, deadline, 10_000));
        validate(&items, &offsets, None).unwrap();
        assert_eq!(height(&items, &offsets), 15);
        // The lower buffer stayed where it was.
        assert_eq!(offsets[0], 0);
    }

    #[test]
    fn an_upper_buffer_drops_into_the_hole_under_a_held_one() {
        // K (top 5, below every level) sits at 3 over a hole [0, 3) that G
        // fills only at time 0. X (size 3) lies on K and the tall T on X:
        // height 38. On its release (K's top) no layer comes lower; with K
        // an obstacle, X takes the hole and T comes down to 5: height 35,
        // the load at times 2-8.
        let items = [iv(0, 1, 3), iv(0, 10, 2), iv(2, 8, 3), iv(2, 8, 30)];
        let mut offsets = [0, 3, 5, 8];
        let deadline = Instant::now().checked_add(Duration::from_secs(10));
        assert!(lower_by_layers(&items, &mut offsets, deadline, 10_000));
        validate(&items, &offsets, None).unwrap();
        assert_eq!(height(&items, &offsets), 35);
        assert_eq!(offsets[..3], [0, 3, 0]);
    }

    #[test]
    fn layers_never_raise_a_random_placement_and_keep_it_valid() {
        let mut draw = xorshift(0x2545_f491_4f6c_dd1du64);
        let mut next = move |m: usize| draw(m as u64);
        for _ in 0..30 {
            let count = 5 + next(40);
            let items = random_items(&mut next, count, 30, 12, 16);
            let mut offsets = super::super::greedy(&items, super::super::GreedyOrder::Start);
            let before = height(&items, &offsets);
            let deadline = Instant::now().checked_add(Duration::from_secs(10));
            let lowered = lower_by_layers(&items, &mut offsets, deadline, 20_000);
            validate(&items, &offsets, None).unwrap();
            let after = height(&items, &offsets);
            assert!(after <= before);
            assert_eq!(lowered, after < before);
        }
    }
}
