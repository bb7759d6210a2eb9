//! The first plan's oldest recorded step has no recorded step before it,
//! so when the blocks carried into it are freed is not known; a small one
//! was taken to live through the whole step. Where that step made the
//! requests of a step whose step before was recorded (a twin: the loop
//! repeating), its carried blocks are taken to be freed where the
//! recorded steps freed them (issue 38, `src/step_conflicts.rs`,
//! `SMALL_CARRIED`). The busiest step is also packed with the slots it
//! carries in laid by their own instances alone (the fifth first-fit
//! order). Every block of the runs is written and checked in host memory.

mod support;

use support::generated;
use support::generated_over_bound;
use support::written::replay_written_both_modes;

#[test]
fn a_repeating_first_step_frees_its_carried_blocks_where_its_twin_did() {
    // Fixed shapes, a masked select, SGD: the first plan's oldest step
    // (an orphan) held its small carried blocks' slots for the whole
    // step: 1.148x the live lower bound; with the twin's clocks 1.061x.
    let r = generated_over_bound("loop-16-016");
    assert!(r <= 1.10, "loop-16-016: {r:.3}x the live lower bound");
}

#[test]
fn carried_gradients_are_packed_by_their_own_instances() {
    // Fixed shapes, accumulation 4, Adam: four gradients (88 KB and three
    // of 22 KB) freed at the next step's requests 8 and 20, spanned over
    // the whole step in the busiest step's own packing: 1.187x the live
    // lower bound, 1.154x with twins alone, 1.106x with the fifth order.
    let r = generated_over_bound("loop-24-017");
    assert!(r <= 1.13, "loop-24-017: {r:.3}x the live lower bound");
}

#[test]
fn blocks_of_twinned_runs_never_share_bytes() {
    for name in ["loop-16-016", "loop-24-017"] {
        replay_written_both_modes(&generated(name));
    }
}
