//! Bounded state: a step that never ends (inference under the launcher, a
//! loop without an optimizer, a worker that inherited an open step) is cut
//! once it passes a request cap or a time cap. Its record is dropped (the
//! vectors given back), the rest of it is served as requests outside steps,
//! and it is never planned from; its `step_end` is still accepted. The
//! allocator's own books (the step records and the plan's basis) are
//! reported as `book_bytes`.

use std::time::Instant;

use super::{Phase, PlannedAllocator};
use crate::error::{Error, Result};
use crate::merge::Merger;

/// A step is cut after at least this many requests when the configuration
/// names no cap (`step_request_cap`), or after four times the most
/// requests a step that ended made, whichever is larger.
pub const MIN_STEP_REQUEST_CAP: u64 = 1 << 16;

/// How many times the largest ended step's requests an open step may make
/// before it is cut (when the configuration names no cap).
const CAP_OVER_LARGEST: u64 = 4;

/// The time cap is looked at once per this many requests (a clock read
/// per request would cost more than the cap saves).
const TIME_CHECK_EVERY: u32 = 1024;

/// What the bounds remember.
#[derive(Debug, Default)]
pub(super) struct Bounds {
    /// The open step was cut: it is ended by the next `step_end`, its
    /// requests are served as outside steps until then.
    pub cut_open: bool,
    /// Steps cut so far.
    pub steps_cut: u64,
    /// The last step that was cut (0 for none): recording restarts after
    /// it, so a plan is never made from a cut step.
    pub last_cut: u64,
    /// The most requests a step that ended (uncut) made.
    pub largest_step: u64,
    /// When the open step began (only with a time cap).
    pub began: Option<Instant>,
}

impl PlannedAllocator {
    /// The request cap in effect for the open step.
    pub fn step_request_cap(&self) -> u64 {
        self.config.step_request_cap.unwrap_or_else(|| {
            MIN_STEP_REQUEST_CAP.max(self.bounds.largest_step.saturating_mul(CAP_OVER_LARGEST))
        })
    }

    /// Steps cut so far (a request cap or a time cap).
    pub fn steps_cut(&self) -> u64 {
        self.bounds.steps_cut
    }

    /// Bytes the allocator's own books hold: the step records' and the
    /// plan basis's vectors (their capacity). Bounded: the records keep a
    /// few steps, each cut at the request cap.
    pub fn book_bytes(&self) -> u64 {
        let basis: u64 = self
            .basis
            .iter()
            .map(crate::record::StepRecord::heap_bytes)
            .sum();
        self.records.heap_bytes() + basis
    }

    /// Called before a request of the open step is recorded: cuts the step
    /// when it reached its cap. `true` when the step was cut (the request
    /// is then served as one outside steps).
    pub(super) fn cut_if_unbounded(&mut self) -> bool {
        let clock = u64::from(self.clock);
        let over_requests = clock >= self.step_request_cap();
        let over_time = !over_requests
            && self.clock % TIME_CHECK_EVERY == TIME_CHECK_EVERY - 1
            && self.config.step_time_cap_s.is_some_and(|cap| {
                self.bounds
                    .began
                    .is_some_and(|t| t.elapsed().as_secs_f64() >= cap)
            });
        if !(over_requests || over_time) {
            return false;
        }
        self.cut_step();
        true
    }

    /// Cuts the open step: its record is dropped, recording restarts after
    /// it, and its requests from now on are outside steps.
    fn cut_step(&mut self) {
        self.in_step = false;
        self.bounds.cut_open = true;
        self.bounds.steps_cut += 1;
        self.bounds.last_cut = self.step;
        self.records.drop_latest();
        if self.phase == Phase::Recording {
            // The steps merged so far were recorded before the cut one;
            // the first plan is made from steps after it.
            self.merger = Merger::new();
        }
        if self.config.log_errors && self.bounds.steps_cut == 1 {
            eprintln!(
                "tensor-arena allocator: step {} made {} requests without ending (cap {}): it is cut, its record dropped and the rest of it served outside steps (step_request_cap, step_time_cap_s; counted in stats' steps_cut)",
                self.step,
                self.clock,
                self.step_request_cap()
            );
        }
    }

    /// `step_begin` of a step: refused while a cut step is open.
    pub(super) fn begin_bounded(&mut self) -> Result<()> {
        if self.bounds.cut_open {
            self.counters.errors.step_order += 1;
            return Err(Error::StepOrder {
                call: "step_begin",
                state: "inside a step",
                step: self.step,
            });
        }
        if self.config.step_time_cap_s.is_some() {
            self.bounds.began = Some(Instant::now());
        }
        Ok(())
    }

    /// `step_end` of a cut step: `Some` when the step was cut (it ends
    /// here: nothing is recorded, planned or re-planned), `None` for a step
    /// that ends as usual.
    pub(super) fn end_cut_step(&mut self) -> Option<Result<()>> {
        if !self.bounds.cut_open {
            if self.in_step {
                self.bounds.largest_step = self.bounds.largest_step.max(u64::from(self.clock));
            }
            return None;
        }
        self.bounds.cut_open = false;
        if let Some(t) = &self.trace {
            t.step_end();
        }
        self.comparison.hand_over();
        self.at_step_end();
        self.count_step_calls();
        Some(Ok(()))
    }

    /// The last step before the recorded steps: warm-up's last, or the
    /// last cut step.
    pub(super) fn recording_after(&self) -> u64 {
        u64::from(self.config.warmup_steps).max(self.bounds.last_cut)
    }
}
