//! A recorded step whose step before was not recorded (the first step a
//! plan is made from, an eval pass) does not know which blocks were
//! carried into it, so `step_conflicts` takes every recorded step's
//! carried blocks to be alive there (issue 38). One that the step makes
//! its own request at the site of was freed by then: a site has one slot
//! (a doubled one has two and is placed by its merged lifetime). Before
//! that bound, a loop whose micro-batches' kinds put those blocks on other
//! nodes was planned with them alive through the whole step.

mod support;

use support::written::replay_written_both_modes;
use support::{generated, generated_over_bound};

#[test]
fn blocks_carried_into_an_unrecorded_successor_end_at_its_own_request() {
    // 1.147x the live lower bound before, 1.014x with the bound.
    let ratio = generated_over_bound("loop-1-011");
    assert!(
        ratio <= 1.08,
        "loop-1-011: {ratio:.3}x the live lower bound"
    );
}

#[test]
fn its_blocks_never_share_bytes() {
    replay_written_both_modes(&generated("loop-1-011"));
}
