//! The first slab takes over with none of its pages mapped (issue 38,
//! `src/allocator/takeover.rs`): while the step before's blocks are still
//! alive in the warm-up's regions, a block maps only its own pages; past
//! a few, every page but the carried slots'. Every block of the runs is
//! written and checked in host memory.

mod support;

use support::written::replay_written_both_modes;
use support::{generated, generated_over_bound, replay_default};

#[test]
fn the_take_over_holds_no_page_twice_while_the_step_before_lives() {
    // Fixed shapes, `nonzero`, accumulation 4, a 0.33 MiB bound: the
    // slab's pages outside the carried slots were mapped at the take-over
    // step's first request, while the step before's blocks held 0.11 MiB
    // elsewhere until its fourth: 1.198x the live lower bound, all of it
    // at the take-over; deferred, 1.057x.
    let p = replay_default(&generated("loop-25-018"));
    let r = p.peak_reserved_bytes as f64 / p.live_lower_bound_bytes as f64;
    assert!(r <= 1.10, "loop-25-018: {r:.3}x the live lower bound");
    // Carried blocks alive to the take-over step's 87th request: past the
    // cap, every deferred page mapped (the carried slots' too) held those
    // twice, 1.259x; every page but the carried slots', 1.033x (as when
    // only those were deferred).
    let r = generated_over_bound("loop-1-080");
    assert!(r <= 1.06, "loop-1-080: {r:.3}x the live lower bound");
}

#[test]
fn blocks_of_a_deferred_take_over_never_share_bytes() {
    for name in ["loop-25-018", "loop-1-080"] {
        replay_written_both_modes(&generated(name));
    }
}
