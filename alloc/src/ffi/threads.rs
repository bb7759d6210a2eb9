//! Which thread the plan follows (issue 42): the thread that ends steps
//! (the one that calls `optimizer.step()`, hence `tensor_arena_step_end`),
//! or the one the user names (`tensor_arena_set_step_thread`). A request
//! that says its thread may be routed (`tensor_arena_alloc_phase` with
//! [`ROUTE_BY_THREAD`]: the extensions set it outside autograd's backward)
//! and comes from another thread is served outside the step: never
//! recorded, the step's cursor untouched. Requests made inside autograd's
//! backward (the engine's device threads compute for the thread that
//! called `backward`) and requests that say nothing of their thread
//! (`tensor_arena_alloc`) belong to the step wherever they come from.

use std::thread::ThreadId;

use serde_json::json;

/// The flag of `tensor_arena_alloc_phase`'s phase argument saying that
/// the request was made outside autograd's backward, so that it may be
/// served outside the step when its thread is not the step's.
pub const ROUTE_BY_THREAD: i32 = 2;

thread_local! {
    static ME: ThreadId = std::thread::current().id();
}

fn me() -> Option<ThreadId> {
    ME.try_with(|id| *id).ok()
}

/// The thread the plan follows, and what other threads asked for.
#[derive(Debug)]
pub(super) struct StepThread {
    id: Option<ThreadId>,
    named: bool,
    other_requests: u64,
}

impl StepThread {
    /// No step thread yet.
    pub(super) const fn new() -> StepThread {
        StepThread {
            id: None,
            named: false,
            other_requests: 0,
        }
    }

    /// A step call on this thread: it becomes the step's thread unless
    /// one was named.
    pub(super) fn stepped(&mut self) {
        if !self.named {
            self.id = me();
        }
    }

    /// Names the calling thread as the step's (`on`), or lets the step
    /// calls decide again.
    pub(super) fn name(&mut self, on: bool) {
        self.named = on;
        if on {
            self.id = me();
        }
    }

    /// Whether a request that may be routed, made on this thread, is
    /// served outside the step (counted).
    pub(super) fn route_outside(&mut self) -> bool {
        let other = self.id.is_some_and(|id| me() != Some(id));
        self.other_requests += u64::from(other);
        other
    }

    /// The stats JSON's `threads` key.
    pub(super) fn json(&self) -> serde_json::Value {
        json!({
            "step_thread_named": self.named,
            "other_thread_requests": self.other_requests,
        })
    }
}
