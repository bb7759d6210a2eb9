//! The allocator beside threads and forks, and its reset: requests of
//! threads other than the one that steps (served outside the step, the
//! step's cursor untouched), the planner's thread looked at without
//! joining it (so the C ABI waits for it off its lock), what a forked
//! child must forget (a planner thread that does not exist there, an open
//! step, the trace file), and a reset that refuses while blocks are live.

use super::PlannedAllocator;
use crate::error::{Error, Result};

impl PlannedAllocator {
    /// Serves a request made on a thread other than the one that steps
    /// (a data thread, a TorchScript loop, an intra-op worker): served as a
    /// request outside steps (the fallback's pools), never recorded, and
    /// the step's cursor does not move. `None` as [`PlannedAllocator::alloc`].
    pub fn alloc_unstepped(&mut self, size: usize, device: i32, stream: usize) -> Option<usize> {
        let in_step = std::mem::replace(&mut self.in_step, false);
        let got = self.alloc(size, device, stream);
        self.in_step = in_step;
        got
    }

    /// Whether a plan is being made on the planner's thread and is not
    /// finished: a `step_end` now would wait for it.
    pub fn planner_busy(&self) -> bool {
        self.pending_plan.as_ref().is_some_and(|h| !h.is_finished())
    }

    /// Whether a step is open (a cut step included).
    pub fn in_step(&self) -> bool {
        self.in_step || self.bounds.cut_open
    }

    /// In a forked child, before anything else touches the allocator: the
    /// planner's thread and the trace's writer belong to the parent. The
    /// planner's handle is forgotten (its thread does not exist here: no
    /// join, no detach), the open step closed, the trace forgotten (its
    /// buffered lines are the parent's to write), and the comparison
    /// models' worker thread forgotten likewise (their figures read zero). The caller keeps the
    /// allocator only to read its figures: its memory may still be mapped
    /// by blocks the child inherited, so it never serves again.
    pub fn forget_after_fork(&mut self) {
        if let Some(handle) = self.pending_plan.take() {
            std::mem::forget(handle);
        }
        self.in_step = false;
        self.bounds.cut_open = false;
        if let Some(trace) = self.trace.take() {
            std::mem::forget(trace);
        }
        self.backing.forget_trace();
        self.comparison.forget_worker();
    }

    /// Live blocks and their bytes asked for.
    pub fn live(&self) -> (usize, u64) {
        (self.live_blocks(), self.counters.live_bytes)
    }

    /// Drops plans, slabs and caches and starts over in warm-up (settings
    /// and request phase kept), when no block is live; with live blocks it
    /// refuses ([`Error::LiveBlocks`]) and changes nothing: their memory
    /// is never released under them.
    pub fn try_reset(&mut self) -> Result<()> {
        let (blocks, bytes) = self.live();
        if blocks > 0 {
            return Err(Error::LiveBlocks { blocks, bytes });
        }
        self.reset_unchecked();
        Ok(())
    }
}
