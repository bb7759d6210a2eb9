//! Fork safety for the process-wide allocator (issue 42).
//!
//! `pthread_atfork` handlers, registered at the first call of the C ABI:
//! before `fork` the forking thread takes the allocator's lock, so no other
//! thread is inside an allocator call when the address space is copied;
//! the parent then releases it; the child, the only thread there, puts the
//! allocator in a consistent state before releasing it:
//!
//! - the parent's allocator is kept only to read its figures, never to
//!   serve or free again (its planner thread does not exist in the child:
//!   its handle is forgotten, neither joined nor detached; its open step is
//!   closed; its trace is the parent's to write);
//! - every request is served from a plain caching pool over fresh host
//!   regions, so the child never hands out a byte of a region the parent's
//!   allocator held (blocks the child inherited still point there);
//! - frees of inherited blocks are counted and ignored; step calls are
//!   answered 0 (a worker forked inside a step may end it) and counted.
//!
//! CUDA and ACL do not survive a fork: a child of a CUDA or NPU process
//! gets NULL (and the reason) for device memory; start such workers with
//! `spawn`.

use std::cell::RefCell;
use std::sync::{MutexGuard, Once};

use serde_json::json;

use super::{GLOBAL, Global};
use crate::backing;
use crate::config::{Backend, Config};
use crate::fallback::Fallback;
use crate::metered::Metered;
use crate::record::Origin;

thread_local! {
    /// The allocator's lock, held by the forking thread from `prepare` to
    /// `parent` / `child` (the same thread runs all three, and in the
    /// child the thread-local is the copy of the forking thread's).
    static HELD: RefCell<Option<MutexGuard<'static, Global>>> = const { RefCell::new(None) };
}

static REGISTER: Once = Once::new();

/// Registers the fork handlers once per process.
pub(super) fn register() {
    REGISTER.call_once(|| {
        // SAFETY: three `extern "C"` functions without arguments, as
        // pthread_atfork takes them; they live as long as this library (it
        // is never unloaded while torch holds its functions).
        let rc = unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
        if rc != 0 {
            eprintln!(
                "tensor-arena allocator: pthread_atfork failed ({rc}): a fork while another thread is inside the allocator may hang the child"
            );
        }
    });
}

extern "C" fn prepare() {
    let guard = GLOBAL.lock().unwrap_or_else(|e| e.into_inner());
    // (Were the thread-local gone, the guard drops here: the fork goes on
    // unguarded rather than deadlocked.)
    let _ = HELD.try_with(move |held| *held.borrow_mut() = Some(guard));
}

extern "C" fn parent() {
    let guard = HELD
        .try_with(|held| held.borrow_mut().take())
        .ok()
        .flatten();
    drop(guard);
}

extern "C" fn child() {
    let guard = HELD
        .try_with(|held| held.borrow_mut().take())
        .ok()
        .flatten();
    if let Some(mut g) = guard {
        after_fork_in_child(&mut g);
    }
}

/// The child's state, made from the parent's copy.
fn after_fork_in_child(g: &mut Global) {
    let config = g
        .allocator
        .as_ref()
        .map(|a| a.config().clone())
        .or_else(|| g.config.clone());
    if let Some(a) = g.allocator.as_mut() {
        a.forget_after_fork();
    }
    let forks = g.child.as_ref().map_or(0, |c| c.depth) + 1;
    // A child of a child: the pool's regions hold blocks this child
    // inherited too; it is forgotten like the parent's allocator.
    if let Some(old) = g.child.take() {
        std::mem::forget(old);
    }
    g.child = Some(ChildPool::new(config.as_ref(), forks));
    g.thread = super::threads::StepThread::new();
}

/// What a forked child serves from.
pub(super) struct ChildPool {
    backend: Backend,
    backing: Metered,
    pool: Fallback,
    /// Forks between the process that configured the allocator and this one.
    depth: u32,
    requests: u64,
    inherited_frees: u64,
    step_calls: u64,
}

impl ChildPool {
    fn new(config: Option<&Config>, depth: u32) -> ChildPool {
        let platform = config
            .map(Config::platform)
            .unwrap_or(crate::Platform::Cuda);
        ChildPool {
            backend: config.map_or(Backend::Cpu, |c| c.backend),
            backing: Metered::new(Box::new(backing::host_backing())),
            pool: Fallback::new(crate::caching_config(platform)),
            depth,
            requests: 0,
            inherited_frees: 0,
            step_calls: 0,
        }
    }

    /// A request in the child: the pool's address, or why NULL.
    pub(super) fn alloc(&mut self, size: usize) -> Result<usize, String> {
        self.requests += 1;
        if self.backend != Backend::Cpu {
            return Err(format!(
                "alloc of {size} bytes in a forked child: {} memory does not survive fork; start workers with the spawn method",
                self.backend.name()
            ));
        }
        if size == 0 {
            return Err("alloc of 0 bytes: answered NULL".to_owned());
        }
        self.pool
            .malloc(&mut self.backing, size as u64, 0, Origin::OUTSIDE)
            .ok_or_else(|| {
                format!("out of memory in a forked child's pool: {size} bytes asked; answered NULL")
            })
    }

    /// A free in the child: the pool's block, or an inherited one (counted,
    /// its memory left where it is).
    pub(super) fn free(&mut self, addr: usize) {
        if self.pool.free(&mut self.backing, addr).is_none() {
            self.inherited_frees += 1;
        }
    }

    /// A step call in the child: answered 0, counted.
    pub(super) fn step_call(&mut self) -> i32 {
        self.step_calls += 1;
        0
    }

    /// The child's figures (the stats JSON's `fork` key).
    pub(super) fn json(&self) -> serde_json::Value {
        json!({
            "child": true,
            "depth": self.depth,
            "requests": self.requests,
            "live_blocks": self.pool.live_count(),
            "reserved_bytes": self.backing.current(),
            "peak_reserved_bytes": self.backing.peak(),
            "inherited_frees_ignored": self.inherited_frees,
            "step_calls_answered": self.step_calls,
        })
    }
}
