//! Forks of a process whose allocator is in use (issue 42), through the C
//! ABI as torch drives it: a fork while another thread is inside the
//! allocator (the child must not hang on its lock), and a fork while a
//! plan is being made on the planner's thread (the child ends its step: no
//! panic, no error). Each child reports by its exit status; the parent
//! waits for it a bounded time (waitpid with WNOHANG), then kills it and
//! fails. One process-wide allocator: the tests take turns.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tensor_arena_alloc::ffi::*;

#[path = "support/c_abi.rs"]
mod c_abi;
use c_abi::{configure, last_error, stats};

static TURN: Mutex<()> = Mutex::new(());

/// How long a child may take before it counts as hung.
const CHILD_LIMIT: Duration = Duration::from_secs(20);

/// Forks; the child runs `body` and exits with its code (never returns
/// into the test harness). The parent gets the child's pid.
fn fork_child(body: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: fork in a test process; the child only runs `body` (the
    // allocator, whose fork handlers made it consistent, and malloc, which
    // glibc keeps fork-safe) and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(101);
        // SAFETY: leaves the child at once, running no destructor of the
        // parent's state.
        unsafe { libc::_exit(code) };
    }
    pid
}

/// Waits for `pid` at most [`CHILD_LIMIT`]; its exit status, or `None`
/// when it hung (it is killed then).
fn wait_bounded(pid: libc::pid_t) -> Option<i32> {
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: our own child; `status` is a valid out-pointer.
        let got = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if got == pid {
            return Some(if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else {
                -1
            });
        }
        let limit = std::env::var("FORK_TEST_LIMIT_S")
            .ok()
            .and_then(|s| s.parse().ok())
            .map_or(CHILD_LIMIT, Duration::from_secs);
        if start.elapsed() > limit {
            if std::env::var("FORK_TEST_DEBUG").is_ok() {
                eprintln!("hung child {pid}");
                std::thread::sleep(Duration::from_secs(120));
            }
            // SAFETY: our own child, hung: killed and reaped.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// What a child does with the allocator: requests, frees, a step end (a
/// worker forked inside a step ends it); 0 when every answer was right.
fn child_work() -> i32 {
    let mut blocks = Vec::new();
    for i in 0..64 {
        let p = tensor_arena_alloc(1000 + i * 512, 0, std::ptr::null_mut());
        if p.is_null() {
            return 2;
        }
        // SAFETY: a live block of at least 1000 bytes.
        unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0xA5, 1000) };
        blocks.push(p);
    }
    for p in blocks {
        tensor_arena_free(p, 0, 0, std::ptr::null_mut());
    }
    if tensor_arena_step_end() != 0 || tensor_arena_step_begin() != 0 {
        return 3;
    }
    let s = stats();
    if s["fork"]["child"] != true || s["fork"]["live_blocks"] != 0 {
        return 4;
    }
    0
}

#[test]
fn a_fork_while_another_thread_is_inside_the_allocator_does_not_hang_the_child() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    configure(r#"{"backend": "cpu", "log_errors": false}"#);
    let stop = AtomicBool::new(false);
    let results = std::thread::scope(|scope| {
        // The allocating thread holds the allocator's lock nearly all the
        // time: without the fork handlers a fork copies it held.
        scope.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let mut held = Vec::with_capacity(32);
                for i in 0..32 {
                    held.push(tensor_arena_alloc(4096 + i * 64, 0, std::ptr::null_mut()));
                }
                for p in held {
                    tensor_arena_free(p, 0, 0, std::ptr::null_mut());
                }
            }
        });
        assert_eq!(tensor_arena_step_begin(), 0);
        let mut results = Vec::new();
        for _ in 0..40 {
            let pid = fork_child(child_work);
            results.push(wait_bounded(pid));
        }
        stop.store(true, Ordering::Relaxed);
        assert_eq!(tensor_arena_step_end(), 0);
        results
    });
    let hung = results.iter().filter(|r| r.is_none()).count();
    assert_eq!(hung, 0, "children hung: {results:?}");
    assert!(results.iter().all(|r| *r == Some(0)), "{results:?}");
    // The parent goes on as before.
    let s = stats();
    assert_eq!(s["fork"]["child"], false);
    assert_eq!(s["live_blocks"], 0, "{s}");
}

/// One step of a loop large enough that its plan is made on the
/// planner's thread and takes a while.
fn big_step(keep: &mut Vec<*mut std::ffi::c_void>) {
    assert_eq!(tensor_arena_step_begin(), 0);
    for p in keep.drain(..) {
        tensor_arena_free(p, 0, 0, std::ptr::null_mut());
    }
    let mut acts = Vec::new();
    for i in 0..30_000usize {
        acts.push(tensor_arena_alloc(
            512 * (1 + i % 37),
            0,
            std::ptr::null_mut(),
        ));
        if i % 3 == 0 {
            let t = tensor_arena_alloc(700 + i % 5000, 0, std::ptr::null_mut());
            tensor_arena_free(t, 0, 0, std::ptr::null_mut());
        }
    }
    for (i, p) in acts.into_iter().enumerate().rev() {
        if i % 50 == 0 {
            keep.push(tensor_arena_alloc(4096, 0, std::ptr::null_mut()));
        }
        tensor_arena_free(p, 0, 0, std::ptr::null_mut());
    }
    assert_eq!(tensor_arena_step_end(), 0, "{}", last_error());
}

#[test]
fn a_child_forked_with_a_plan_pending_ends_its_step_without_panic_or_error() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let mut pending_at_fork = 0;
    let mut results = Vec::new();
    for _ in 0..6 {
        // The first step is recorded and planned from, on the planner's
        // thread, while the next one runs.
        configure(
            r#"{"backend": "cpu", "log_errors": false, "background_plan_requests": 1, "warmup_steps": 0, "record_steps": 1}"#,
        );
        let mut keep = Vec::new();
        big_step(&mut keep);
        assert_eq!(tensor_arena_step_begin(), 0);
        // Forked inside a step, while the plan may still be made.
        pending_at_fork += u32::from(stats()["threads"]["planner_running"] == true);
        let pid = fork_child(|| {
            let code = child_work();
            if code != 0 {
                return code;
            }
            // The step the parent had open ends in the child too.
            if tensor_arena_step_end() != 0 {
                return 5;
            }
            let s = stats();
            if s["errors"]["step_order"] != 0 {
                return 6;
            }
            0
        });
        results.push(wait_bounded(pid));
        assert_eq!(tensor_arena_step_end(), 0, "{}", last_error());
        for p in keep.drain(..) {
            tensor_arena_free(p, 0, 0, std::ptr::null_mut());
        }
        let s = stats();
        assert_eq!(s["phase"], "serving", "{s}");
        assert_eq!(s["errors"]["step_order"], 0);
    }
    assert!(results.iter().all(|r| *r == Some(0)), "{results:?}");
    assert!(
        pending_at_fork > 0,
        "no fork found the planner running: the test did not test it"
    );
}
