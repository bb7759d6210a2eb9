//! Trace replay through the caching-allocator model and the planner:
//! hand-checked traces, the seed article's pattern, memory snapshots.

use std::path::Path;

use tensor_arena::caching::{CachingConfig, rules::round_size};
use tensor_arena::diag::{
    DiagnoseOptions, ReadOptions, SyntheticConfig, Trace, TraceEvent, TraceFormat, diagnose,
    min_capacity, plan_trace, replay_model, synthetic,
};
use tensor_arena::plan::placement;

const MIB: u64 = 1 << 20;
/// 6 MiB and 7 MiB requests as blocks: + 32 bytes, rounded up to 512.
const B6: u64 = 6_291_968;
const B7: u64 = 7_340_544;

/// Three 6 MiB tensors share a 20 MiB segment; the middle one is freed;
/// a 7 MiB tensor does not fit its hole (nor the 2095616-byte tail).
const HOLE: &str = "alloc,a,6291456\nalloc,b,6291456\nalloc,c,6291456\nfree,b\nalloc,d,7340032\n";

fn data(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

#[test]
fn hole_trace_follows_the_rules() {
    let t = Trace::from_csv("hole", HOLE).unwrap();
    let d = diagnose(&t, &DiagnoseOptions::default());
    let s = &d.model.stats;
    // Two 20 MiB segments; at the peak (d's segment) a, c and d are live.
    assert_eq!(s.reserved_bytes.peak, 40 * MIB);
    assert_eq!(d.model.peak_segments, 2);
    assert_eq!(d.model.peak_reserved_event, 4);
    assert_eq!(d.model.allocated_at_peak_reserved, 2 * B6 + B7);
    let frag = 1.0 - (2 * B6 + B7) as f64 / (40 * MIB) as f64;
    assert!((d.model.fragmentation() - frag).abs() < 1e-12);
    // The hole and the tail of segment 1, the rest of segment 2.
    assert_eq!(
        s.inactive_split_bytes.current,
        B6 + (20 * MIB - 3 * B6) + (20 * MIB - B7)
    );
    // At 38 MiB segment 1 cannot be released (a and c hold it): 40 MiB.
    assert_eq!(d.model_min_capacity, Some(40 * MIB));
    // The arena puts d where b was: a + c + d, the lower bound.
    assert_eq!(d.arena.slab_bytes, 2 * B6 + B7);
    assert_eq!(d.arena.lower_bound, 2 * B6 + B7);
    assert_eq!(d.arena_min_capacity, d.arena.slab_bytes);
    let table = d.to_string();
    assert!(
        table.contains("peak reserved               40.0 MiB"),
        "{table}"
    );
}

#[test]
fn out_of_memory_with_a_free_hole_smaller_than_the_request() {
    let t = Trace::from_csv("hole", HOLE).unwrap();
    let config = CachingConfig {
        capacity: Some(38 * MIB),
        ..CachingConfig::default()
    };
    let r = replay_model(&t, config, true);
    let oom = r.oom.expect("38 MiB is too small for the model");
    assert_eq!((oom.event, oom.allocation), (4, 3));
    assert_eq!(oom.segment, 20 * MIB);
    assert_eq!((oom.allocated, oom.reserved), (2 * B6, 20 * MIB));
    // 6 MiB free, 7 MiB wanted: the device is not full, the cache is cut up.
    assert_eq!(oom.largest_free_block, B6);
    assert_eq!(r.events, 4, "the replay stops at the failed allocation");
    assert_eq!(r.timeline.len(), 4);
    assert_eq!((r.stats.num_alloc_retries, r.stats.num_ooms), (1, 1));
    // The arena's slab fits in the same device.
    assert!(plan_trace(&t).slab_bytes <= 38 * MIB);
}

#[test]
fn max_split_size_changes_the_outcome() {
    // A 64 MiB oversize block cached, then a 40 MiB request: without
    // max_split_size it is split from the cached block (24 MiB stays
    // free); with 32 MiB the cached block is refused (64 >= 40 + 20) and a
    // second segment is made.
    let t = Trace::from_csv(
        "oversize",
        &format!(
            "alloc,x,{}\nfree,x\nalloc,y,{}\n",
            64 * MIB - 4096,
            40 * MIB
        ),
    )
    .unwrap();
    let plain = replay_model(&t, CachingConfig::default(), false);
    assert_eq!(plain.stats.reserved_bytes.peak, 64 * MIB);
    let capped = replay_model(
        &t,
        CachingConfig {
            max_split_size: Some(32 * MIB),
            ..CachingConfig::default()
        },
        false,
    );
    assert_eq!(capped.stats.reserved_bytes.peak, 64 * MIB + 42 * MIB);
    assert_eq!(capped.stats.oversize_segments.peak, 2);
}

#[test]
fn seed_pattern_reserved_grows_while_allocated_stays_flat() {
    let config = SyntheticConfig {
        steps: 120,
        ..SyntheticConfig::default()
    };
    let t = synthetic(&config).unwrap();
    let r = replay_model(&t, CachingConfig::default(), true);
    assert!(r.oom.is_none());
    let tl = &r.timeline;
    let (first, second) = tl.split_at(tl.len() / 2);
    let peak = |s: &[tensor_arena::diag::Sample]| s.iter().map(|x| x.allocated).max().unwrap();
    let reserved_at = |frac: f64| tl[((tl.len() - 1) as f64 * frac) as usize].reserved;
    // Allocated memory has no trend: each half peaks at about the same
    // level (the same shape distribution every step).
    let (p1, p2) = (peak(first), peak(second));
    assert!(p2 < p1 + p1 / 4 && p1 < p2 + p2 / 4, "peaks {p1} vs {p2}");
    // Reserved memory only ratchets up, well past allocated.
    assert!(tl.windows(2).all(|w| w[1].reserved >= w[0].reserved));
    assert!(reserved_at(0.05) * 3 / 2 < reserved_at(1.0));
    assert!(r.stats.reserved_bytes.peak > 3 * r.stats.allocated_bytes.peak / 2);
    assert!(r.fragmentation() > 0.3, "{}", r.fragmentation());
    // Segments pile up; the arena needs one slab below the peak reservation.
    assert!(r.peak_segments > 10);
    let plan = plan_trace(&t);
    placement::validate(
        &plan.intervals,
        &plan.offsets,
        Some(plan.slab_bytes as usize),
    )
    .unwrap();
    assert!(plan.slab_bytes < r.stats.reserved_bytes.peak);
    assert!(plan.slab_bytes <= r.stats.allocated_bytes.peak);
    // And the capacity each needs to finish without running out of memory.
    let model_min = min_capacity(&t, CachingConfig::default());
    assert!(plan.slab_bytes < model_min);
    let at_min = CachingConfig {
        capacity: Some(model_min),
        ..CachingConfig::default()
    };
    assert!(replay_model(&t, at_min, false).oom.is_none());
    let below = CachingConfig {
        capacity: Some(model_min - 2 * MIB),
        ..CachingConfig::default()
    };
    assert!(replay_model(&t, below, false).oom.is_some());
}

#[test]
fn expandable_segments_fragment_less_on_the_seed_pattern() {
    let t = synthetic(&SyntheticConfig {
        steps: 60,
        ..SyntheticConfig::default()
    })
    .unwrap();
    let plain = replay_model(&t, CachingConfig::default(), false);
    let expandable = replay_model(
        &t,
        CachingConfig {
            expandable_segments: true,
            ..CachingConfig::default()
        },
        false,
    );
    assert!(expandable.stats.reserved_bytes.peak < plain.stats.reserved_bytes.peak);
    assert_eq!(expandable.stats.segment.peak, 0, "no aclrtMalloc segments");
    assert!(expandable.peak_segments <= 2, "one growing range per pool");
}

#[cfg(feature = "pickle")]
#[test]
fn snapshot_pickle_becomes_a_trace() {
    let t = Trace::read(&data("snapshot_small.pickle"), ReadOptions::default()).unwrap();
    // W (freed during the recording) and P (live in the segments) were
    // allocated before it: they come first.
    assert_eq!(t.preexisting(), 2);
    let sizes: Vec<u64> = t.allocations().iter().map(|a| a.size).collect();
    let six = 6 * MIB;
    assert_eq!(sizes, vec![1000, 4000, six, six, six, 7 * MIB, 100]);
    assert_eq!(t.streams(), 2);
    assert_eq!(t.allocations()[6].stream, 1);
    assert_eq!(
        t.events(),
        &[
            TraceEvent::Alloc(0),
            TraceEvent::Alloc(1),
            TraceEvent::Alloc(2),
            TraceEvent::Alloc(3),
            TraceEvent::Alloc(4),
            TraceEvent::Free(3),
            TraceEvent::Free(0),
            TraceEvent::Alloc(5),
            TraceEvent::Alloc(6),
        ]
    );
    let rec = t.recorded().unwrap();
    assert_eq!(rec.ooms, 1);
    // 2 MiB before the recording (the 44 MiB of segments at the end less
    // the 42 MiB allocated during it), then each segment_alloc.
    assert_eq!(
        rec.curve(),
        vec![(0, 2 * MIB), (2, 22 * MIB), (7, 42 * MIB), (8, 44 * MIB)]
    );
    // The model replays it to the same reservation the recording ended at.
    let d = diagnose(&t, &DiagnoseOptions::default());
    assert_eq!(d.model.stats.reserved_bytes.peak, 44 * MIB);
    assert_eq!(d.model.stats.segment.peak, 4);
    assert_eq!(d.trace.recorded_ooms, Some(1));
    let slots: u64 = [4000, six, six, 7 * MIB, 100]
        .iter()
        .map(|&s| round_size(s))
        .sum();
    assert_eq!(d.arena.slab_bytes, slots, "W and b make room for d");
}

#[cfg(feature = "pickle")]
#[test]
fn snapshot_devices_and_errors() {
    let path = data("snapshot_two_devices.pickle");
    let t = Trace::read(&path, ReadOptions::default()).unwrap();
    assert_eq!(
        t.allocations().len(),
        3,
        "device 1 has the most allocations"
    );
    let t0 = Trace::read(
        &path,
        ReadOptions {
            device: Some(0),
            ..ReadOptions::default()
        },
    )
    .unwrap();
    assert_eq!(t0.allocations().len(), 2);
    let err = Trace::read(
        &path,
        ReadOptions {
            device: Some(5),
            ..ReadOptions::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("device 5 is not in the snapshot, which has 2"),
        "{err}"
    );
    let err = Trace::read(&data("not_a_snapshot.pickle"), ReadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a memory snapshot pickle"), "{err}");
    let bytes = std::fs::read(data("snapshot_small.pickle")).unwrap();
    let cut = Trace::from_bytes(
        "cut",
        &bytes[..bytes.len() / 2],
        TraceFormat::Snapshot,
        None,
    );
    assert!(cut.is_err(), "a truncated pickle is an error, not a panic");
    let missing = Trace::read(Path::new("/no/such/trace.csv"), ReadOptions::default());
    assert!(
        missing
            .unwrap_err()
            .to_string()
            .starts_with("cannot read '/no/such/trace.csv'")
    );
}

#[test]
fn json_lines_and_csv_give_the_same_trace() {
    let jsonl = "{\"action\":\"alloc\",\"id\":\"a\",\"size\":6291456}\n\
                 {\"action\":\"alloc\",\"id\":\"b\",\"size\":6291456}\n\
                 {\"action\":\"alloc\",\"id\":\"c\",\"size\":6291456}\n\
                 {\"action\":\"free\",\"id\":\"b\"}\n\
                 {\"action\":\"alloc\",\"id\":\"d\",\"size\":7340032}\n";
    let j = Trace::from_bytes("j", jsonl.as_bytes(), TraceFormat::JsonLines, None).unwrap();
    let c = Trace::from_csv("c", HOLE).unwrap();
    assert_eq!(j.events(), c.events());
    assert_eq!(j.allocations(), c.allocations());
}

mod random_traces {
    use proptest::prelude::*;
    use tensor_arena::caching::CachingConfig;
    use tensor_arena::diag::{Trace, fits, min_capacity, plan_trace, replay_model};
    use tensor_arena::plan::placement;

    /// A CSV trace from random sizes; `frees[i]` frees the i-th oldest live
    /// allocation after allocation i (if any is live).
    fn csv(sizes: &[u64], frees: &[usize]) -> String {
        let mut out = String::new();
        let mut live: Vec<usize> = Vec::new();
        for (i, (&size, &f)) in sizes.iter().zip(frees).enumerate() {
            out.push_str(&format!("alloc,{i},{size}\n"));
            live.push(i);
            if f % 3 != 0 && !live.is_empty() {
                let victim = live.remove(f % live.len());
                out.push_str(&format!("free,{victim}\n"));
            }
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn plans_are_valid_and_capacities_hold(
            sizes in prop::collection::vec(1u64..(24 << 20), 1..60),
            frees in prop::collection::vec(any::<usize>(), 60),
            expandable in any::<bool>(),
        ) {
            let t = Trace::from_csv("random", &csv(&sizes, &frees[..sizes.len()])).unwrap();
            let plan = plan_trace(&t);
            prop_assert!(placement::validate(&plan.intervals, &plan.offsets, Some(plan.slab_bytes as usize)).is_ok());
            prop_assert!(plan.slab_bytes >= plan.lower_bound);
            prop_assert!(plan.lower_bound >= t.peak_live_bytes());
            let config = CachingConfig { expandable_segments: expandable, ..CachingConfig::default() };
            let r = replay_model(&t, config, false);
            prop_assert!(r.oom.is_none());
            prop_assert!(r.stats.allocated_bytes.peak <= r.stats.reserved_bytes.peak);
            let min = min_capacity(&t, config);
            prop_assert!(min <= r.stats.reserved_bytes.peak.next_multiple_of(2 << 20));
            let at_min = CachingConfig { capacity: Some(min), ..config };
            prop_assert!(fits(&t, at_min));
        }
    }
}
