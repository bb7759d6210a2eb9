//! The planned allocator's trace CSV (`event,addr,size,stream`, written by
//! its `trace` option, `python -m tensor_arena.run --trace`) as an input
//! and an output of `tensor-arena replay`: detected by its header, read
//! with the alloc crate's parser (`tensor_arena_alloc::trace`), turned into
//! the doctor's [`Trace`]; and the doctor's traces written in that format
//! (`--save-trace`).

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use tensor_arena::diag::{StepSpan, Trace, TraceBuilder, TraceEvent};
use tensor_arena::{Error, Result};
use tensor_arena_alloc::trace::{self as alloc_trace, TraceEvent as AllocEvent};

/// Whether the file at `path` starts with the allocator trace's header.
pub fn is_allocator_trace(path: &Path) -> bool {
    let mut head = [0u8; 64];
    let Ok(mut f) = std::fs::File::open(path) else {
        return false;
    };
    let n = f.read(&mut head).unwrap_or(0);
    let text = String::from_utf8_lossy(&head[..n]);
    text.starts_with(alloc_trace::HEADER)
        && text[alloc_trace::HEADER.len()..]
            .chars()
            .next()
            .is_none_or(|c| c == '\n' || c == '\r')
}

/// A trace file's name as reports show it.
fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// An allocator trace read from a file: its events as the allocator wrote
/// them, and the doctor's view of them.
pub struct AllocatorTrace {
    /// The events, as the parser read them.
    pub events: Vec<AllocEvent>,
    /// The doctor's trace: allocations and frees (NULL answers and frees
    /// of unknown addresses left out), the step markers kept.
    pub trace: Trace,
    /// Whole-run peak reserved of the traced run, from its segment lines
    /// (`None` for a trace older than them).
    pub recorded_peak_reserved: Option<u64>,
}

/// Reads an allocator trace; errors name the file and the line.
pub fn read(path: &Path) -> Result<AllocatorTrace> {
    let name = file_name(path);
    let events = alloc_trace::read(path).map_err(|e| alloc_error(&name, e))?;
    let trace = to_doctor(&name, &events)?;
    let recorded_peak_reserved = alloc_trace::reserved_from_segments(&events).map(|(_, p)| p);
    Ok(AllocatorTrace {
        events,
        trace,
        recorded_peak_reserved,
    })
}

/// The core crate's error for an error of the alloc crate about `name`.
pub fn alloc_error(name: &str, e: tensor_arena_alloc::Error) -> Error {
    match e {
        tensor_arena_alloc::Error::Trace { line, reason } => Error::Trace {
            source_name: name.to_owned(),
            location: format!("line {line}"),
            message: reason,
        },
        tensor_arena_alloc::Error::Core(e) => e,
        other => Error::Trace {
            source_name: name.to_owned(),
            location: "planned allocator".to_owned(),
            message: other.to_string(),
        },
    }
}

/// The doctor's trace of an allocator trace's events. Stream handles are
/// numbered densely in order of appearance (the default stream, 0, stays
/// 0).
fn to_doctor(name: &str, events: &[AllocEvent]) -> Result<Trace> {
    let mut b = TraceBuilder::<usize>::new(name);
    let mut streams: HashMap<usize, u32> = HashMap::from([(0, 0)]);
    for (i, e) in events.iter().enumerate() {
        match *e {
            AllocEvent::StepBegin => b.step_begin(),
            AllocEvent::StepEnd => b.step_end(),
            // NULL answers got no memory.
            AllocEvent::Alloc { addr: 0, .. } => {}
            AllocEvent::Alloc { addr, size, stream } => {
                let next = streams.len() as u32;
                let id = *streams.entry(stream).or_insert(next);
                b.alloc(addr, size as u64, id).map_err(|m| Error::Trace {
                    source_name: name.to_owned(),
                    // Event i is on line i + 2 when the file has no blank
                    // lines (the allocator writes none).
                    location: format!("line {}", i + 2),
                    message: m,
                })?;
            }
            AllocEvent::Free { addr, .. } => {
                // A free of an address the run never gave was counted by
                // the allocator and ignored; so here.
                if b.is_live(&addr) {
                    b.free(&addr).map_err(|m| Error::Trace {
                        source_name: name.to_owned(),
                        location: format!("line {}", i + 2),
                        message: m,
                    })?;
                }
            }
            AllocEvent::SegmentAlloc { .. }
            | AllocEvent::SegmentFree { .. }
            | AllocEvent::Phase(_) => {}
        }
    }
    Ok(b.finish())
}

/// The allocator's events of a doctor's trace split into `steps`: the
/// calls a live run would have made. Allocation `i` gets address `i + 1`,
/// its stream the trace's stream number (0 is the default stream); events
/// outside every step are outside steps.
pub fn to_allocator_events(trace: &Trace, steps: &[StepSpan]) -> Vec<AllocEvent> {
    let n = trace.events().len();
    // Markers before event `at`: ends first, then begins.
    let mut begins = vec![false; n + 1];
    let mut ends = vec![false; n + 1];
    for s in steps {
        if s.begin <= n {
            begins[s.begin] = true;
        }
        if let Some(e) = s.end.filter(|&e| e <= n) {
            ends[e] = true;
        }
    }
    let allocs = trace.allocations();
    let mut out = Vec::with_capacity(n + 2 * steps.len() + 2);
    for at in 0..=n {
        if ends[at] {
            out.push(AllocEvent::StepEnd);
        }
        if begins[at] && at < n {
            out.push(AllocEvent::StepBegin);
        }
        let Some(e) = trace.events().get(at) else {
            break;
        };
        out.push(match *e {
            TraceEvent::Alloc(i) => AllocEvent::Alloc {
                addr: i + 1,
                size: allocs[i].size as usize,
                stream: allocs[i].stream as usize,
            },
            TraceEvent::Free(i) => AllocEvent::Free {
                addr: i + 1,
                size: allocs[i].size as usize,
                stream: allocs[i].stream as usize,
            },
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocator_events_round_trip_through_the_doctor() {
        let text = "event,addr,size,stream\nsegment_alloc,4096,8192,0\nalloc,4096,100,0\nstep_begin,0,0,0\nalloc,5000,200,77\nalloc,0,300,0\nfree,5000,200,77\nfree,999,0,0\nstep_end,0,0,0\nfree,4096,100,0\n";
        let events = alloc_trace::parse(text).unwrap();
        let t = to_doctor("t", &events).unwrap();
        assert_eq!(t.allocations().len(), 2, "the NULL answer is left out");
        assert_eq!(t.allocations()[1].stream, 1);
        assert_eq!(
            t.marked_steps(),
            &[StepSpan {
                begin: 1,
                end: Some(3)
            }]
        );
        let back = to_allocator_events(&t, t.marked_steps());
        assert_eq!(
            back,
            vec![
                AllocEvent::Alloc {
                    addr: 1,
                    size: 100,
                    stream: 0
                },
                AllocEvent::StepBegin,
                AllocEvent::Alloc {
                    addr: 2,
                    size: 200,
                    stream: 1
                },
                AllocEvent::Free {
                    addr: 2,
                    size: 200,
                    stream: 1
                },
                AllocEvent::StepEnd,
                AllocEvent::Free {
                    addr: 1,
                    size: 100,
                    stream: 0
                },
            ]
        );
    }
}
