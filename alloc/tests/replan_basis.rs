//! A re-plan from a basis that skips steps, session 18 (issue 38): a
//! re-plan is made from the recent steps and the steps the serving plan
//! was made from, so a step of the basis may lack the step after it. The
//! blocks such a step carried into its next step are taken to be freed
//! where its own request at that clock lies (`src/site_plan.rs`), not at
//! the next step's end; the plan's per-step bound counts carried blocks
//! only from the step recorded right before; and a plan grown in place
//! leaves the old region's lent pages unmapped (`src/allocator/growth.rs`).
//! Every block of the runs is written and checked in host memory.

mod support;

use support::generated;
use support::written::replay_written_both_modes;

/// Planned / LB and the served share of a generated test trace.
fn figures(name: &str) -> (f64, f64) {
    let p = support::replay_default(&generated(name));
    let r = p.peak_reserved_bytes as f64 / p.live_lower_bound_bytes as f64;
    (r, p.served_share.unwrap_or(0.0))
}

#[test]
fn an_eval_pass_every_ten_steps_is_served_after_its_re_plan() {
    // Fixed shapes, `masked_select`, an eval pass every 10 steps: the
    // re-plan that adds the eval pass's sites was merged from steps 2, 4,
    // 5, 6 and 17-20, and the blocks steps 2 and 6 carried into steps not
    // among them lived, in the plan, through a whole next step: 7.5% over
    // its bound, declined at every eval pass, whose requests then missed
    // for the rest of the run (95.63% served). Now 99.03% served.
    let (r, served) = figures("loop-27-019");
    assert!(served >= 0.99, "loop-27-019: {:.2}% served", served * 100.0);
    assert!(r <= 1.02, "loop-27-019: {r:.3}x the live lower bound");
}

#[test]
fn a_plan_bound_counts_carried_blocks_only_from_the_step_before() {
    // Bucketed lengths: a re-plan's bound counted, in a step whose step
    // before was not in the basis, the blocks the basis's previous step
    // carried: a bound 15% too high, so a plan that tall passed as tight
    // and went in (1.058x the live lower bound); now it is declined and
    // the loop holds 1.003x, 98.25% served (95.57% before the session).
    let (r, served) = figures("loop-6-006");
    assert!(r <= 1.03, "loop-6-006: {r:.3}x the live lower bound");
    assert!(served >= 0.97, "loop-6-006: {:.2}% served", served * 100.0);
}

#[test]
fn a_plan_grown_in_place_leaves_the_lent_pages_unmapped() {
    // Fixed shapes, `nonzero`: the misses of step 30 borrow a third of the
    // slab's pages and outlive the step; the re-plan at its end grows the
    // region by 12 KiB, and mapping the whole region then mapped the lent
    // pages beside the misses: 1.113x the live lower bound. Left to be
    // mapped as blocks land on them: 1.028x.
    let (r, _) = figures("loop-14-000");
    assert!(r <= 1.05, "loop-14-000: {r:.3}x the live lower bound");
}

#[test]
fn blocks_of_re_planned_runs_never_share_bytes() {
    for name in ["loop-27-019", "loop-6-006", "loop-14-000"] {
        replay_written_both_modes(&generated(name));
    }
}
