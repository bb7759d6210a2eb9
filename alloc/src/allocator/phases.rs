//! Request phases ([`crate::request_phase`]): the caller's mark
//! (`tensor_arena_set_phase`) and the phase read at each request
//! (`tensor_arena_alloc_phase`, the device extensions' reading of torch's
//! grad mode). Requests are recorded and served in the phase in effect; the
//! trace records each change as a `phase` line before the request it
//! applies to, so that a replay makes the same requests in the same phases.

use super::PlannedAllocator;
use crate::request_phase::RequestPhase;

impl PlannedAllocator {
    /// Marks the phase of the requests that follow (until the next mark):
    /// [`RequestPhase::Eval`] for an eval pass the caller knows of,
    /// [`RequestPhase::Train`] to end it. A mark of eval holds whatever the
    /// extensions read at the requests; a mark of train leaves the phase
    /// to that reading.
    ///
    /// ```
    /// use tensor_arena_alloc::{Config, PlannedAllocator, RequestPhase};
    /// let mut a = PlannedAllocator::new(Config::default())?;
    /// a.set_request_phase(RequestPhase::Eval);
    /// assert_eq!(a.request_phase(), RequestPhase::Eval);
    /// a.set_request_phase(RequestPhase::Train);
    /// assert_eq!(a.request_phase(), RequestPhase::Train);
    /// # Ok::<(), tensor_arena_alloc::Error>(())
    /// ```
    pub fn set_request_phase(&mut self, phase: RequestPhase) {
        if let Some(now) = self.phases.mark(phase) {
            self.trace_phase(now);
        }
    }

    /// The phase requests are made in now.
    pub fn request_phase(&self) -> RequestPhase {
        self.phases.current
    }

    /// [`PlannedAllocator::alloc`] of a request made in phase `read` (what
    /// the caller read at the request: torch's grad mode, for the device
    /// extensions): the request is made in eval when `read` or the mark
    /// ([`PlannedAllocator::set_request_phase`]) is eval.
    pub fn alloc_phase(
        &mut self,
        size: usize,
        device: i32,
        stream: usize,
        read: RequestPhase,
    ) -> Option<usize> {
        if let Some(now) = self.phases.at_request(read) {
            self.trace_phase(now);
        }
        self.alloc(size, device, stream)
    }

    fn trace_phase(&self, phase: RequestPhase) {
        if let Some(t) = &self.trace {
            t.phase(phase);
        }
    }
}
