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

use std::time::{Duration, Instant};

use super::search::search_above;
use super::{Interval, SearchConfig, height, validate};

/// Levels, as fractions of the height, below which buffers are held.
const LEVELS: [f64; 7] = [0.9, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2];

/// Passes over the levels at most (each after one that lowered the height).
const PASSES: usize = 8;

/// Instances above this many buffers are left alone (the releases are
/// found pair by pair).
pub(super) const LAYERS_BUFFERS_MAX: usize = 2048;

/// Lowers `offsets` (a valid placement of `items`) layer by layer until a
/// pass lowers nothing, [`PASSES`] are done, or `deadline` passes; each
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
    for _ in 0..PASSES {
        let mut lowered = false;
        for f in LEVELS {
            let left = deadline.map_or(Duration::MAX, |d| {
                d.saturating_duration_since(Instant::now())
            });
            if left.is_zero() {
                return h < start_height;
            }
            let y = (h as f64 * f) as usize;
            let rest: Vec<usize> = (0..items.len())
                .filter(|&i| !items[i].is_trivial() && offsets[i] + items[i].size > y)
                .collect();
            if rest.is_empty() {
                continue;
            }
            upper.fill(false);
            for &i in &rest {
                upper[i] = true;
            }
            let release: Vec<usize> = rest
                .iter()
                .map(|&i| {
                    (0..items.len())
                        .filter(|&j| {
                            !upper[j]
                                && !items[j].is_trivial()
                                && items[i].overlaps_in_time(&items[j])
                        })
                        .map(|j| offsets[j] + items[j].size)
                        .max()
                        .unwrap_or(0)
                })
                .collect();
            let sub: Vec<Interval> = rest.iter().map(|&i| items[i]).collect();
            let incumbent: Vec<usize> = rest.iter().map(|&i| offsets[i]).collect();
            let config = SearchConfig {
                capacity: None,
                minimize: true,
                time_limit: left,
                node_limit: Some(node_limit),
            };
            let out = search_above(&sub, Some(&release), Some(&incumbent), &config);
            if out.height >= h {
                continue;
            }
            let mut candidate = offsets.to_vec();
            for (k, &i) in rest.iter().enumerate() {
                candidate[i] = out.offsets[k];
            }
            let h2 = height(items, &candidate);
            // Checked, not assumed: the search respects the releases.
            if h2 < h && validate(items, &candidate, None).is_ok() {
                offsets.copy_from_slice(&candidate);
                h = h2;
                lowered = true;
            }
        }
        if !lowered {
            break;
        }
    }
    h < start_height
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{iv, xorshift};
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
    fn layers_never_raise_a_random_placement_and_keep_it_valid() {
        let mut draw = xorshift(0x2545_f491_4f6c_dd1du64);
        let mut next = move |m: usize| draw(m as u64);
        for _ in 0..30 {
            let items: Vec<Interval> = (0..5 + next(40))
                .map(|_| {
                    let lower = next(30);
                    iv(lower, lower + 1 + next(12), 1 + next(16))
                })
                .collect();
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
