//! Several threads, one stepping (issue 42), through the C ABI as the
//! extensions drive it (`tensor_arena_alloc_phase` with
//! `ROUTE_BY_THREAD`): the plan follows the thread that ends steps, the
//! other threads' requests are served outside the step without moving its
//! cursor, and a shadow map of every live block (both threads') checks
//! that no byte of a live block is ever handed out twice: each block's
//! first and last bytes carry a tag written at its allocation and checked
//! at its free. One process-wide allocator: the tests take turns.

use std::ffi::c_void;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tensor_arena_alloc::ffi::*;

#[path = "support/c_abi.rs"]
mod c_abi;
#[path = "support/tagged.rs"]
mod tagged;
use c_abi::{configure, last_error, stats};
use tagged::TaggedBlocks;

static TURN: Mutex<()> = Mutex::new(());

/// Requests the other threads made so far.
static OTHERS: AtomicUsize = AtomicUsize::new(0);

/// Lets the other threads make `n` requests inside the open step.
fn let_others_run(n: usize) {
    let start = OTHERS.load(Ordering::Relaxed);
    while OTHERS.load(Ordering::Relaxed) < start + n {
        std::thread::yield_now();
    }
}

/// Live blocks of every thread.
type Shadow = TaggedBlocks;

/// A request as the extensions make it outside autograd's backward.
fn alloc_routed(shadow: &Mutex<Shadow>, size: usize) -> *mut c_void {
    let p = tensor_arena_alloc_phase(size, 0, std::ptr::null_mut(), ROUTE_BY_THREAD);
    assert!(!p.is_null(), "{size} bytes: {}", last_error());
    shadow.lock().unwrap().insert(p as usize, size);
    p
}

fn free(shadow: &Mutex<Shadow>, p: *mut c_void) {
    shadow.lock().unwrap().remove(p as usize);
    tensor_arena_free(p, 0, 0, std::ptr::null_mut());
}

/// One training-like step on the stepping thread: activations, a
/// temporary each, gradients kept to the next step.
fn step(shadow: &Mutex<Shadow>, grads: &mut Vec<*mut c_void>, n: usize, others: bool) {
    assert_eq!(tensor_arena_step_begin(), 0);
    for g in grads.drain(..) {
        free(shadow, g);
    }
    let mut acts = Vec::new();
    for i in 0..n {
        acts.push(alloc_routed(shadow, 4096 * (i % 3 + 1)));
        let t = alloc_routed(shadow, 2000 + 100 * i);
        free(shadow, t);
    }
    if others {
        let_others_run(64);
    }
    for (i, a) in acts.into_iter().enumerate().rev() {
        grads.push(alloc_routed(shadow, 1024 * (i + 1)));
        free(shadow, a);
    }
    assert_eq!(tensor_arena_step_end(), 0, "{}", last_error());
}

/// The stepping thread trains while `others` threads allocate and free
/// at random (sizes and lifetimes from `seed`); returns the stats.
fn run(seed: u64, others: usize, steps: usize) -> serde_json::Value {
    configure(r#"{"backend": "cpu", "log_errors": false, "checked": true}"#);
    let shadow = Mutex::new(Shadow::default());
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for t in 0..others {
            let (shadow, stop) = (&shadow, &stop);
            scope.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(seed * 31 + t as u64);
                let mut held: Vec<*mut c_void> = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    OTHERS.fetch_add(1, Ordering::Relaxed);
                    if held.len() < 16 && rng.random_bool(0.6) {
                        held.push(alloc_routed(shadow, rng.random_range(1..200_000)));
                    } else if !held.is_empty() {
                        let i = rng.random_range(0..held.len());
                        free(shadow, held.swap_remove(i));
                    }
                }
                for p in held {
                    free(shadow, p);
                }
            });
        }
        let mut grads = Vec::new();
        for _ in 0..steps {
            step(&shadow, &mut grads, 12, others > 0);
        }
        for g in grads {
            free(&shadow, g);
        }
        stop.store(true, Ordering::Relaxed);
    });
    let s = stats();
    assert_eq!(s["live_blocks"], 0, "{s}");
    s
}

#[test]
fn the_plan_follows_the_stepping_thread_beside_allocating_threads() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    for seed in 0..4 {
        let s = run(seed, 2, 10);
        assert_eq!(s["phase"], "serving", "{s}");
        let after = s["requests_after_warmup"].as_u64().unwrap();
        assert!(after > 0);
        // Every request of the stepping thread's serving steps was served
        // from the plan: the other threads never moved its cursor.
        assert_eq!(s["served_from_plan"].as_u64().unwrap(), after, "{s}");
        assert_eq!(s["replans"], 0, "{s}");
        assert!(s["threads"]["other_thread_requests"].as_u64().unwrap() > 0);
        assert_eq!(s["errors"]["guard_violations"], 0);
        assert_eq!(s["errors"]["double_free"], 0);
    }
}

#[test]
fn a_named_thread_is_the_step_thread_until_unnamed() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    configure(r#"{"backend": "cpu", "log_errors": false}"#);
    let shadow = Mutex::new(Shadow::default());
    // Named on another thread: this thread's requests are the other
    // thread's, served outside the step.
    std::thread::scope(|scope| {
        scope.spawn(|| assert_eq!(tensor_arena_set_step_thread(1), 0));
    });
    assert_eq!(tensor_arena_step_begin(), 0);
    let p = alloc_routed(&shadow, 4096);
    free(&shadow, p);
    assert_eq!(tensor_arena_step_end(), 0);
    assert_eq!(stats()["threads"]["other_thread_requests"], 1);
    assert_eq!(stats()["threads"]["step_thread_named"], true);
    // Unnamed: the step calls decide again (this thread).
    assert_eq!(tensor_arena_set_step_thread(0), 0);
    assert_eq!(tensor_arena_step_begin(), 0);
    let p = alloc_routed(&shadow, 4096);
    free(&shadow, p);
    assert_eq!(tensor_arena_step_end(), 0);
    assert_eq!(stats()["threads"]["other_thread_requests"], 1);
}
