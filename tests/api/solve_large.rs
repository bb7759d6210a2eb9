//! The branch of `placement::solve`'s default for instances too large for
//! the re-ordering rounds (above 2^34 pairs of buffers per round, the sum
//! over the time-independent pieces of their squared buffer counts): the
//! sweeps (plain, with a lookahead for long buffers, by classes of
//! lifetime length around the busiest times) and the windowed repair,
//! reached here by one overlapping piece of 140,000 buffers (1.96e10
//! pairs), small enough for a second or two in a release build. Only the
//! placement's validity and that the rounds were skipped are asserted; its
//! height against the lower bound at a million buffers is in
//! BENCHMARKS.md ("Planner at a million buffers").

use std::time::Duration;

use tensor_arena::plan::families;
use tensor_arena::plan::placement::{self, Interval, Strategy};

/// Buffers above which one piece's round compares more than 2^34 pairs.
const ONE_PIECE_ROUND_MAX: usize = 1 << 17;

/// Whether the buffers form one time-independent piece: every time
/// between the first start and the last end is crossed by some buffer.
fn one_piece(items: &[Interval]) -> bool {
    let mut by_start: Vec<(usize, usize)> = items.iter().map(|i| (i.lower, i.upper)).collect();
    by_start.sort_unstable();
    let mut reach = by_start[0].1;
    by_start.iter().skip(1).all(|&(lo, hi)| {
        let joined = lo < reach;
        reach = reach.max(hi);
        joined
    })
}

#[test]
#[cfg_attr(debug_assertions, ignore = "a second in release, minutes in debug")]
fn the_default_places_an_instance_above_the_rounds_cap_validly() {
    let items = families::random_run(140_000, 7);
    assert!(items.len() > ONE_PIECE_ROUND_MAX);
    assert!(one_piece(&items), "one piece: its round is n^2 pairs");
    let strategy = Strategy::default().with_time_limit(Duration::from_secs(2));
    let solution = placement::solve(&items, &strategy).unwrap();
    // No two buffers alive at once share a byte; the height is the
    // placement's own and never below the lower bound.
    placement::validate(&items, &solution.offsets, None).unwrap();
    assert_eq!(solution.offsets.len(), items.len());
    assert_eq!(
        solution.height,
        placement::height(&items, &solution.offsets)
    );
    let bound = placement::lower_bound(&items);
    assert_eq!(solution.lower_bound, bound);
    assert!(solution.height >= bound);
    // The large branch: no re-ordering round ran (the first sweep is about
    // 1.1x the lower bound on this graph: below the cap the rounds would
    // run first and count here).
    assert_eq!(solution.rounds, 0, "the rounds were skipped");
    assert!(solution.search_status.is_none(), "no capacity: no search");
    // Each buffer's bytes lie within the height.
    for (it, &o) in items.iter().zip(&solution.offsets) {
        assert!(o + it.size <= solution.height);
    }
    let ratio = solution.height as f64 / bound as f64;
    eprintln!(
        "{} buffers: {ratio:.5}x the lower bound in {:?}",
        items.len(),
        solution.elapsed
    );
}
