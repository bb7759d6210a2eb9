//! The offline replay decides as the live allocator does: the recorded
//! GPT-2 trace driven through a live allocator on host pages and through
//! the replay's null backing gives the same stats, plan and whole-run peak,
//! and a trace the allocator writes reproduces its reserved bytes.

mod support;

use tensor_arena_alloc::backing::host_backing;
use tensor_arena_alloc::replay::{self, NullBacking, Prediction, ReplayConfig};
use tensor_arena_alloc::trace::{self, TraceEvent};
use tensor_arena_alloc::{Config, Stats};

/// See tests/data/README.md.
const GPT2_TRACE: &str = include_str!("data/gpt2_cpu_trace.csv");

/// The stats with the backing's name (which differs between backings) and
/// the measured planning time left out: the decisions.
fn decisions(s: &Stats) -> Stats {
    Stats {
        backing: String::new(),
        planning_wait_seconds_max: 0.0,
        ..s.clone()
    }
}

fn same(live: &Prediction, null: &Prediction) {
    assert_eq!(decisions(&live.stats), decisions(&null.stats));
    assert_eq!(live.peak_reserved_bytes, null.peak_reserved_bytes);
    let (a, b) = (live.plan.as_ref().unwrap(), null.plan.as_ref().unwrap());
    assert_eq!(a.sites, b.sites);
    assert_eq!(a.slab_bytes, b.slab_bytes);
}

fn policy(json: &str) -> ReplayConfig {
    ReplayConfig {
        policy: Config::from_json(json).unwrap(),
        capacity: None,
    }
}

#[test]
fn host_pages_and_the_null_backing_decide_the_same() {
    let events = trace::parse(GPT2_TRACE).unwrap();
    for json in [
        r#"{"backend": "cpu", "log_errors": false}"#,
        r#"{"backend": "cpu", "log_errors": false, "exact_before_plan": false, "warmup_steps": 2, "record_steps": 1}"#,
        r#"{"backend": "cpu", "log_errors": false, "platform": "npu"}"#,
        r#"{"backend": "cpu", "log_errors": false, "mapped_range": false}"#,
    ] {
        let config = policy(json);
        let live = replay::replay_on(&events, &config, Box::new(host_backing())).unwrap();
        // The host's mapped ranges are in pages of the host page.
        let null = NullBacking::new(None).with_map_granularity(Some(replay::HOST_PAGE));
        let null = replay::replay_on(&events, &config, Box::new(null)).unwrap();
        same(&live, &null);
        assert_eq!(null.steps, 8);
        assert_eq!(null.served_share, Some(1.0), "{json}: {:?}", null.stats);
        assert!(null.peak_reserved_bytes >= null.slab_bytes);
    }
}

#[test]
fn a_trace_written_by_the_allocator_replays_to_the_live_figures() {
    let events = trace::parse(GPT2_TRACE).unwrap();
    // The live run: the allocator as the C ABI opens it, trace on.
    let (mut live, path) = support::traced("replay");
    replay::drive(&mut live, &events).unwrap();
    let live_stats = live.stats();
    drop(live);
    let written = trace::read(&path).unwrap();
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();

    // Frees carry sizes; segment lines are there.
    assert!(
        written
            .iter()
            .any(|e| matches!(e, TraceEvent::Free { size, .. } if *size > 0))
    );
    assert!(
        !written
            .iter()
            .any(|e| matches!(e, TraceEvent::Free { size: 0, .. }))
    );
    let (_, segment_peak) = trace::reserved_from_segments(&written).unwrap();

    let null = replay::replay(&written, &policy(r#"{"backend": "cpu"}"#)).unwrap();
    assert_eq!(decisions(&null.stats), decisions(&live_stats));
    // The file alone gives the run's whole-run peak reserved.
    assert_eq!(segment_peak, null.peak_reserved_bytes);
    // ... and it is the live run's own whole-run figure.
    assert_eq!(segment_peak, live_stats.peak_reserved_bytes);
}

/// A script's requests after its last training step (saving, logging)
/// are in a step still open when the stats are read: the stats flush the
/// trace, so that the file, read before the allocator is dropped (a
/// process's global allocator never is), holds them and gives the peak the
/// stats give (generated `loop-9-033`: one page short).
#[test]
fn the_stats_flush_the_trace_of_a_step_still_open() {
    let mut events = trace::parse(GPT2_TRACE).unwrap();
    // The open step: a request larger than any the run made, so it raises
    // the peak.
    let largest = events
        .iter()
        .filter_map(|e| match e {
            TraceEvent::Alloc { size, .. } => Some(*size),
            _ => None,
        })
        .max()
        .unwrap();
    events.push(TraceEvent::StepBegin);
    events.push(TraceEvent::Alloc {
        addr: 1 << 40,
        size: 2 * largest,
        stream: 0,
    });
    let (mut live, path) = support::traced("open-step");
    replay::drive(&mut live, &events).unwrap();
    let live_stats = live.stats();
    // Read while the allocator lives.
    let written = trace::read(&path).unwrap();
    drop(live);
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    let opened = written
        .iter()
        .rposition(|e| matches!(e, TraceEvent::StepBegin))
        .unwrap();
    assert!(
        written[opened..]
            .iter()
            .any(|e| matches!(e, TraceEvent::Alloc { size, .. } if *size == 2 * largest)),
        "the open step's request is not in the file"
    );
    let (_, segment_peak) = trace::reserved_from_segments(&written).unwrap();
    assert_eq!(segment_peak, live_stats.peak_reserved_bytes);
}

#[test]
fn a_step_out_of_order_in_a_hand_made_list_is_an_error() {
    let e = replay::replay(&[TraceEvent::StepEnd], &ReplayConfig::default()).unwrap_err();
    assert!(e.to_string().contains("trace event 0"), "{e}");
}
