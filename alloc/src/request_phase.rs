//! Request phases: whether a request belongs to training or to an eval
//! pass (a forward under `torch.no_grad()` / inference mode, or a block
//! the caller marked as eval).
//!
//! An eval pass makes the training forward's sizes in the same order, so no
//! size-based matcher tells it from the forward it copies. Every request
//! therefore carries the phase it was made in: the recorded steps are
//! merged with requests matching only sites of their own phase
//! ([`crate::align`]), and serving walks one cursor per phase over that
//! phase's sites ([`crate::PlannedSlab`]). Lifetimes stay in the steps' real
//! order, so an eval site shares the slab's bytes only with training sites
//! that are not alive during the eval pass.
//!
//! The phase a request gets is the caller's mark
//! ([`crate::PlannedAllocator::set_request_phase`], `tensor_arena_set_phase`,
//! Python's `PlannedAllocator.phase("eval")`) or the phase read at the
//! request (the device extensions pass torch's grad mode through
//! `tensor_arena_alloc_phase`): eval when either says eval.

use crate::error::{Error, Result};

/// The phase of a request (the C ABI's `int phase`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub enum RequestPhase {
    /// Training (grad mode on): 0.
    #[default]
    Train = 0,
    /// An eval pass (grad mode off, inference mode, or marked): 1.
    Eval = 1,
}

impl RequestPhase {
    /// Both phases, in code order.
    pub const ALL: [RequestPhase; 2] = [RequestPhase::Train, RequestPhase::Eval];

    /// The phase of the C ABI's code: 0 train, 1 eval; any other value is
    /// refused with [`Error::RequestPhase`].
    pub fn from_code(code: i64) -> Result<RequestPhase> {
        match code {
            0 => Ok(RequestPhase::Train),
            1 => Ok(RequestPhase::Eval),
            _ => Err(Error::RequestPhase { value: code }),
        }
    }

    /// The C ABI's code (and the trace's): 0 train, 1 eval.
    pub fn code(self) -> usize {
        self as usize
    }

    /// `"train"` or `"eval"`.
    pub fn name(self) -> &'static str {
        match self {
            RequestPhase::Train => "train",
            RequestPhase::Eval => "eval",
        }
    }

    /// Eval when either phase is eval: a caller's mark and a reading at the
    /// request combined.
    pub fn or(self, other: RequestPhase) -> RequestPhase {
        self.max(other)
    }

    /// The index of the phase in per-phase arrays.
    #[inline]
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// The allocator's phase inputs: the caller's mark and the phase in
/// effect (the mark combined with the last reading), which the trace
/// records when it changes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PhaseState {
    /// The caller's mark (`set_request_phase`).
    pub(crate) marked: RequestPhase,
    /// The phase the requests get now.
    pub(crate) current: RequestPhase,
}

impl PhaseState {
    /// The phase for a request whose reading is `read`; `Some` when it
    /// differs from the one in effect (the trace records the change).
    pub(crate) fn at_request(&mut self, read: RequestPhase) -> Option<RequestPhase> {
        self.set_current(self.marked.or(read))
    }

    /// The caller marks `phase`; `Some` when the phase in effect changes.
    pub(crate) fn mark(&mut self, phase: RequestPhase) -> Option<RequestPhase> {
        self.marked = phase;
        self.set_current(phase)
    }

    fn set_current(&mut self, phase: RequestPhase) -> Option<RequestPhase> {
        (phase != self.current).then(|| {
            self.current = phase;
            phase
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_bad_values_are_refused() {
        for p in RequestPhase::ALL {
            assert_eq!(RequestPhase::from_code(p.code() as i64).unwrap(), p);
        }
        for bad in [-1i64, 2, 255, i64::MAX] {
            let e = RequestPhase::from_code(bad).unwrap_err().to_string();
            assert!(
                e.contains(&bad.to_string()) && e.contains("0 (train) or 1 (eval)"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_mark_and_a_reading_combine_to_eval_when_either_says_eval() {
        let mut s = PhaseState::default();
        assert_eq!(s.at_request(RequestPhase::Train), None);
        assert_eq!(s.at_request(RequestPhase::Eval), Some(RequestPhase::Eval));
        assert_eq!(s.at_request(RequestPhase::Eval), None);
        assert_eq!(s.at_request(RequestPhase::Train), Some(RequestPhase::Train));
        assert_eq!(s.mark(RequestPhase::Eval), Some(RequestPhase::Eval));
        // Marked eval: a reading of train does not take it back.
        assert_eq!(s.at_request(RequestPhase::Train), None);
        assert_eq!(s.current, RequestPhase::Eval);
        assert_eq!(s.mark(RequestPhase::Train), Some(RequestPhase::Train));
        assert_eq!(s.at_request(RequestPhase::Train), None);
    }
}
