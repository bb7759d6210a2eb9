//! A recorded step whose step before was not recorded (the first step a
//! plan is made from, an eval pass) does not know which blocks were
//! carried into it, so `step_conflicts` takes every recorded step's
//! carried blocks to be alive there (issue 38). One that the step makes
//! its own request at the site of was freed by then: a site has one slot
//! (a doubled one has two and is placed by its merged lifetime). Before
//! that bound, a loop whose micro-batches' kinds put those blocks on other
//! nodes was planned with them alive through the whole step.

mod support;

use support::cpu;
use support::written::replay_written;
use tensor_arena_alloc::Config;
use tensor_arena_alloc::replay::{self, ReplayConfig};
use tensor_arena_alloc::trace::TraceEvent;

fn events(name: &str) -> Vec<TraceEvent> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/data/generated/{name}.csv.gz"));
    support::loops::read_gz(&path)
}

#[test]
fn blocks_carried_into_an_unrecorded_successor_end_at_its_own_request() {
    // 1.147x the live lower bound before, 1.014x with the bound.
    let config = ReplayConfig {
        policy: Config::default(),
        capacity: None,
    };
    let p = replay::replay(&events("loop-1-011"), &config).expect("replay");
    let s = &p.stats;
    assert_eq!(s.errors.double_free + s.errors.unknown_free, 0);
    let ratio = p.peak_reserved_bytes as f64 / p.live_lower_bound_bytes as f64;
    assert!(
        ratio <= 1.08,
        "loop-1-011: {ratio:.3}x the live lower bound"
    );
}

#[test]
fn its_blocks_never_share_bytes() {
    for checked in [false, true] {
        let mut a = cpu(&format!(r#""checked": {checked}"#));
        replay_written(&mut a, &events("loop-1-011"));
        let s = a.stats();
        assert_eq!(s.phase, "serving");
        assert_eq!(s.errors.guard_violations, 0);
        assert_eq!(a.reset(), 0, "nothing leaked");
    }
}
