//! A small draw of issue 39's instance families (`plan::families`) from
//! MiniMalloc's A-F and idealloc's G_1, placed by the default strategy:
//! every placement is checked by a shadow checker written apart from
//! `placement::validate`, the reported height is the placement's, and
//! decomposable families (copies one after the other) are placed no worse
//! than their single copy. No timing is asserted; ratios and times of
//! larger draws are printed by `cargo run --release --example
//! plan_families` (docs/planner.md).

use std::time::Duration;

use tensor_arena::plan::families::{self, Base};
use tensor_arena::plan::minimalloc;
use tensor_arena::plan::placement::{self, Interval, Strategy};

fn load(path: &str) -> Vec<Interval> {
    let path = format!("{}/tests/data/{path}", env!("CARGO_MANIFEST_DIR"));
    minimalloc::parse(&std::fs::read_to_string(&path).unwrap())
        .unwrap()
        .buffers
}

fn bases() -> Vec<Base> {
    let mut out: Vec<Base> = ["A", "B", "C", "D", "E", "F"]
        .iter()
        .map(|n| Base {
            name: (*n).into(),
            items: load(&format!("minimalloc/{n}.1048576.csv")),
        })
        .collect();
    out.push(Base {
        name: "G_1".into(),
        items: load("idealloc/G_1.csv"),
    });
    out
}

/// Pairs alive together that share a byte, by a sweep over start times
/// keeping the buffers alive (independent of `validate`).
fn shadow_overlap(items: &[Interval], offsets: &[usize]) -> Option<(usize, usize)> {
    let mut order: Vec<usize> = (0..items.len())
        .filter(|&i| items[i].size > 0 && items[i].lower < items[i].upper)
        .collect();
    order.sort_by_key(|&i| items[i].lower);
    let mut alive: Vec<usize> = Vec::new();
    for i in order {
        alive.retain(|&j| items[j].upper > items[i].lower);
        for &j in &alive {
            let (a, b) = (offsets[i], offsets[j]);
            if a < b + items[j].size && b < a + items[i].size {
                return Some((i, j));
            }
        }
        alive.push(i);
    }
    None
}

#[test]
fn a_small_draw_places_validly() {
    let strategy = Strategy::default().with_time_limit(Duration::from_millis(300));
    let drawn = families::draw(&bases(), 39, 12, 6_000);
    assert_eq!(drawn.len(), 12);
    for inst in &drawn {
        let solution = placement::solve(&inst.items, &strategy).unwrap();
        assert_eq!(
            shadow_overlap(&inst.items, &solution.offsets),
            None,
            "{}",
            inst.name
        );
        assert_eq!(
            solution.height,
            placement::height(&inst.items, &solution.offsets),
            "{}",
            inst.name
        );
        assert!(solution.height >= placement::lower_bound(&inst.items));
    }
}

#[test]
fn copies_one_after_the_other_are_placed_as_one() {
    // G_1 alone and 8 copies of it (6,528 buffers, above the size where
    // the default splits): with a node limit so that neither depends on
    // the machine's speed, the copies reach the single copy's height.
    let one = load("idealloc/G_1.csv");
    let strategy = Strategy::default().with_time_limit(Duration::from_secs(60));
    let alone = placement::solve(&one, &strategy).unwrap();
    let eight = families::copies(&one, 8, 1.0);
    let solution = placement::solve(&eight, &strategy).unwrap();
    assert_eq!(shadow_overlap(&eight, &solution.offsets), None);
    assert!(
        solution.height <= alone.height,
        "8 copies {} above one {}",
        solution.height,
        alone.height
    );
    // The copies share the single copy's offsets.
    assert_eq!(
        solution.offsets[..one.len()],
        solution.offsets[one.len()..2 * one.len()]
    );
}

#[test]
fn overlapping_copies_are_no_higher_than_their_base_stacked() {
    // Four and twelve copies of MiniMalloc's E, each half a span after the
    // last (860 and 2,580 buffers in one piece, two copies alive at any
    // time). E alone
    // packs to its bound (the search finds it), and its load is nearly
    // flat, so two copies stacked need twice that: about 1.002x the union's
    // bound. Best fit on the union left copies like these 1.21x above it
    // (nineteen copies, before the copies were stacked).
    let one = load("minimalloc/E.1048576.csv");
    let stacked = 2 * placement::lower_bound(&one);
    let strategy = Strategy::default().with_time_limit(Duration::from_secs(60));
    // Four copies (860 buffers, below the size where the default splits)
    // no worse than twelve.
    for count in [4, 12] {
        let copies = families::copies(&one, count, 0.5);
        let solution = placement::solve(&copies, &strategy).unwrap();
        assert_eq!(shadow_overlap(&copies, &solution.offsets), None);
        assert_eq!(
            solution.height,
            placement::height(&copies, &solution.offsets)
        );
        assert!(
            solution.height <= stacked,
            "{count} copies at {} ({:.4}x the bound), two bases stacked {stacked}",
            solution.height,
            solution.height as f64 / placement::lower_bound(&copies) as f64
        );
    }
}

#[test]
fn few_overlapping_copies_are_polished_like_many() {
    // Four copies of MiniMalloc's F half overlapping (1,184 buffers, below
    // the size where the default polishes with the search): the rounds
    // alone left them 1.045x above the bound where twelve copies,
    // polished, came to 1.015x. Copies are now polished at any size
    // (1.013x measured; the search is bounded by nodes, not time, here).
    let one = load("minimalloc/F.1048576.csv");
    let four = families::copies(&one, 4, 0.5);
    let strategy = Strategy::default().with_time_limit(Duration::from_secs(60));
    let solution = placement::solve(&four, &strategy).unwrap();
    assert_eq!(shadow_overlap(&four, &solution.offsets), None);
    let ratio = solution.height as f64 / placement::lower_bound(&four) as f64;
    assert!(ratio <= 1.02, "four copies of F at {ratio:.4}x the bound");
}

#[test]
fn many_overlapping_copies_above_the_old_cap_are_stacked() {
    // 620 copies of MiniMalloc's E half overlapping: 133,300 buffers, above
    // the 2^17 at which copies were no longer looked for. The default then
    // left them 1.559x above the load bound (best fit and windows on the
    // whole); stacked, they need no more than two bases at E's bound.
    // Copies of the recorded suite traces at this size are not used here:
    // rigid blocks of them stack 1.04-2.4x above the bound (multi-step
    // loops), never below what the default already reaches.
    let one = load("minimalloc/E.1048576.csv");
    let copies = families::copies(&one, 620, 0.5);
    assert!(copies.len() > 1 << 17);
    let stacked = 2 * placement::lower_bound(&one);
    let strategy = Strategy::default().with_time_limit(Duration::from_secs(60));
    let solution = placement::solve(&copies, &strategy).unwrap();
    assert_eq!(shadow_overlap(&copies, &solution.offsets), None);
    assert!(
        solution.height <= stacked,
        "620 copies at {:.4}x the bound, two bases stacked {:.4}x",
        solution.height as f64 / placement::lower_bound(&copies) as f64,
        stacked as f64 / placement::lower_bound(&copies) as f64
    );
}

#[test]
fn two_overlapping_copies_are_no_higher_than_four() {
    // Two and four copies of MiniMalloc's F half overlapping: two copies
    // alive at any time, so both have the same load bound. Solved alone,
    // two came out 1.0206x the bound and four 1.0133x; two now also take
    // the lowest two consecutive copies of four copies solved whole (and
    // four of eight). Node-bounded search, so the same on a loaded host.
    let one = load("minimalloc/F.1048576.csv");
    let strategy = Strategy::default().with_time_limit(Duration::from_secs(60));
    let mut ratios = Vec::new();
    for count in [2, 4] {
        let copies = families::copies(&one, count, 0.5);
        let solution = placement::solve(&copies, &strategy).unwrap();
        assert_eq!(shadow_overlap(&copies, &solution.offsets), None);
        ratios.push(solution.height as f64 / placement::lower_bound(&copies) as f64);
    }
    assert!(
        ratios[0] <= ratios[1],
        "two copies at {:.4}x the bound, four at {:.4}x",
        ratios[0],
        ratios[1]
    );
}
