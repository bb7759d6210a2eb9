//! The recorded training loops of the allocator suite
//! (tests/data/loops/*.csv.gz, see its README) replayed through the policy
//! over a backing that holds no memory: what must hold on every real loop,
//! whatever the policy's figures (those are benchmarks:
//! `cargo run --release -p tensor-arena-alloc --example replay_loops`).

mod support;

use support::loops;
use tensor_arena_alloc::replay::{self, ReplayConfig};

#[test]
fn every_recorded_loop_replays_with_consistent_whole_run_figures() {
    let all = loops::all();
    assert!(all.len() >= 5, "the suite's traces are checked in");
    for (name, events) in all {
        let p = replay::replay(&events, &ReplayConfig::default()).expect(&name);
        let s = &p.stats;
        assert!(s.steps >= 30, "{name}: {} steps", s.steps);
        assert_eq!(s.plans, s.replans + 1, "{name}: planned");
        // The backing's meter and the stats agree on the whole run.
        assert_eq!(p.peak_reserved_bytes, s.peak_reserved_bytes, "{name}");
        assert!(s.peak_reserved_bytes >= s.reserved_bytes, "{name}");
        // The models saw exactly the requests the allocator served.
        assert_eq!(s.caching_model.peak_live_bytes, s.peak_live_bytes, "{name}");
        assert!(
            s.caching_model.peak_reserved_bytes >= s.peak_live_bytes,
            "{name}"
        );
        assert!(s.peak_reserved_bytes >= s.peak_live_bytes, "{name}");
        // The live lower bound is one: each live block rounded to 512 bytes
        // lies in reserved memory, in the mapped range as in regions, and
        // the caching model cannot beat it either.
        assert!(s.lower_bound_bytes >= s.peak_live_bytes, "{name}");
        assert!(s.peak_reserved_bytes >= s.lower_bound_bytes, "{name}");
        assert!(
            s.caching_model.peak_reserved_bytes >= s.lower_bound_bytes,
            "{name}"
        );
        assert_eq!(p.live_lower_bound_bytes, s.lower_bound_bytes, "{name}");
        // Every region comes from the mapped range (host pages): no
        // whole-region device call.
        assert_eq!(
            (s.backing_calls.reserve, s.backing_calls.release),
            (0, 0),
            "{name}"
        );
        assert_eq!(s.errors.double_free + s.errors.unknown_free, 0, "{name}");
        assert_eq!(s.errors.out_of_memory, 0, "{name}");
    }
}
