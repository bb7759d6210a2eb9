//! Training steps in a trace: from its own markers (the planned
//! allocator's trace), from stack frames (a step ends after the
//! optimizer's step), or every N allocations. A trace in which no boundary
//! can be found is an error that says which rule to use: never one silent
//! step.

use super::trace::{StepSpan, Trace, TraceEvent};
use crate::error::{Error, Result};

/// How to find the steps of a trace.
pub enum StepRule<'a> {
    /// The trace's own `step_begin` / `step_end` markers.
    Markers,
    /// A step ends after a run of events whose stacks have a frame this
    /// predicate accepts (the frame as `FILE:LINE in FUNCTION`), at the
    /// next allocation outside such a frame.
    Frames {
        /// Whether a frame belongs to the step's last phase.
        matches: &'a dyn Fn(&str) -> bool,
        /// What the predicate looks for, for the error message.
        what: &'a str,
    },
    /// A step every this many allocations.
    Every(usize),
}

/// The default step frame: the optimizer's step (`torch/optim/optimizer.py`
/// wraps every torch optimizer's `step`; torch_npu's fused optimizers live
/// under `torch_npu/optim/`) or `zero_grad`.
///
/// ```
/// use tensor_arena::diag::optimizer_frame;
/// assert!(optimizer_frame("/usr/lib/python3/site-packages/torch/optim/optimizer.py:493 in wrapper"));
/// assert!(optimizer_frame("/x/train.py:40 in zero_grad"));
/// assert!(!optimizer_frame("/x/model.py:12 in forward"));
/// ```
pub fn optimizer_frame(frame: &str) -> bool {
    frame.contains("torch/optim/optimizer.py")
        || frame.contains("torch_npu/optim/")
        || frame.ends_with(" in zero_grad")
}

/// What [`optimizer_frame`] looks for, in words.
pub const OPTIMIZER_FRAME: &str = "torch/optim/optimizer.py (the optimizer's step) or zero_grad";

/// The steps of `trace` under `rule`: at least one boundary, or an error
/// naming the trace and the flags that find one.
///
/// ```
/// use tensor_arena::diag::{StepRule, Trace, find_steps};
/// let t = Trace::from_csv("t", "alloc,a,10\nfree,a\nalloc,b,10\nfree,b\nalloc,c,10\n")?;
/// let steps = find_steps(&t, &StepRule::Every(1))?;
/// assert_eq!(steps.len(), 3);
/// assert_eq!((steps[1].begin, steps[1].end), (2, Some(4)));
/// assert!(find_steps(&t, &StepRule::Markers).is_err());
/// # Ok::<(), tensor_arena::Error>(())
/// ```
pub fn find_steps(trace: &Trace, rule: &StepRule<'_>) -> Result<Vec<StepSpan>> {
    let fail = |message: String| Error::Trace {
        source_name: trace.name().to_owned(),
        location: "steps".to_owned(),
        message,
    };
    let start = trace.preexisting();
    let events = trace.events();
    let spans = |bounds: Vec<usize>, last_ends: bool| {
        let mut out = Vec::with_capacity(bounds.len() + 1);
        let mut begin = start;
        for b in bounds {
            out.push(StepSpan {
                begin,
                end: Some(b),
            });
            begin = b;
        }
        if begin < events.len() {
            out.push(StepSpan {
                begin,
                end: last_ends.then_some(events.len()),
            });
        }
        out
    };
    match rule {
        StepRule::Markers => {
            if trace.marked_steps().is_empty() {
                return Err(fail(
                    "the trace has no step_begin / step_end markers (only the planned allocator's trace has them): give --step-every N".to_owned(),
                ));
            }
            Ok(trace.marked_steps().to_vec())
        }
        StepRule::Every(0) => Err(fail("--step-every must be at least 1".to_owned())),
        StepRule::Every(n) => {
            let mut bounds = Vec::new();
            let mut allocs = 0usize;
            for (at, e) in events.iter().enumerate().skip(start) {
                if let TraceEvent::Alloc(_) = e {
                    if allocs > 0 && allocs.is_multiple_of(*n) {
                        bounds.push(at);
                    }
                    allocs += 1;
                }
            }
            if bounds.is_empty() {
                return Err(fail(format!(
                    "{allocs} allocations make no step of {n}: give a smaller --step-every"
                )));
            }
            Ok(spans(bounds, allocs.is_multiple_of(*n)))
        }
        StepRule::Frames { matches, what } => {
            if !trace.has_frames() {
                return Err(fail(
                    "the trace has no Python stack frames (a snapshot recorded without stacks, or a CSV / JSON-lines trace), so no step boundary can be found: give --step-every N (a step every N allocations)".to_owned(),
                ));
            }
            let (stacks, of_event) = trace.stacks();
            let names = trace.frame_names();
            let frame_hit: Vec<bool> = names.iter().map(|f| matches(f)).collect();
            let stack_hit: Vec<bool> = stacks
                .iter()
                .map(|s| s.iter().any(|&f| frame_hit.get(f as usize) == Some(&true)))
                .collect();
            let hit = |at: usize| {
                of_event
                    .get(at)
                    .and_then(|&s| stack_hit.get(s as usize))
                    .copied()
                    .unwrap_or(false)
            };
            let mut bounds = Vec::new();
            let mut inside = false;
            for (at, e) in events.iter().enumerate().skip(start) {
                if hit(at) {
                    inside = true;
                } else if inside && matches!(e, TraceEvent::Alloc(_)) {
                    bounds.push(at);
                    inside = false;
                }
            }
            if bounds.is_empty() && !inside {
                return Err(fail(format!(
                    "no step boundary found: no allocation or free has a frame of {what} ({} distinct Python frames in the trace); give --step-frame REGEX (a function that runs once per step, e.g. your train_step) or --step-every N (a step every N allocations)",
                    names.len()
                )));
            }
            Ok(spans(bounds, inside))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::TraceBuilder;

    /// alloc a (forward), alloc+free o (optimizer), alloc b (forward),
    /// alloc+free o2 (optimizer), alloc c (forward).
    fn traced() -> Trace {
        let mut b = TraceBuilder::<&str>::new("t");
        b.set_frame_names(vec![
            "/x/train.py:3 in forward".to_owned(),
            "/t/torch/optim/optimizer.py:90 in wrapper".to_owned(),
        ]);
        let fwd = b.add_stack(vec![0]);
        let opt = b.add_stack(vec![1, 0]);
        for (key, stack) in [("a", fwd), ("o", opt), ("b", fwd), ("p", opt), ("c", fwd)] {
            b.alloc(key, 10, 0).unwrap();
            b.set_event_stack(stack);
            if stack == opt {
                b.free(&key).unwrap();
            }
        }
        b.finish()
    }

    #[test]
    fn a_step_ends_after_the_optimizer() {
        let t = traced();
        let rule = StepRule::Frames {
            matches: &optimizer_frame,
            what: OPTIMIZER_FRAME,
        };
        let steps = find_steps(&t, &rule).unwrap();
        // Events: a0 o1 o2(free) b3 p4 p5(free) c6.
        assert_eq!(
            steps,
            vec![
                StepSpan {
                    begin: 0,
                    end: Some(3)
                },
                StepSpan {
                    begin: 3,
                    end: Some(6)
                },
                StepSpan {
                    begin: 6,
                    end: None
                },
            ]
        );
    }

    #[test]
    fn no_boundary_is_an_error_naming_the_flags() {
        let t = traced();
        let never = |_: &str| false;
        let rule = StepRule::Frames {
            matches: &never,
            what: "train_step",
        };
        let e = find_steps(&t, &rule).unwrap_err().to_string();
        assert!(
            e.contains("--step-frame") && e.contains("--step-every"),
            "{e}"
        );
        let plain = Trace::from_csv("p", "alloc,a,1\n").unwrap();
        let e = find_steps(&plain, &rule).unwrap_err().to_string();
        assert!(e.contains("no Python stack frames"), "{e}");
        assert!(find_steps(&plain, &StepRule::Every(0)).is_err());
        assert!(find_steps(&plain, &StepRule::Every(5)).is_err());
    }
}
