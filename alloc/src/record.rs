//! What the allocator remembers of each step: every request in order, its
//! size and stream, and when it was freed.

use std::collections::VecDeque;

use crate::request_phase::RequestPhase;

/// Where a block came from: the `k`-th request of step `step` (steps count
/// from 1), or outside any step (`step == 0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Origin {
    /// The step, 0 for none.
    pub step: u64,
    /// Its index among the step's requests.
    pub k: u32,
}

impl Origin {
    /// A block allocated outside any step.
    pub const OUTSIDE: Origin = Origin { step: 0, k: 0 };
}

/// When a block was freed: in step `step`, after `clock` requests of that
/// step had been made (frees between steps count as clock 0 of the next).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FreedAt {
    /// The step it was freed in.
    pub step: u64,
    /// Requests of that step made before the free.
    pub clock: u32,
}

/// One request of a recorded step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Bytes asked for.
    pub size: u64,
    /// Stream id (0 for the default stream / the CPU).
    pub stream: u32,
    /// The phase it was made in (training or an eval pass).
    pub phase: RequestPhase,
    /// When it was freed, if it has been.
    pub freed: Option<FreedAt>,
}

/// The requests of one step.
#[derive(Debug, Clone, Default)]
pub struct StepRecord {
    /// The step's number (from 1).
    pub step: u64,
    /// Its requests, in order.
    pub requests: Vec<Request>,
    /// Per request: the site the serving plan's matcher gave it
    /// ([`crate::merge::NO_SITE`] for none); what folds the step into the
    /// plan's merge without aligning it again ([`crate::merge`]).
    pub anchors: Vec<u32>,
    /// The plan (its number, from 1) the anchors refer to; 0 for none.
    pub anchor_plan: u64,
}

/// How a request's block lived, relative to its step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Life {
    /// Freed in its own step once `clock` requests had been made.
    InStep(u32),
    /// Freed in the next step once `clock` of its requests had been made.
    NextStep(u32),
    /// Still alive after the next step: kept by the caller.
    Kept,
    /// Not freed yet and its step is the latest: nothing known.
    Unknown,
}

impl Request {
    /// How this request of step `step` lived, as seen when `latest` is the
    /// latest step that has ended.
    pub fn life(&self, step: u64, latest: u64) -> Life {
        match self.freed {
            Some(f) if f.step == step => Life::InStep(f.clock),
            Some(f) if f.step == step + 1 => Life::NextStep(f.clock),
            Some(_) => Life::Kept,
            None if step >= latest => Life::Unknown,
            None => Life::Kept,
        }
    }
}

/// The recent steps, oldest first, at most `keep` of them.
#[derive(Debug, Clone, Default)]
pub struct Records {
    steps: VecDeque<StepRecord>,
    keep: usize,
}

impl Records {
    /// Keeps the last `keep` steps.
    pub fn new(keep: usize) -> Records {
        Records {
            steps: VecDeque::with_capacity(keep + 1),
            keep: keep.max(1),
        }
    }

    /// Starts the record of step `step`, dropping the oldest beyond `keep`
    /// (its vector is reused, so steady steps do not allocate).
    pub fn begin(&mut self, step: u64, expected: usize) {
        let mut rec = if self.steps.len() >= self.keep {
            self.steps.pop_front().unwrap_or_default()
        } else {
            StepRecord::default()
        };
        rec.step = step;
        rec.requests.clear();
        rec.anchors.clear();
        // A vector kept from an unusually large step (four times what the
        // last step made) gives its memory back.
        let roomy = SHRINK_OVER.saturating_mul(expected.max(SHRINK_FLOOR));
        if rec.requests.capacity() > roomy {
            rec.requests.shrink_to(expected);
            rec.anchors.shrink_to(expected);
        }
        rec.requests.reserve(expected);
        rec.anchors.reserve(expected);
        rec.anchor_plan = 0;
        self.steps.push_back(rec);
    }

    /// Appends a request to the current step; returns its index.
    pub fn push(&mut self, size: u64, stream: u32, phase: RequestPhase) -> u32 {
        match self.steps.back_mut() {
            Some(rec) => {
                rec.requests.push(Request {
                    size,
                    stream,
                    phase,
                    freed: None,
                });
                rec.anchors.push(crate::merge::NO_SITE);
                (rec.requests.len() - 1) as u32
            }
            None => 0,
        }
    }

    /// Notes the free of the block from `origin`.
    pub fn freed(&mut self, origin: Origin, at: FreedAt) {
        let Some(front) = self.steps.front() else {
            return;
        };
        if origin.step < front.step {
            return;
        }
        let index = (origin.step - front.step) as usize;
        if let Some(req) = self
            .steps
            .get_mut(index)
            .and_then(|r| r.requests.get_mut(origin.k as usize))
        {
            req.freed = Some(at);
        }
    }

    /// Marks the current step's anchors as referring to plan `plan`.
    pub fn anchor_plan(&mut self, plan: u64) {
        if let Some(rec) = self.steps.back_mut() {
            rec.anchor_plan = plan;
        }
    }

    /// The serving plan's matcher gave request `k` of the current step
    /// site `site`.
    pub fn anchor(&mut self, k: u32, site: u32) {
        if let Some(a) = self
            .steps
            .back_mut()
            .and_then(|r| r.anchors.get_mut(k as usize))
        {
            *a = site;
        }
    }

    /// The last `n` steps (fewer if fewer are kept), oldest first.
    pub fn last(&self, n: usize) -> impl Iterator<Item = &StepRecord> {
        let skip = self.steps.len().saturating_sub(n);
        self.steps.iter().skip(skip)
    }

    /// The record of step `step`, if kept.
    pub fn get(&self, step: u64) -> Option<&StepRecord> {
        let front = self.steps.front()?;
        self.steps.get(step.checked_sub(front.step)? as usize)
    }

    /// Requests in the latest step.
    pub fn latest_len(&self) -> usize {
        self.steps.back().map_or(0, |r| r.requests.len())
    }

    /// Drops the latest step's requests and gives their vectors back (a
    /// step cut for making too many): its place stays, so the blocks it
    /// gave are still told apart from the next step's.
    pub fn drop_latest(&mut self) {
        if let Some(rec) = self.steps.back_mut() {
            rec.requests = Vec::new();
            rec.anchors = Vec::new();
            rec.anchor_plan = 0;
        }
    }

    /// Bytes the kept records' vectors hold (their capacity).
    pub fn heap_bytes(&self) -> u64 {
        self.steps.iter().map(StepRecord::heap_bytes).sum()
    }
}

impl StepRecord {
    /// Bytes its vectors hold (their capacity).
    pub fn heap_bytes(&self) -> u64 {
        (self.requests.capacity() * std::mem::size_of::<Request>()
            + self.anchors.capacity() * std::mem::size_of::<u32>()) as u64
    }
}

/// A kept record vector larger than this many times the requests the step
/// before made is shrunk when it is reused.
const SHRINK_OVER: usize = 4;

/// Steps of fewer requests than this never shrink a vector (no churn for
/// small steps).
const SHRINK_FLOOR: usize = 1024;

#[cfg(test)]
mod tests {
    use super::*;

    fn step(r: &mut Records, step: u64, n: usize) {
        let expected = r.latest_len();
        r.begin(step, expected);
        for i in 0..n {
            r.push(512 + i as u64, 0, RequestPhase::Train);
        }
    }

    #[test]
    fn vectors_shrink_after_an_unusually_large_step() {
        let mut r = Records::new(2);
        step(&mut r, 1, 100_000);
        let large = r.heap_bytes();
        for s in 2..6 {
            step(&mut r, s, 2000);
        }
        let small = r.heap_bytes();
        assert!(small * 10 < large, "{large} bytes, then {small}");
    }

    #[test]
    fn steady_steps_keep_their_vectors() {
        let mut r = Records::new(2);
        for s in 1..4 {
            step(&mut r, s, 5000);
        }
        let before: Vec<usize> = r.steps.iter().map(|s| s.requests.capacity()).collect();
        step(&mut r, 4, 5000);
        step(&mut r, 5, 5000);
        let after: Vec<usize> = r.steps.iter().map(|s| s.requests.capacity()).collect();
        assert_eq!(before, after, "no reallocation for steady steps");
    }

    #[test]
    fn a_dropped_step_keeps_its_place() {
        let mut r = Records::new(4);
        step(&mut r, 1, 10);
        step(&mut r, 2, 10);
        r.drop_latest();
        assert_eq!(r.latest_len(), 0);
        assert_eq!(r.get(2).map(|s| s.requests.capacity()), Some(0));
        step(&mut r, 3, 10);
        // A block of the dropped step freed now marks nothing of step 3.
        r.freed(Origin { step: 2, k: 3 }, FreedAt { step: 3, clock: 1 });
        assert!(r.get(3).unwrap().requests.iter().all(|q| q.freed.is_none()));
        r.freed(Origin { step: 3, k: 3 }, FreedAt { step: 3, clock: 4 });
        assert!(r.get(3).unwrap().requests[3].freed.is_some());
    }
}
