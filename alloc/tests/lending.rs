//! A step that outgrows the plan (issue 38, allocator/lending.rs): its
//! misses that no gap of the slab holds take regions outside the slab,
//! and the slab lends them its idle pages first (unmapped, mapped again as
//! blocks land on them and at the step's end). The step then holds about
//! its own live peak, not the slab beside a copy of its excess; the pages
//! lent are mapped again before any block lands on them (every byte of
//! every block is written, in host memory), and a steady step makes no
//! device call.

mod support;

use support::cpu;
use support::written::{Written, replay_written};
use tensor_arena_alloc::{Config, PlannedAllocator};

/// Weights made before the first step (bytes).
const PARAMS: [usize; 3] = [262_144, 131_072, 4_096];

/// Activations of a step whose odd ones are at `scale` (thousandths):
/// each alive until the step's backward, a temporary made and freed after
/// each. At a larger scale the even ones still take their planned sites,
/// spread over the slab, and the odd ones fit neither their sites nor the
/// gaps between.
fn activations(scale: usize) -> Vec<usize> {
    (0..24)
        .map(|i| {
            let size = 65_536 + 16_384 * (i % 4);
            if i % 2 == 1 {
                size * scale / 1_000
            } else {
                size
            }
        })
        .collect()
}

/// The scale of step `s` (from 0): every seventh step from the twelfth is
/// larger than any before it (a longer sequence, a larger eval batch).
fn scale_of(s: usize) -> usize {
    if s >= 12 && s % 7 == 5 {
        1_500 + 250 * (s - 5) / 7
    } else {
        1_000
    }
}

/// One step at `scale`: the activations (a temporary after each), freed in
/// reverse with a gradient-sized temporary each.
fn step(a: &mut PlannedAllocator, sh: &mut Written, scale: usize) {
    a.step_begin().expect("begin");
    let mut live = Vec::new();
    for size in activations(scale) {
        live.push(sh.alloc(a, size));
        let t = sh.alloc(a, size / 4);
        sh.free(a, t);
    }
    for b in live.into_iter().rev() {
        let t = sh.alloc(a, 8_192);
        sh.free(a, t);
        sh.free(a, b);
    }
    a.step_end().expect("end");
}

/// A generated loop's trace (tests/data/README.md) replayed under the
/// default policy with lending on or off: its whole-run peak reserved, its
/// live lower bound and the bytes lent.
fn replay_generated(name: &str, lend: bool) -> (u64, u64, u64) {
    let policy = Config {
        lend_slab_pages: lend,
        ..Config::default()
    };
    let p = support::replay_with(&support::generated(name), policy);
    (
        p.peak_reserved_bytes,
        p.live_lower_bound_bytes,
        p.stats.lent_slab_bytes,
    )
}

#[test]
fn a_step_of_a_new_kind_holds_about_its_own_live_peak() {
    // Generated loop-1-018: an eval pass every 10 steps at 48x the training
    // batch, its requests unknown to the plan (another phase). Its first
    // eval steps held the training slab, idle, beside the eval's blocks in
    // regions of their own: 1.374x the live lower bound over the run
    // without lending, 1.008x with it. loop-1-059 (random shapes, an eval
    // pass every 5 steps): 1.311x without, 1.034x with (1.547x and 1.021x
    // with four size buckets per power of two instead of eight; 1.548x and
    // 1.083x since a re-plan waits for a second missing step: it misses in
    // most steps, and its sixth plan is looser than the fifth was).
    for (name, without_at_least, with_at_most) in
        [("loop-1-018", 1.30, 1.05), ("loop-1-059", 1.25, 1.10)]
    {
        let (peak, bound, lent) = replay_generated(name, true);
        let (peak_off, bound_off, lent_off) = replay_generated(name, false);
        assert_eq!(bound, bound_off);
        assert_eq!(lent_off, 0);
        assert!(lent > 0, "{name}: nothing lent");
        let (with, without) = (peak as f64 / bound as f64, peak_off as f64 / bound as f64);
        assert!(
            with <= with_at_most,
            "{name}: {with:.3}x the live lower bound with lending ({without:.3}x without)"
        );
        assert!(
            without >= without_at_least,
            "{name}: {without:.3}x without lending: the trace no longer shows the case"
        );
    }
}

#[test]
fn lent_pages_are_not_mapped_back_above_the_runs_peak_at_a_steps_end() {
    // Generated loop-14-000 (fixed shapes, a masked select whose size
    // changes): at step 29 misses cascade down the step and two
    // gradient-sized blocks, refused by their sites, go outside the slab
    // on lent pages and live on to the next step. Mapping every lent page
    // back at the step's end, beside them, set the run's peak there: 2.51
    // MiB for 1.96 MiB live, 1.276x the live lower bound over the run.
    // Lent pages that would raise the peak stay lent: 1.022x.
    let (peak, bound, lent) = replay_generated("loop-14-000", true);
    assert!(lent > 0, "nothing lent: the trace no longer shows the case");
    let ratio = peak as f64 / bound as f64;
    assert!(ratio <= 1.05, "{ratio:.3}x the live lower bound");
}

#[test]
fn pages_left_lent_past_a_steps_end_are_mapped_before_blocks_land() {
    // The same trace on host pages (a `PROT_NONE` reservation, lent pages
    // really unmapped), every block written whole and checked at its
    // free: a page left lent at a step's end that a later block landed on
    // unmapped would fault.
    let path = support::generated("loop-14-000");
    for checked in [false, true] {
        let mut a = cpu(&format!(r#""mapped_range": true, "checked": {checked}"#));
        replay_written(&mut a, &support::loops::read_gz(&path));
        let s = a.stats();
        assert!(s.lent_slab_bytes > 0, "nothing lent: {s:?}");
        assert_eq!(s.errors.guard_violations, 0);
        assert_eq!(a.reset(), 0, "nothing leaked");
    }
}

#[test]
fn lent_pages_are_mapped_again_before_a_block_lands_on_them() {
    for checked in [false, true] {
        let mut a = cpu(&format!(r#""mapped_range": true, "checked": {checked}"#));
        let mut sh = Written::default();
        let params: Vec<usize> = PARAMS.iter().map(|&p| sh.alloc(&mut a, p)).collect();
        for s in 0..40 {
            step(&mut a, &mut sh, scale_of(s));
        }
        let s = a.stats();
        assert_eq!(s.phase, "serving");
        assert!(s.lent_slab_bytes > 0, "no page was lent: {s:?}");
        assert_eq!(s.errors.guard_violations, 0);
        for p in params {
            sh.free(&mut a, p);
        }
        assert_eq!(a.reset(), 0, "nothing leaked");
    }
}

#[test]
fn steps_that_fit_the_plan_lend_nothing_and_make_no_call() {
    let mut a = cpu(r#""mapped_range": true"#);
    let mut sh = Written::default();
    let params: Vec<usize> = PARAMS.iter().map(|&p| sh.alloc(&mut a, p)).collect();
    for _ in 0..12 {
        step(&mut a, &mut sh, 1_000);
    }
    let s = a.stats();
    assert_eq!(s.lent_slab_bytes, 0, "{s:?}");
    assert_eq!(s.backing_calls_max_steady_step, 0, "{s:?}");
    for p in params {
        sh.free(&mut a, p);
    }
    assert_eq!(a.reset(), 0);
}

#[test]
fn a_replan_that_would_raise_the_runs_peak_is_declined() {
    // Generated loop-4-009 (random input sides, masks, accumulation): after
    // the step of its largest live peak, which lending held at 1.011x its
    // own peak, the re-plan merged from steps of different shapes came to a
    // 6.19 MiB slab for a 4.64 MiB bound and set the whole run's peak,
    // 1.337x the live lower bound. Declined, the plan in place serves on:
    // 1.030x.
    let p = support::replay_default(&support::generated("loop-4-009"));
    let s = &p.stats;
    assert!(s.replans_declined > 0, "{s:?}");
    support::assert_peak_within(&p, 110);
}

#[test]
fn a_serving_step_that_sets_a_new_peak_unmaps_idle_pages_first() {
    // Generated loop-1-078 (attention, lengths growing by stages, an eval
    // pass every 5 steps at a larger batch): every re-plan is declined and
    // each eval step's misses are larger than the last. Their regions
    // outside the slab stay mapped between steps; when a step's misses
    // needed more, new pages were mapped past the run's peak beside 4.5
    // MiB of those idle ones: 1.316x the live lower bound. Idle runs are
    // now unmapped first in a serving step too (`ROOM_CALLS`): 1.004x.
    let p = support::replay_default(&support::generated("loop-1-078"));
    let s = &p.stats;
    assert_eq!(s.phase, "serving");
    support::assert_peak_within(&p, 105);
}
