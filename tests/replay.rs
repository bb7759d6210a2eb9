//! Trace replay through the caching-allocator model and the planner:
//! hand-checked traces (one whose out-of-memory is not monotone in the
//! capacity), the seed article's pattern, every input format and its bad
//! inputs, memory snapshots, the capacity scan, the explanation and the
//! settings sweep.

use std::path::Path;

use tensor_arena::Error;
use tensor_arena::caching::{CachingConfig, rules::round_size};
use tensor_arena::diag::{
    DiagnoseOptions, Moment, ReadOptions, SweepOptions, SyntheticConfig, Trace, TraceEvent,
    TraceFormat, capacity_scan, diagnose, explain_at, fits, min_capacity, plan_trace, replay_model,
    sweep, synthetic,
};
use tensor_arena::plan::placement;

type TestResult = Result<(), Box<dyn std::error::Error>>;

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
    let d = diagnose(&t, &DiagnoseOptions::default()).unwrap();
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
    let d = diagnose(&t, &DiagnoseOptions::default()).unwrap();
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
    // A truncated pickle is a trace error, not a panic.
    match cut {
        Err(Error::Trace { message, .. }) => assert!(message.contains("ends early"), "{message}"),
        other => panic!("expected a trace error, got {other:?}"),
    }
    let missing = Trace::read(Path::new("/no/such/trace.csv"), ReadOptions::default());
    match missing {
        Err(e @ Error::Io { .. }) => {
            assert!(
                e.to_string()
                    .starts_with("cannot read '/no/such/trace.csv'"),
                "{e}"
            )
        }
        other => panic!("expected an I/O error, got {other:?}"),
    }
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
    use tensor_arena::caching::{CachingConfig, GcThreshold};
    use tensor_arena::diag::{Trace, capacity_scan, fits, min_capacity, plan_trace, replay_model};
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
            prop_assert_eq!(placement::validate(&plan.intervals, &plan.offsets, Some(plan.slab_bytes as usize)), Ok(()));
            prop_assert!(plan.slab_bytes >= plan.lower_bound);
            prop_assert!(plan.lower_bound >= t.peak_live_bytes());
            let config = CachingConfig { expandable_segments: expandable, ..CachingConfig::default() };
            let r = replay_model(&t, config, false);
            prop_assert!(r.oom.is_none());
            prop_assert!(r.stats.allocated_bytes.peak <= r.stats.reserved_bytes.peak);
            let min = min_capacity(&t, config);
            // Without expandable segments a capped replay is the unlimited
            // one up to its reserved peak; with them a segment's address
            // space is sized from the capacity, and a capped run may need
            // more (src/diag/capacity.rs): there the capacity below the
            // minimum fails instead.
            if !expandable {
                prop_assert!(min <= r.stats.reserved_bytes.peak.next_multiple_of(2 << 20));
            } else if min > t.peak_live_bytes().next_multiple_of(2 << 20) {
                let below = CachingConfig { capacity: Some(min - (2 << 20)), ..config };
                prop_assert!(!fits(&t, below));
            }
            let at_min = CachingConfig { capacity: Some(min), ..config };
            prop_assert!(fits(&t, at_min));
        }

        /// The scan (which starts replays from saved states) agrees with
        /// full replays at every capacity it reports on, in every setting.
        #[test]
        fn capacity_scans_agree_with_full_replays(
            sizes in prop::collection::vec(1u64..(40 << 20), 1..50),
            frees in prop::collection::vec(any::<usize>(), 50),
            setting in 0usize..4,
        ) {
            let t = Trace::from_csv("random", &csv(&sizes, &frees[..sizes.len()])).unwrap();
            let config = match setting {
                0 => CachingConfig::default(),
                1 => CachingConfig { max_split_size: Some(24 << 20), ..CachingConfig::default() },
                2 => CachingConfig {
                    garbage_collection_threshold: Some(GcThreshold::new(0.5).unwrap()),
                    max_split_size: Some(32 << 20),
                    ..CachingConfig::default()
                },
                _ => CachingConfig { expandable_segments: true, ..CachingConfig::default() },
            };
            let scan = capacity_scan(&t, config, 16 << 20);
            let at = |c: u64| fits(&t, CachingConfig { capacity: Some(c), ..config });
            let step = 2u64 << 20;
            let mut c = scan.lower_limit;
            while c < scan.min_capacity {
                prop_assert!(!at(c), "{} MiB survives below the smallest", c >> 20);
                c += step;
            }
            prop_assert!(at(scan.min_capacity));
            let mut c = scan.min_capacity + step;
            while c <= scan.window_top {
                prop_assert_eq!(at(c), !scan.oom_above_min.contains(&c), "at {} MiB", c >> 20);
                c += step;
            }
            prop_assert!(scan.safe_capacity >= scan.min_capacity);
            prop_assert!(scan.oom_above_min.iter().all(|&c| c < scan.safe_capacity));
        }
    }
}

use tensor_arena::caching::GcThreshold as Gc;

/// Sizes that make blocks and segments of exactly `mib` MiB (even, at
/// least 10): 512 bytes less, so that the 32-byte pad rounds up to it.
fn x(mib: u64) -> u64 {
    mib * MIB - 512
}

/// Out of memory that is not monotone in the capacity (hand-checked):
///
/// 1. a (20 MiB) is made and freed: a cached 20 MiB segment S1;
/// 2. b (24 MiB) needs a segment of its own. Below 44 MiB that fails, so
///    S1 is released and the request retried; from 44 MiB S1 stays;
/// 3. p (10 MiB, kept) then splits S1 when S1 is there, or takes a 10 MiB
///    segment of its own;
/// 4. b is freed, and d (30 MiB) needs a segment: the cached 24 MiB one is
///    released, leaving 20 MiB (S1, pinned by p) or 10 MiB reserved, so d
///    fits from 50 MiB or from 40 MiB.
///
/// So 40 and 42 MiB survive, 44 to 48 MiB run out of memory, 50 MiB and up
/// survive. The live blocks peak at p + d = 40 MiB.
fn non_monotone() -> Trace {
    let csv = format!(
        "alloc,a,{}\nfree,a\nalloc,b,{}\nalloc,p,{}\nfree,b\nalloc,d,{}\n",
        x(20),
        x(24),
        x(10),
        x(30)
    );
    Trace::from_csv("non-monotone", &csv).unwrap()
}

#[test]
fn out_of_memory_is_not_monotone_in_the_capacity() {
    let t = non_monotone();
    let at = |mib: u64| {
        fits(
            &t,
            CachingConfig {
                capacity: Some(mib * MIB),
                ..CachingConfig::default()
            },
        )
    };
    let survives: Vec<u64> = (36..=56).step_by(2).filter(|&m| at(m)).collect();
    assert_eq!(survives, vec![40, 42, 50, 52, 54, 56]);
    let scan = capacity_scan(&t, CachingConfig::default(), 64 * MIB);
    assert_eq!(scan.lower_limit, 40 * MIB);
    assert_eq!(scan.min_capacity, 40 * MIB);
    assert_eq!(scan.oom_above_min, vec![44 * MIB, 46 * MIB, 48 * MIB]);
    assert_eq!(scan.safe_capacity, 50 * MIB);
    assert_eq!(scan.window_top, 104 * MIB);
    // Unlimited, nothing is released: 20 + 24 + 30 MiB.
    let r = replay_model(&t, CachingConfig::default(), false);
    assert_eq!(r.stats.reserved_bytes.peak, 74 * MIB);
    // At 44 MiB: b fits beside S1, d does not fit beside S1 (20 + 30).
    let at44 = CachingConfig {
        capacity: Some(44 * MIB),
        ..CachingConfig::default()
    };
    let oom = replay_model(&t, at44, false).oom.expect("44 MiB fails");
    assert_eq!((oom.event, oom.segment), (5, 30 * MIB));
    assert_eq!((oom.allocated, oom.reserved), (10 * MIB, 20 * MIB));
    // The explanation: S1's free half is hard fragmentation, pinned by p.
    let e = explain_at(&t, at44, Moment::OutOfMemory, 5, None, 5);
    assert_eq!(
        (e.reserved, e.allocated, e.gap),
        (20 * MIB, 10 * MIB, 10 * MIB)
    );
    assert_eq!(e.hard_fragmentation, 10 * MIB);
    assert_eq!(e.soft_fragmentation + e.stream_fragmentation, 0);
    assert_eq!(e.largest_free_block_on_stream, 10 * MIB);
    assert!(e.summary.contains("hard fragmentation"), "{}", e.summary);
    assert!(e.summary.contains("of a 44.0 MiB device"), "{}", e.summary);
    // The report shows the out-of-memory capacities above the smallest.
    let d = diagnose(&t, &DiagnoseOptions::default()).unwrap();
    let text = d.to_string();
    assert!(
        text.contains("smallest capacity that survives: 40.0 MiB"),
        "{text}"
    );
    assert!(
        text.contains("out of memory again above it at (MiB): 44, 46, 48"),
        "{text}"
    );
    assert!(text.contains("safe from 50 MiB"), "{text}");
    // The arena: p and d at once, 40 MiB; a and b reuse the same bytes.
    assert_eq!(d.arena.slab_bytes, 40 * MIB);
}

#[test]
fn sweep_follows_the_combination_rules_and_recommends_the_least_memory() {
    let t = non_monotone();
    let options = SweepOptions {
        max_split_size_mb: vec![22, 128],
        garbage_collection_thresholds: vec![0.5],
        expandable_segments: true,
        window: 16 * MIB,
    };
    let grid = options.settings().unwrap();
    let confs: Vec<String> = grid.iter().map(|c| c.to_alloc_conf()).collect();
    assert_eq!(
        confs,
        vec![
            "",
            "max_split_size_mb:22",
            "max_split_size_mb:128",
            "garbage_collection_threshold:0.5",
            "max_split_size_mb:22,garbage_collection_threshold:0.5",
            "max_split_size_mb:128,garbage_collection_threshold:0.5",
            "expandable_segments:True",
        ]
    );
    for c in &grid {
        assert!(
            !(c.expandable_segments
                && (c.max_split_size.is_some() || c.garbage_collection_threshold.is_some()))
        );
    }
    let (rows, rec) = sweep(&t, &options, 40 * MIB).unwrap();
    assert_eq!(rows.len(), grid.len());
    // Neither max_split_size_mb:22 (S1, 20 MiB, may still be split; the
    // 24 MiB block is oversize but only ever released) nor the collector
    // (b's request finds 20 MiB reserved, not above half of 40 to 48 MiB)
    // changes a step: every such row is the default one.
    for r in &rows[..6] {
        assert_eq!(r.peak_reserved, 74 * MIB, "{}", r.conf);
        assert_eq!(
            (r.min_capacity, r.safe_capacity),
            (40 * MIB, 50 * MIB),
            "{}",
            r.conf
        );
        assert_eq!(
            r.oom_above_min,
            vec![44 * MIB, 46 * MIB, 48 * MIB],
            "{}",
            r.conf
        );
    }
    // Expandable segments map 20 MiB pages: a, then b grows the segment to
    // 40 MiB, p splits b's tail, and d needs two more pages (80 MiB). Below
    // that the free page under b is unmapped first, leaving p's page, and
    // d's two pages fit from 60 MiB.
    let e = &rows[6];
    assert_eq!(
        (e.peak_reserved, e.min_capacity, e.safe_capacity),
        (80 * MIB, 60 * MIB, 60 * MIB)
    );
    assert!(e.oom_above_min.is_empty());
    // Ties go to the first setting in the grid: keep the defaults.
    assert_eq!((rec.conf.as_str(), rec.capacity), ("", 50 * MIB));
    assert_eq!(rec.export, "unset PYTORCH_NPU_ALLOC_CONF");
    assert_eq!(rec.headroom_bytes, 10 * MIB);
    assert!((rec.headroom_fraction - 0.25).abs() < 1e-12);
    assert!(
        rec.message.starts_with("a planned arena of 40.0 MiB"),
        "{}",
        rec.message
    );
    // Values torch_npu refuses are refused before anything is replayed.
    let bad = SweepOptions {
        garbage_collection_thresholds: vec![1.0],
        ..options.clone()
    };
    assert!(matches!(
        sweep(&t, &bad, 0),
        Err(Error::InvalidAllocConf { .. })
    ));
    let bad = SweepOptions {
        max_split_size_mb: vec![20],
        ..options
    };
    assert!(matches!(
        sweep(&t, &bad, 0),
        Err(Error::InvalidAllocConf { .. })
    ));
}

#[test]
fn garbage_collection_changes_the_outcome_of_a_trace() {
    // The aged cache of the model's unit test, as a trace: x and y (30 MiB,
    // 32 MiB segments), e (12 MiB) reused twice, then a 40 MiB request at
    // 100 MiB: with threshold 0.5 the oldest cached segment (x's) goes
    // first and no retry is needed; without, the whole cache is released.
    let csv = "alloc,x,31457280\nalloc,y,31457280\nalloc,e,12582912\nfree,x\nfree,e\n\
               alloc,f,12582912\nfree,f\nalloc,g,12582912\nfree,g\nfree,y\nalloc,z,41943040\n";
    let t = Trace::from_csv("gc", csv).unwrap();
    let base = CachingConfig {
        capacity: Some(100 * MIB),
        ..CachingConfig::default()
    };
    let plain = replay_model(&t, base, false);
    assert_eq!(plain.stats.reserved_bytes.current, 42 * MIB);
    assert_eq!(plain.stats.num_alloc_retries, 1);
    let gc = CachingConfig {
        garbage_collection_threshold: Some(Gc::new(0.5).unwrap()),
        ..base
    };
    let collected = replay_model(&t, gc, false);
    assert_eq!(collected.stats.reserved_bytes.current, 88 * MIB);
    assert_eq!(
        (
            collected.stats.num_alloc_retries,
            collected.stats.num_device_free
        ),
        (0, 1)
    );
}

#[test]
fn csv_header_lines_and_sized_frees() -> TestResult {
    // As a user exports it: a header, and frees that repeat the size.
    let t = Trace::from_csv("t", "op,id,size\nalloc,29,1173324\nfree,29,1173324\n")?;
    assert_eq!(t.allocations().len(), 1);
    assert_eq!(t.allocations()[0].free_at, Some(1));
    // Columns by name, in any order, extra ones ignored.
    let t = Trace::from_csv(
        "t",
        "time,size,kind,ptr,stream\n0,64,alloc,p,1\n1,64,free,p,1\n",
    )?;
    assert_eq!(
        (t.allocations()[0].size, t.allocations()[0].stream),
        (64, 1)
    );
    // The usual three columns leave the fourth to be the stream.
    let t = Trace::from_csv("t", "action,id,size\nalloc,a,5,2\n")?;
    assert_eq!(t.allocations()[0].stream, 2);
    let err = |text: &str| match Trace::from_csv("t.csv", text) {
        Err(e @ Error::Trace { .. }) => e.to_string(),
        other => panic!("expected a trace error, got {other:?}"),
    };
    assert_eq!(
        err("alloc,29,1173324\nfree,29,1173000\n"),
        "trace 't.csv', line 2: free of id 29 gives size 1173000, but it was allocated with size 1173324"
    );
    assert!(err("alloc,a,1,0\nfree,a,1,1\n").contains("line 2: free of id a gives stream 1"));
    assert!(
        err("name,bytes\nalloc,1\n").contains("line 1: header 'name,bytes' names no action column")
    );
    assert!(err("op,id,size\nalloc,a\n").contains("line 2: expected 'alloc,ID,SIZE[,STREAM]'"));
    assert!(err("op,id,size\nalloc,a,x\n").contains("size 'x' is not a whole number"));
    assert!(err("alloc,a,1,2,3\n").contains("line 1: expected"));
    // A sized free of an unknown id is still the unknown-id error.
    assert!(err("free,a,10\n").contains("free of id a, which is not allocated"));
    Ok(())
}

#[test]
fn json_lines_sized_frees_and_bad_lines() -> TestResult {
    let ok =
        "{\"action\":\"alloc\",\"id\":1,\"size\":64}\n{\"action\":\"free\",\"id\":1,\"size\":64}\n";
    let t = Trace::from_json_lines("t", ok)?;
    assert_eq!(t.allocations()[0].free_at, Some(1));
    let bad =
        "{\"action\":\"alloc\",\"id\":1,\"size\":64}\n{\"action\":\"free\",\"id\":1,\"size\":65}\n";
    match Trace::from_json_lines("t", bad) {
        Err(e @ Error::Trace { .. }) => {
            assert!(
                e.to_string().contains("line 2: free of id 1 gives size 65"),
                "{e}"
            )
        }
        other => panic!("expected a trace error, got {other:?}"),
    }
    for (text, want) in [
        ("{\"action\":\"alloc\",\"id\":1,\"size\":-1}", "line 1"),
        (
            "{\"action\":\"alloc\",\"id\":1,\"size\":1,\"colour\":2}",
            "unknown field",
        ),
        ("[1,2]", "line 1"),
    ] {
        match Trace::from_json_lines("t", text) {
            Err(e @ Error::Trace { .. }) => assert!(e.to_string().contains(want), "{e}"),
            other => panic!("expected a trace error for {text}, got {other:?}"),
        }
    }
    // Not UTF-8.
    match Trace::from_bytes("t", b"alloc,a,1\n\xff\n", TraceFormat::Csv, None) {
        Err(Error::Trace { location, .. }) => assert_eq!(location, "byte 10"),
        other => panic!("expected a trace error, got {other:?}"),
    }
    Ok(())
}

#[cfg(feature = "pickle")]
#[test]
fn gzip_oom_snapshot_with_sites_is_explained() -> TestResult {
    let t = Trace::read(
        &data("oom_snapshot_sites.pickle.gz"),
        ReadOptions::default(),
    )?;
    assert_eq!(t.allocations().len(), 3);
    assert!(t.has_sites());
    assert_eq!(
        t.site(0),
        Some("model.py:12 in forward"),
        "library frames skipped"
    );
    assert_eq!(t.site(1), Some("data.py:30 in collate"));
    let rec = t.recorded().ok_or("recorded")?;
    assert_eq!(rec.oom_events.len(), 1);
    let oom = rec.oom_events[0];
    assert_eq!((oom.event, oom.size, oom.device_free), (4, B7, 2 * MIB));
    let d = diagnose(&t, &DiagnoseOptions::default())?;
    let e = d
        .explain
        .iter()
        .find(|e| e.moment == Moment::RecordedOutOfMemory)
        .ok_or("recorded OOM explained")?;
    // a and c hold the segment; b's hole and the tail are free.
    let free = B6 + (20 * MIB - 3 * B6);
    assert_eq!((e.reserved, e.allocated), (20 * MIB, 2 * B6));
    assert_eq!(e.hard_fragmentation, free);
    assert_eq!(e.largest_free_block_on_stream, B6);
    assert_eq!(e.sites.len(), 1);
    assert_eq!(e.sites[0].site, "model.py:12 in forward");
    assert_eq!((e.sites[0].stranded_bytes, e.sites[0].blocks), (free, 2));
    assert!(
        e.summary.contains("model.py:12 in forward"),
        "{}",
        e.summary
    );
    // A gzip stream cut short is a trace error naming the stream.
    let bytes = std::fs::read(data("oom_snapshot_sites.pickle.gz"))?;
    match Trace::from_bytes(
        "cut.gz",
        &bytes[..bytes.len() - 20],
        TraceFormat::Snapshot,
        None,
    ) {
        Err(Error::Trace { message, .. }) => assert!(
            message.contains("not a memory snapshot pickle"),
            "{message}"
        ),
        other => panic!("expected a trace error, got {other:?}"),
    }
    Ok(())
}

#[test]
fn recorded_cache_releases_are_replayed() {
    use tensor_arena::diag::TraceBuilder;
    let build = |release: bool| {
        let mut b = TraceBuilder::<u64>::new("t");
        b.alloc(1, 30 << 20, 0).unwrap();
        b.free(&1).unwrap();
        if release {
            b.empty_cache();
            b.empty_cache(); // a burst counts once
        }
        b.alloc(2, 40 << 20, 0).unwrap();
        b.finish()
    };
    let (with, without) = (build(true), build(false));
    assert_eq!(with.releases(), &[2]);
    assert!(with.releases_before(2) && !with.releases_before(1));
    let peak = |t: &Trace| {
        replay_model(t, CachingConfig::cuda(), false)
            .stats
            .reserved_bytes
            .peak
    };
    // The freed 30 MiB segment goes back to the device before the 40 MiB
    // request, as empty_cache() did in the recording.
    assert_eq!(peak(&with), 40 << 20);
    assert_eq!(peak(&without), 70 << 20);
    // The capacity scan replays the release too: 40 MiB is enough.
    assert!(tensor_arena::diag::fits(
        &with,
        CachingConfig {
            capacity: Some(40 << 20),
            ..CachingConfig::cuda()
        }
    ));
    let at_60 = CachingConfig {
        capacity: Some(60 << 20),
        ..CachingConfig::cuda()
    };
    // Without it, the model releases the cache itself only after the
    // device refuses the segment: a retry the recording did not make.
    assert_eq!(replay_model(&with, at_60, false).stats.num_alloc_retries, 0);
    assert_eq!(
        replay_model(&without, at_60, false).stats.num_alloc_retries,
        1
    );
}
