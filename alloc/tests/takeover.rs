//! The first slab's take-over (issue 38, "a take-over that pins nothing"):
//! a loop that sets its gradients to `None` only after the forward (the
//! LSTM updated by hand of python/tests/test_threads_forks.py) carries the
//! previous step's gradients through the take-over step's whole forward.
//! The take-over step holds no more than the steps after it, and the pages
//! the slab maps late are mapped before any block lands on them (every byte
//! of every block is written, in host memory).

mod support;

#[path = "support/step_peaks.rs"]
mod step_peaks;

use support::cpu;
use support::written::Written;
use tensor_arena_alloc::Config;
use tensor_arena_alloc::trace::TraceEvent;

/// Parameter sizes (bytes): two layers' weights and biases, a head.
const PARAMS: [usize; 6] = [98_304, 65_536, 1_024, 49_152, 512, 8_192];

/// The events of `steps` steps in the LSTM pattern: the parameters made
/// before the first step; each step makes its input and `acts` activations
/// (alive until the backward), then drops the previous step's gradients,
/// then the backward makes the new gradients (carried into the next step)
/// and temporaries and frees the activations.
fn by_hand(steps: usize, acts: usize) -> Vec<TraceEvent> {
    let mut ev = Vec::new();
    let mut next = 1usize;
    let mut alloc = |ev: &mut Vec<TraceEvent>, size: usize| {
        next += 1;
        ev.push(TraceEvent::Alloc {
            addr: next << 20,
            size,
            stream: 0,
        });
        next << 20
    };
    let free = |ev: &mut Vec<TraceEvent>, addr: usize| {
        ev.push(TraceEvent::Free {
            addr,
            size: 0,
            stream: 0,
        })
    };
    for &p in &PARAMS {
        alloc(&mut ev, p);
    }
    let mut grads: Vec<usize> = Vec::new();
    for _ in 0..steps {
        ev.push(TraceEvent::StepBegin);
        let x = alloc(&mut ev, 20_480);
        let mut live = Vec::new();
        for i in 0..acts {
            live.push(alloc(&mut ev, 16_384 + 4_096 * (i % 3)));
            let t = alloc(&mut ev, 8_192);
            free(&mut ev, t);
        }
        for g in grads.drain(..) {
            free(&mut ev, g);
        }
        for (i, a) in live.into_iter().enumerate().rev() {
            let t = alloc(&mut ev, 12_288);
            if let Some(&p) = PARAMS.get(i) {
                grads.push(alloc(&mut ev, p));
            }
            free(&mut ev, t);
            free(&mut ev, a);
        }
        free(&mut ev, x);
        ev.push(TraceEvent::StepEnd);
    }
    ev
}

#[test]
fn the_take_over_step_holds_what_the_steps_after_it_hold() {
    let steps = step_peaks::step_peaks(&by_hand(12, 40), &Config::default());
    let t = step_peaks::targets(&steps);
    // 1.320 before the slab's carried slots were mapped late (the slab
    // mapped whole after the step's first 16 requests, those in regions of
    // their own, the previous gradients alive).
    assert!(
        t.take_over.0 <= 1.05,
        "take-over step {} reserved {:.3}x the later steps' peak: {steps:?}",
        t.take_over.1,
        t.take_over.0
    );
}

#[test]
fn pages_mapped_late_are_mapped_before_a_block_lands_on_them() {
    for checked in [false, true] {
        let mut a = cpu(&format!(r#""mapped_range": true, "checked": {checked}"#));
        let mut sh = Written::default();
        let params: Vec<usize> = PARAMS.iter().map(|&p| sh.alloc(&mut a, p)).collect();
        let mut grads: Vec<usize> = Vec::new();
        for _ in 0..10 {
            a.step_begin().expect("begin");
            let x = sh.alloc(&mut a, 20_480);
            let mut live = Vec::new();
            for i in 0..40 {
                live.push(sh.alloc(&mut a, 16_384 + 4_096 * (i % 3)));
                let t = sh.alloc(&mut a, 8_192);
                sh.free(&mut a, t);
            }
            for g in grads.drain(..) {
                sh.free(&mut a, g);
            }
            for (i, b) in live.into_iter().enumerate().rev() {
                let t = sh.alloc(&mut a, 12_288);
                if let Some(&p) = PARAMS.get(i) {
                    grads.push(sh.alloc(&mut a, p));
                }
                sh.free(&mut a, t);
                sh.free(&mut a, b);
            }
            sh.free(&mut a, x);
            a.step_end().expect("end");
        }
        let s = a.stats();
        assert_eq!(s.phase, "serving");
        assert!(s.served_share.is_some_and(|x| x >= 0.99), "{s:?}");
        assert_eq!(s.errors.guard_violations, 0);
        assert_eq!(s.backing_calls_max_steady_step, 0, "{s:?}");
        for g in grads.into_iter().chain(params) {
            sh.free(&mut a, g);
        }
        assert_eq!(a.reset(), 0, "nothing leaked");
    }
}
