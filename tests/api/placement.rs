//! Placement properties through the public API:
//!
//! - on small random instances the search's minimum equals a brute force
//!   over every offset assignment, fit mode finds a placement exactly when
//!   one exists, and every placement returned validates;
//! - on larger random instances every strategy returns a valid placement,
//!   best of orders is never above greedy by size and the search never
//!   above best of orders;
//! - the sweep (best fit in start order, the default's first placement on
//!   large instances) is valid on instances full of ties, empty lifetimes
//!   and zero sizes, and equals the classic best-fit scan in that order;
//! - the planner's specs go through the same `placement::solve`, and a
//!   capacity greedy misses is met by the search.

use std::time::Duration;

use proptest::prelude::*;
use proptest::strategy::Strategy as _;
use tensor_arena::plan::LifetimeKind;
use tensor_arena::plan::placement::{
    self, GreedyOrder, Interval, SearchConfig, SearchStatus, Strategy, StrategyKind,
};
use tensor_arena::{Error, Planner, PlannerConfig};

/// Whether some assignment of offsets in `[0, h - size]` has no two
/// time-overlapping buffers sharing a byte. Plain depth-first search over
/// every offset: no canonical form, no bounds, nothing shared with the
/// code under test.
fn fits_brute_force(items: &[Interval], h: usize, offsets: &mut Vec<usize>) -> bool {
    let i = offsets.len();
    if i == items.len() {
        return true;
    }
    let Some(room) = h.checked_sub(items[i].size) else {
        return false;
    };
    for o in 0..=room {
        let clash = (0..i).any(|j| {
            items[i].overlaps_in_time(&items[j])
                && o < offsets[j] + items[j].size
                && offsets[j] < o + items[i].size
        });
        if !clash {
            offsets.push(o);
            if fits_brute_force(items, h, offsets) {
                return true;
            }
            offsets.pop();
        }
    }
    false
}

fn brute_force_min_height(items: &[Interval]) -> usize {
    let total: usize = items.iter().map(|it| it.size).sum();
    (placement::lower_bound(items)..=total)
        .find(|&h| fits_brute_force(items, h, &mut Vec::new()))
        .unwrap_or(total)
}

fn small_instance() -> impl proptest::strategy::Strategy<Value = Vec<Interval>> {
    prop::collection::vec((0usize..6, 1usize..4, 1usize..5), 1..7).prop_map(|v| {
        v.into_iter()
            .map(|(lower, len, size)| Interval {
                lower,
                upper: lower + len,
                size,
            })
            .collect()
    })
}

fn medium_instance() -> impl proptest::strategy::Strategy<Value = Vec<Interval>> {
    prop::collection::vec((0usize..40, 1usize..12, 1usize..64), 1..60).prop_map(|v| {
        v.into_iter()
            .map(|(lower, len, size)| Interval {
                lower,
                upper: lower + len,
                size: size * 16,
            })
            .collect()
    })
}

const GENEROUS: Duration = Duration::from_secs(60);

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    #[test]
    fn search_agrees_with_brute_force(items in small_instance()) {
        let optimum = brute_force_min_height(&items);
        let minimise = SearchConfig { time_limit: GENEROUS, ..SearchConfig::default() };
        let out = placement::search(&items, None, &minimise);
        placement::validate(&items, &out.offsets, None).unwrap();
        prop_assert_eq!(out.height, optimum);
        prop_assert_eq!(out.status, SearchStatus::Optimal);

        let fit = |capacity| SearchConfig {
            capacity: Some(capacity),
            minimize: false,
            time_limit: GENEROUS,
            node_limit: None,
        };
        let at = placement::search(&items, None, &fit(optimum));
        placement::validate(&items, &at.offsets, Some(optimum)).unwrap();
        prop_assert_ne!(at.status, SearchStatus::Infeasible);
        let below = placement::search(&items, None, &fit(optimum - 1));
        prop_assert_eq!(below.status, SearchStatus::Infeasible);
        placement::validate(&items, &below.offsets, None).unwrap();
        prop_assert!(below.proven_bound <= optimum);

        // The strategy front end: search and auto with the optimum as the
        // capacity both meet it.
        for strategy in [Strategy::search(), Strategy::auto()] {
            let s = placement::solve(&items, &strategy.with_capacity(optimum)).unwrap();
            prop_assert!(s.fits);
            placement::validate(&items, &s.offsets, Some(optimum)).unwrap();
        }
    }

    #[test]
    fn every_strategy_returns_a_valid_placement(items in medium_instance()) {
        let bound = placement::lower_bound(&items);
        let mut heights = Vec::new();
        for kind in [StrategyKind::Greedy, StrategyKind::Best, StrategyKind::Search, StrategyKind::Auto] {
            let strategy = Strategy { kind, ..Strategy::default() }.with_node_limit(2_000);
            let s = placement::solve(&items, &strategy).unwrap();
            placement::validate(&items, &s.offsets, None).unwrap();
            prop_assert_eq!(s.height, placement::height(&items, &s.offsets));
            prop_assert!(s.height >= bound);
            prop_assert!(s.proven_bound >= bound && s.proven_bound <= s.height);
            prop_assert!(!s.optimal || s.proven_bound == s.height);
            heights.push(s.height);
        }
        let by_size = placement::height(&items, &placement::greedy(&items, GreedyOrder::Size));
        prop_assert_eq!(heights[0], by_size);
        prop_assert!(heights[1] <= heights[0], "best of orders above greedy by size");
        prop_assert!(heights[2] <= heights[1], "search above its seed");
        prop_assert!(heights[3] <= heights[1], "auto (re-ordered) above best of orders");
        for order in GreedyOrder::ALL {
            for offsets in [placement::greedy(&items, order), placement::greedy_lowest(&items, order)] {
                placement::validate(&items, &offsets, None).unwrap();
                prop_assert!(placement::height(&items, &offsets) >= heights[1]);
            }
        }
    }
}

/// Random planner specs: (size in 512-byte blocks, first phase, span, kind).
fn planner_specs() -> impl proptest::strategy::Strategy<Value = Vec<(usize, usize, usize, u8)>> {
    prop::collection::vec((1usize..9, 0usize..6, 0usize..4, 0u8..4), 1..24)
}

fn build_planner(specs: &[(usize, usize, usize, u8)], strategy: Strategy) -> Planner {
    let mut p = Planner::with_config(PlannerConfig {
        strategy,
        ..PlannerConfig::default()
    })
    .unwrap();
    let phases: Vec<_> = (0..6).map(|i| p.phase(&format!("p{i}")).unwrap()).collect();
    for (k, &(blocks, first, span, kind)) in specs.iter().enumerate() {
        // 512 * blocks - 32 bytes of u8 take exactly `blocks` 512-byte blocks.
        let shape = [512 * blocks - 32];
        let name = format!("b{k}");
        match kind {
            0 => {
                p.persistent::<u8>(&name, &shape).unwrap();
            }
            1 => {
                p.step::<u8>(&name, &shape).unwrap();
            }
            _ => {
                let last = (first + span).min(5);
                p.span::<u8>(&name, &shape, phases[first], phases[last])
                    .unwrap();
            }
        }
    }
    p
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn planner_specs_go_through_the_same_path(specs in planner_specs()) {
        let strategy = Strategy::search().with_node_limit(5_000).with_time_limit(GENEROUS);
        let planner = build_planner(&specs, strategy);
        let plan = planner.plan().unwrap();
        plan.validate().unwrap();
        prop_assert!(plan.slab_bytes() >= plan.lower_bound());
        let greedy_plan = planner.plan_with(Strategy::greedy()).unwrap();
        greedy_plan.validate().unwrap();
        prop_assert!(plan.slab_bytes() <= greedy_plan.slab_bytes());

        // The same intervals through `placement::solve` give the same offsets.
        let scoped: Vec<_> = plan
            .buffers()
            .iter()
            .filter(|b| b.lifetime() != LifetimeKind::Persistent)
            .collect();
        let intervals: Vec<Interval> = scoped.iter().map(|b| b.interval()).collect();
        let direct = placement::solve(&intervals, &strategy).unwrap();
        for (b, off) in scoped.iter().zip(&direct.offsets) {
            prop_assert_eq!(b.offset(), plan.persistent_bytes() + off);
        }
        prop_assert_eq!(plan.is_optimal(), direct.optimal);
    }
}

/// Six buffers every greedy placer packs into 8 units and the search into
/// the lower bound, 7, as planner specs with 512-byte units over 4 phases.
fn trap_planner(strategy: Strategy, with_weights: bool) -> Planner {
    let mut p = Planner::with_config(PlannerConfig {
        strategy,
        ..PlannerConfig::default()
    })
    .unwrap();
    let ph: Vec<_> = (0..4).map(|i| p.phase(&format!("p{i}")).unwrap()).collect();
    let units = |n: usize| [512 * n - 32];
    if with_weights {
        p.persistent::<u8>("w", &units(1)).unwrap();
    }
    p.span::<u8>("a", &units(4), ph[2], ph[3]).unwrap();
    p.span::<u8>("b", &units(4), ph[0], ph[0]).unwrap();
    p.span::<u8>("c", &units(2), ph[0], ph[1]).unwrap();
    p.span::<u8>("d", &units(1), ph[1], ph[2]).unwrap();
    p.span::<u8>("e", &units(1), ph[0], ph[2]).unwrap();
    p.span::<u8>("f", &units(3), ph[3], ph[3]).unwrap();
    p
}

#[test]
fn capacity_greedy_misses_is_met_by_the_search() {
    let greedy = trap_planner(Strategy::best(), false).plan().unwrap();
    assert_eq!(greedy.slab_bytes(), 8 * 512);
    assert!(!greedy.is_optimal());

    // Auto: greedy misses 7 units, so the search runs and meets it.
    let planner = trap_planner(Strategy::auto().with_capacity(7 * 512), false);
    let plan = planner.plan().unwrap();
    plan.validate().unwrap();
    assert_eq!(plan.slab_bytes(), 7 * 512);
    assert!(plan.is_optimal());
    assert_eq!(plan.placement().greedy, None);

    // The capacity covers the persistent buffers too.
    let planner = trap_planner(Strategy::auto().with_capacity(8 * 512), true);
    let plan = planner.plan().unwrap();
    plan.validate().unwrap();
    assert_eq!(plan.persistent_bytes(), 512);
    assert_eq!(plan.slab_bytes(), 8 * 512);

    // Greedy alone, or a capacity below the lower bound: a clear error.
    let err = trap_planner(Strategy::best().with_capacity(7 * 512), false)
        .plan()
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::OverCapacity {
                needed: 4096,
                capacity: 3584,
                ..
            }
        ),
        "{err}"
    );
    let err = trap_planner(Strategy::auto().with_capacity(6 * 512), false)
        .plan()
        .unwrap_err();
    assert!(err.to_string().contains("proven"), "{err}");
    let err = trap_planner(Strategy::auto().with_capacity(256), true)
        .plan()
        .unwrap_err();
    assert!(err.to_string().contains("persistent"), "{err}");
}

#[test]
fn search_without_capacity_minimises_planner_slabs() {
    let plan = trap_planner(Strategy::search(), false).plan().unwrap();
    assert_eq!(plan.slab_bytes(), plan.lower_bound());
    assert!(plan.is_optimal());
    assert_eq!(plan.placement().greedy, None);
    let plan = trap_planner(Strategy::greedy(), false).plan().unwrap();
    assert_eq!(plan.placement().greedy, Some(placement::Greedy::BY_SIZE));
    assert_eq!(plan.placement().search_status, None);
}

/// Instances full of ties: few distinct times and sizes, empty lifetimes
/// and zero sizes.
fn tied_instance() -> impl proptest::strategy::Strategy<Value = Vec<Interval>> {
    prop::collection::vec((0usize..20, 0usize..8, 0usize..5), 0..120).prop_map(|v| {
        v.into_iter()
            .map(|(lower, len, size)| Interval {
                lower,
                upper: lower + len,
                size: size * 8,
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The default's first placement on large instances, best fit in start
    /// order by one sweep over time, is valid and is the placement the
    /// classic best-fit scan gives for the start order.
    #[test]
    fn the_sweep_is_valid_and_equals_the_scan(items in tied_instance()) {
        let sweep = placement::greedy(&items, GreedyOrder::Start);
        placement::validate(&items, &sweep, None).unwrap();
        let scan = placement::place_in_sequence(&items, &GreedyOrder::Start.sequence(&items));
        prop_assert_eq!(&sweep, &scan);
        for (it, &o) in items.iter().zip(&sweep) {
            prop_assert!(!it.is_trivial() || o == 0, "a trivial buffer off 0");
        }
        let s = placement::solve(&items, &Strategy::default().with_time_limit(GENEROUS)).unwrap();
        placement::validate(&items, &s.offsets, None).unwrap();
        prop_assert!(s.height <= placement::height(&items, &sweep));
    }
}

/// Random instances just above [`placement::AUTO_BEST_MAX`] buffers, where
/// the default strategy starts from best fit in start order (the sweep)
/// and re-orders.
fn large_instance() -> impl proptest::strategy::Strategy<Value = Vec<Interval>> {
    let n = placement::AUTO_BEST_MAX + 1;
    prop::collection::vec((0usize..3000, 1usize..40, 1usize..64, 0u8..10), n..n + 200).prop_map(
        |v| {
            v.into_iter()
                .map(|(lower, len, size, long)| Interval {
                    lower,
                    // One in ten lives long, as activations kept for backward do.
                    upper: lower + if long == 0 { len * 50 } else { len },
                    size: size * 512,
                })
                .collect()
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(6))]

    #[test]
    fn the_default_never_loses_to_greedy_by_size_on_large_instances(items in large_instance()) {
        let by_size = placement::height(&items, &placement::greedy(&items, GreedyOrder::Size));
        let s = placement::solve(&items, &Strategy::default().with_time_limit(GENEROUS)).unwrap();
        placement::validate(&items, &s.offsets, None).unwrap();
        prop_assert_eq!(s.height, placement::height(&items, &s.offsets));
        prop_assert!(s.height <= by_size);
        prop_assert!(s.height >= s.lower_bound);
        prop_assert_eq!(s.optimal, s.height == s.lower_bound);
        // Deterministic: the same input, the same placement.
        let again = placement::solve(&items, &Strategy::default().with_time_limit(GENEROUS)).unwrap();
        prop_assert_eq!(again.offsets, s.offsets);
    }
}
