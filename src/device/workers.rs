//! A fork-join pool of persistent worker threads that runs one borrowed
//! closure on every thread and waits for all of them, without allocating.
//!
//! rayon (the obvious choice) allocates a little on most calls from outside
//! its pool (job queue blocks, latches), which would break the "no
//! allocation per step" guarantee for threaded kernels. This pool keeps one
//! job slot behind a mutex: the caller publishes a pointer to its closure,
//! runs part 0 itself, and returns only after every worker has finished, so
//! the closure outlives every use of the pointer.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use crate::error::{Error, Result};

/// The job a call publishes: runs part `i` of `parts`.
type Job = dyn Fn(usize) + Sync;

/// A published job: a lifetime-erased pointer to the caller's closure.
#[derive(Clone, Copy)]
struct JobPtr(*const Job);

// SAFETY: the pointee is `Sync`, so sharing it across threads is sound; the
// pointer is only dereferenced while the publishing call is blocked waiting
// for the workers (see `Workers::run`), so it never dangles.
unsafe impl Send for JobPtr {}

struct State {
    job: Option<JobPtr>,
    /// Bumped for every job, so a worker runs each job exactly once.
    generation: u64,
    /// Workers still running the current job.
    running: usize,
    /// A worker's part panicked.
    panicked: bool,
    shutdown: bool,
}

struct Shared {
    state: Mutex<State>,
    start: Condvar,
    done: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic inside a job is caught before the lock is taken again, so
        // poisoning carries no broken invariant; keep going.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Persistent worker threads; `parts()` is workers + the calling thread.
pub(crate) struct Workers {
    shared: Arc<Shared>,
    handles: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Workers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workers")
            .field("parts", &self.parts())
            .finish()
    }
}

impl Workers {
    /// Starts `threads - 1` workers (the caller is the last part).
    pub fn new(threads: usize) -> Result<Workers> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                job: None,
                generation: 0,
                running: 0,
                panicked: false,
                shutdown: false,
            }),
            start: Condvar::new(),
            done: Condvar::new(),
        });
        let mut handles = Vec::with_capacity(threads.saturating_sub(1));
        for part in 1..threads.max(1) {
            let shared = Arc::clone(&shared);
            let handle = std::thread::Builder::new()
                .name(format!("tensor-arena-{part}"))
                .spawn(move || worker(&shared, part))
                .map_err(|e| Error::Device {
                    device: "host".to_owned(),
                    operation: "start worker threads",
                    message: e.to_string(),
                })?;
            handles.push(handle);
        }
        Ok(Workers { shared, handles })
    }

    /// Number of parts a job is split into.
    pub fn parts(&self) -> usize {
        self.handles.len() + 1
    }

    /// Runs `job(i)` for every part `i` in `0..parts()`, part 0 on the
    /// calling thread, and returns when all are done. Panics if a part
    /// panicked (after every part has finished).
    pub fn run(&self, job: &(dyn Fn(usize) + Sync)) {
        // SAFETY: only the lifetime is erased (same fat-pointer layout).
        // The pointer is stored in the shared slot and read by workers only
        // between here and the wait below, which does not return until
        // `running` is back to 0, i.e. until no worker can touch it any
        // more; the slot is cleared before returning.
        let erased =
            unsafe { std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), *const Job>(job) };
        let ptr = JobPtr(erased);
        {
            let mut st = self.shared.lock();
            st.job = Some(ptr);
            st.generation = st.generation.wrapping_add(1);
            st.running = self.handles.len();
            st.panicked = false;
        }
        self.shared.start.notify_all();
        let mine = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(0)));
        let mut st = self.shared.lock();
        while st.running > 0 {
            st = self
                .shared
                .done
                .wait(st)
                .unwrap_or_else(PoisonError::into_inner);
        }
        st.job = None;
        let theirs = st.panicked;
        drop(st);
        if let Err(payload) = mine {
            std::panic::resume_unwind(payload);
        }
        assert!(!theirs, "a worker thread panicked while running a kernel");
    }
}

fn worker(shared: &Shared, part: usize) {
    let mut seen = 0u64;
    loop {
        let job = {
            let mut st = shared.lock();
            while !st.shutdown && st.generation == seen {
                st = shared
                    .start
                    .wait(st)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            if st.shutdown {
                return;
            }
            seen = st.generation;
            st.job
        };
        let ok = job.is_none_or(|JobPtr(f)| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                // SAFETY: the publishing `run` call is blocked until this
                // worker decrements `running` below, so the closure is alive.
                let f = unsafe { &*f };
                f(part)
            }))
            .is_ok()
        });
        let mut st = shared.lock();
        st.panicked |= !ok;
        st.running -= 1;
        if st.running == 0 {
            shared.done.notify_one();
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.shared.lock().shutdown = true;
        self.shared.start.notify_all();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_part_runs_once_per_call() {
        let w = Workers::new(3).unwrap();
        assert_eq!(w.parts(), 3);
        let hits: Vec<AtomicUsize> = (0..3).map(|_| AtomicUsize::new(0)).collect();
        for _ in 0..100 {
            w.run(&|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
        }
        for h in &hits {
            assert_eq!(h.load(Ordering::Relaxed), 100);
        }
    }

    #[test]
    fn a_panicking_part_is_reported_and_the_pool_survives() {
        let w = Workers::new(2).unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            w.run(&|i| assert!(i != 1, "boom"));
        }));
        assert!(r.is_err());
        let n = AtomicUsize::new(0);
        w.run(&|_| {
            n.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(n.load(Ordering::Relaxed), 2);
    }
}
