//! One slot per kind of step (issue 38, src/kinds.rs): a plan whose
//! recorded steps come in a few shapes (buckets of lengths) places each
//! shape's blocks on its own after the request that tells them apart. The
//! whole run holds less over its live lower bound, and no block of one
//! kind's slots ever lands on another's bytes (every byte of every block
//! written and checked in host memory).

mod support;

use support::cpu;
use support::written::replay_written;
use tensor_arena_alloc::Config;
use tensor_arena_alloc::replay::ReplayConfig;
use tensor_arena_alloc::trace::TraceEvent;

fn events(name: &str) -> Vec<TraceEvent> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/data/generated/{name}.csv.gz"));
    support::loops::read_gz(&path)
}

#[test]
fn steps_of_a_few_shapes_hold_less_over_their_live_bound() {
    // Replays of the previous policy (one offset per site): loop-13-022
    // 1.301x, loop-14-006 1.211x, loop-14-021 1.451x the live lower bound
    // (its steps accumulate four micro-batches, each of its own bucket:
    // one deciding site per micro-batch).
    for (name, at_most) in [
        ("loop-13-022", 1.24),
        ("loop-14-006", 1.17),
        ("loop-14-021", 1.20),
    ] {
        let config = ReplayConfig {
            policy: Config::default(),
            capacity: None,
        };
        let p = tensor_arena_alloc::replay::replay(&events(name), &config).expect("replay");
        let s = &p.stats;
        assert_eq!(s.errors.double_free + s.errors.unknown_free, 0);
        let ratio = p.peak_reserved_bytes as f64 / p.live_lower_bound_bytes as f64;
        assert!(ratio <= at_most, "{name}: {ratio:.3}x the live lower bound");
    }
}

#[test]
fn blocks_served_by_kind_never_share_bytes() {
    for name in ["loop-13-022", "loop-14-006", "loop-14-021"] {
        for checked in [false, true] {
            let mut a = cpu(&format!(r#""checked": {checked}"#));
            replay_written(&mut a, &events(name));
            let s = a.stats();
            assert_eq!(s.phase, "serving", "{name}");
            assert_eq!(s.errors.guard_violations, 0, "{name}");
            assert_eq!(a.reset(), 0, "{name}: nothing leaked");
        }
    }
}
