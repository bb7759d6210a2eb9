//! The allocator's event trace (`"trace": "path.csv"`), writer and parser:
//! one CSV format that the allocator writes, `tensor-arena replay` reads
//! and [`crate::replay`] drives back through the policy.
//!
//! ```text
//! event,addr,size,stream
//! segment_alloc,ADDR,SIZE,0    a backing reservation (slab, fallback segment)
//! alloc,ADDR,SIZE,STREAM       a request and the address it got (0: NULL)
//! step_begin,0,0,0
//! free,ADDR,SIZE,STREAM        the freed block's requested size and stream
//! step_end,0,0,0
//! segment_free,ADDR,SIZE,0     a backing release
//! phase,0,PHASE,0              the requests that follow are made in PHASE
//!                              (0 train, 1 eval; see crate::request_phase)
//! ```
//!
//! A `phase` line is written when the phase requests are made in changes
//! (a caller's mark, or the grad mode the device extensions read at a
//! request), before the first request it applies to; a trace starts in
//! phase 0. Traces without `phase` lines (all older ones) are all
//! training, as the runs that wrote them were.
//!
//! The bytes the run held from its device at any line are the sum of
//! `segment_alloc` minus `segment_free` sizes up to it; their running
//! maximum is the run's whole-run peak reserved. Traces written before the
//! segment lines and the free sizes existed (`free,ADDR,0,0`, no segment
//! lines) still parse.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::request_phase::RequestPhase;

/// The CSV header line.
pub const HEADER: &str = "event,addr,size,stream";

/// An open trace file.
pub struct TraceWriter {
    out: BufWriter<File>,
    failed: bool,
    /// One line, formatted before it is written whole: the buffer then
    /// only ever reaches the file in whole lines, so a process that exits
    /// without a flush (a launcher's last, open step) leaves a file that
    /// ends at a line's end.
    line: String,
    /// The process that opened the file. A forked child (a DataLoader
    /// worker) inherits the writer and its buffered lines; it writes
    /// nothing, so the file stays the parent's alone.
    pid: u32,
}

impl TraceWriter {
    /// Creates (truncates) `path` and writes the header.
    pub fn create(path: &str) -> Result<TraceWriter> {
        let bad = |e: std::io::Error| Error::Config {
            config: format!("trace: {path}"),
            reason: format!("cannot write the trace file: {e}"),
        };
        let mut out = BufWriter::new(File::create(path).map_err(bad)?);
        writeln!(out, "{HEADER}").map_err(bad)?;
        Ok(TraceWriter {
            out,
            failed: false,
            line: String::with_capacity(64),
            pid: std::process::id(),
        })
    }

    /// Appends one event; a write error stops the trace (counted once by
    /// the caller through [`TraceWriter::failed`]).
    pub fn event(&mut self, event: &str, addr: usize, size: usize, stream: usize) {
        use std::fmt::Write as _;
        if self.failed || std::process::id() != self.pid {
            return;
        }
        self.line.clear();
        // Writing to a String cannot fail.
        let _ = writeln!(self.line, "{event},{addr},{size},{stream}");
        if self.out.write_all(self.line.as_bytes()).is_err() {
            self.failed = true;
        }
    }

    /// Flushes buffered lines (at every step end).
    pub fn flush(&mut self) {
        if !self.failed && std::process::id() == self.pid && self.out.flush().is_err() {
            self.failed = true;
        }
    }

    /// Whether a write failed.
    pub fn failed(&self) -> bool {
        self.failed
    }
}

/// The allocator's side of a trace: a [`TraceWriter`] shared with the
/// [`crate::Metered`] backing that logs the segment lines, and the live blocks'
/// sizes and streams, so that a `free` line carries them (torch's CPU
/// deleter does not pass the size). Cloning shares the same file.
#[derive(Clone)]
pub struct TraceLog {
    inner: Arc<Mutex<LogState>>,
}

struct LogState {
    writer: TraceWriter,
    /// Address -> (requested size, stream handle) of blocks traced live.
    live: HashMap<usize, (usize, usize)>,
}

impl TraceLog {
    /// Creates (truncates) `path` and writes the header.
    pub fn create(path: &str) -> Result<TraceLog> {
        Ok(TraceLog {
            inner: Arc::new(Mutex::new(LogState {
                writer: TraceWriter::create(path)?,
                live: HashMap::new(),
            })),
        })
    }

    fn state(&self) -> MutexGuard<'_, LogState> {
        // A panic while writing left at worst a partial line: keep going.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An `alloc` line; `addr` 0 is a NULL answer.
    pub fn alloc(&self, addr: Option<usize>, size: usize, stream: usize) {
        let mut s = self.state();
        let addr = addr.unwrap_or(0);
        if addr != 0 {
            s.live.insert(addr, (size, stream));
        }
        s.writer.event("alloc", addr, size, stream);
    }

    /// A `free` line with the block's size and stream (0 and 0 for an
    /// address the trace never saw allocated).
    pub fn free(&self, addr: usize) {
        let mut s = self.state();
        let (size, stream) = s.live.remove(&addr).unwrap_or((0, 0));
        s.writer.event("free", addr, size, stream);
    }

    /// A `step_begin` line; flushes the file (with the flush at each
    /// `step_end`, a process that exits inside a step, as the launcher's
    /// last one, leaves every step it began in the file).
    pub fn step_begin(&self) {
        let mut s = self.state();
        s.writer.event("step_begin", 0, 0, 0);
        s.writer.flush();
    }

    /// A `phase` line: the requests that follow are made in `phase`.
    pub fn phase(&self, phase: RequestPhase) {
        self.state().writer.event("phase", 0, phase.code(), 0);
    }

    /// A `step_end` line; flushes the file.
    pub fn step_end(&self) {
        let mut s = self.state();
        s.writer.event("step_end", 0, 0, 0);
        s.writer.flush();
    }

    /// Flushes buffered lines.
    pub fn flush(&self) {
        self.state().writer.flush();
    }

    /// Whether a write failed (the trace stopped there).
    pub fn failed(&self) -> bool {
        self.state().writer.failed()
    }

    /// A `segment_alloc` / `segment_free` line (written by
    /// [`crate::Metered`], which sees every region).
    pub(crate) fn segment(&self, event: &str, addr: usize, size: usize) {
        self.state().writer.event(event, addr, size, 0);
    }
}

/// One event of a trace file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceEvent {
    /// `step_begin`.
    StepBegin,
    /// `step_end`.
    StepEnd,
    /// `alloc`: the address it got (an id here; 0 when it got NULL), its
    /// size and stream.
    Alloc {
        /// Address in the traced run.
        addr: usize,
        /// Bytes asked.
        size: usize,
        /// Stream handle.
        stream: usize,
    },
    /// `free` of the block with that address.
    Free {
        /// Address in the traced run.
        addr: usize,
        /// The block's requested size (0 in traces older than the segment
        /// lines, and for an address the run never gave).
        size: usize,
        /// The block's stream handle (0 in older traces).
        stream: usize,
    },
    /// `segment_alloc`: the run reserved `size` bytes of its device.
    SegmentAlloc {
        /// Address of the region.
        addr: usize,
        /// Bytes reserved.
        size: usize,
    },
    /// `segment_free`: the run released a region.
    SegmentFree {
        /// Address of the region.
        addr: usize,
        /// Bytes released.
        size: usize,
    },
    /// `phase`: the requests that follow are made in this phase.
    Phase(RequestPhase),
}

/// A trace file's lines that are not what the format says: the 1-based
/// line number and why.
fn bad(line: usize, why: impl Into<String>) -> Error {
    Error::Trace {
        line,
        reason: why.into(),
    }
}

/// Reads a trace file (see [`parse`]); the error names the file or line.
pub fn read(path: &std::path::Path) -> Result<Vec<TraceEvent>> {
    let bytes = std::fs::read(path).map_err(|e| Error::Config {
        config: format!("trace: {}", path.display()),
        reason: format!("cannot read the trace file: {e}"),
    })?;
    parse_bytes(&bytes)
}

/// Reads a trace file's bytes: [`parse`] after checking they are UTF-8.
pub fn parse_bytes(bytes: &[u8]) -> Result<Vec<TraceEvent>> {
    match std::str::from_utf8(bytes) {
        Ok(text) => parse(text),
        Err(e) => {
            let line = 1 + bytes[..e.valid_up_to()]
                .iter()
                .filter(|&&b| b == b'\n')
                .count();
            Err(bad(line, "not UTF-8 text"))
        }
    }
}

/// Whether `text` starts with this format's header (format detection).
pub fn is_trace(text: &str) -> bool {
    text.lines().next().map(str::trim) == Some(HEADER)
}

/// Reads a trace file's text (header line first). Errors name the line:
/// a malformed line, `step_end` outside a step, `step_begin` inside one,
/// and a last line cut short (no newline after it, and not a valid line).
/// A file that ends inside a step is accepted (a run that stopped there).
///
/// ```
/// use tensor_arena_alloc::trace::{self, TraceEvent};
/// let t = trace::parse("event,addr,size,stream\nstep_begin,0,0,0\nalloc,4096,100,0\nfree,4096,100,0\nstep_end,0,0,0\n")?;
/// assert_eq!(t[2], TraceEvent::Free { addr: 4096, size: 100, stream: 0 });
/// let e = trace::parse("event,addr,size,stream\nstep_end,0,0,0\n").unwrap_err();
/// assert!(e.to_string().contains("line 2"), "{e}");
/// # Ok::<(), tensor_arena_alloc::Error>(())
/// ```
pub fn parse(text: &str) -> Result<Vec<TraceEvent>> {
    let mut lines = text.split_inclusive('\n');
    if lines.next().is_none_or(|h| h.trim() != HEADER) {
        return Err(bad(1, format!("the header line must be {HEADER}")));
    }
    let mut events = Vec::new();
    let mut in_step = false;
    for (i, raw) in lines.enumerate() {
        let n = i + 2;
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        let event = match parse_line(line) {
            Ok(e) => e,
            Err(why) if !raw.ends_with('\n') => {
                return Err(bad(
                    n,
                    format!("the file ends inside this line (truncated?): {why}"),
                ));
            }
            Err(why) => return Err(bad(n, why)),
        };
        match event {
            TraceEvent::StepBegin if in_step => {
                return Err(bad(
                    n,
                    "step_begin inside a step (the previous step_begin has no step_end)",
                ));
            }
            TraceEvent::StepEnd if !in_step => {
                return Err(bad(
                    n,
                    "step_end outside any step (no step_begin before it)",
                ));
            }
            TraceEvent::StepBegin => in_step = true,
            TraceEvent::StepEnd => in_step = false,
            _ => {}
        }
        events.push(event);
    }
    Ok(events)
}

/// One line's event, or why it is not one.
fn parse_line(line: &str) -> std::result::Result<TraceEvent, String> {
    let fields: Vec<&str> = line.split(',').map(str::trim).collect();
    let [event, addr, size, stream] = fields[..] else {
        return Err(format!(
            "expected four fields (event,addr,size,stream), found {}: {line:?}",
            fields.len()
        ));
    };
    let num = |name: &str, s: &str| {
        s.parse::<usize>()
            .map_err(|_| format!("{name} {s:?} is not a non-negative integer"))
    };
    Ok(match event {
        "step_begin" => TraceEvent::StepBegin,
        "step_end" => TraceEvent::StepEnd,
        "alloc" => TraceEvent::Alloc {
            addr: num("addr", addr)?,
            size: num("size", size)?,
            stream: num("stream", stream)?,
        },
        "free" => TraceEvent::Free {
            addr: num("addr", addr)?,
            size: num("size", size)?,
            stream: num("stream", stream)?,
        },
        "segment_alloc" => TraceEvent::SegmentAlloc {
            addr: num("addr", addr)?,
            size: num("size", size)?,
        },
        "segment_free" => TraceEvent::SegmentFree {
            addr: num("addr", addr)?,
            size: num("size", size)?,
        },
        "phase" => {
            let code = num("phase", size)?;
            match RequestPhase::from_code(i64::try_from(code).unwrap_or(i64::MAX)) {
                Ok(p) => TraceEvent::Phase(p),
                Err(e) => return Err(format!("{e}: {line:?}")),
            }
        }
        other => {
            return Err(format!(
                "unknown event {other:?} (step_begin, step_end, alloc, free, segment_alloc, segment_free, phase)"
            ));
        }
    })
}

/// The text of a trace file holding `events` (header first): what
/// [`parse`] reads back to the same events.
///
/// ```
/// use tensor_arena_alloc::trace::{self, TraceEvent};
/// let events = vec![TraceEvent::StepBegin, TraceEvent::Alloc { addr: 1, size: 8, stream: 0 }];
/// assert_eq!(trace::parse(&trace::to_text(&events))?, events);
/// # Ok::<(), tensor_arena_alloc::Error>(())
/// ```
pub fn to_text(events: &[TraceEvent]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(24 * (events.len() + 1));
    out.push_str(HEADER);
    out.push('\n');
    for e in events {
        // Writing to a String cannot fail.
        let _ = match *e {
            TraceEvent::StepBegin => writeln!(out, "step_begin,0,0,0"),
            TraceEvent::StepEnd => writeln!(out, "step_end,0,0,0"),
            TraceEvent::Alloc { addr, size, stream } => {
                writeln!(out, "alloc,{addr},{size},{stream}")
            }
            TraceEvent::Free { addr, size, stream } => writeln!(out, "free,{addr},{size},{stream}"),
            TraceEvent::SegmentAlloc { addr, size } => {
                writeln!(out, "segment_alloc,{addr},{size},0")
            }
            TraceEvent::SegmentFree { addr, size } => writeln!(out, "segment_free,{addr},{size},0"),
            TraceEvent::Phase(p) => writeln!(out, "phase,0,{},0", p.code()),
        };
    }
    out
}

/// The reserved bytes a trace's segment lines describe: bytes still
/// reserved at its end and the running maximum (the whole-run peak), or
/// `None` for a trace without segment lines (an older one).
pub fn reserved_from_segments(events: &[TraceEvent]) -> Option<(u64, u64)> {
    let mut any = false;
    let (mut now, mut peak) = (0u64, 0u64);
    for e in events {
        match *e {
            TraceEvent::SegmentAlloc { size, .. } => {
                any = true;
                now += size as u64;
                peak = peak.max(now);
            }
            TraceEvent::SegmentFree { size, .. } => {
                any = true;
                now = now.saturating_sub(size as u64);
            }
            _ => {}
        }
    }
    any.then_some((now, peak))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn err(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn every_event_kind_parses() {
        let t = parse(
            "event,addr,size,stream\nsegment_alloc,8192,4096,0\nalloc,8192,100,7\nstep_begin,0,0,0\nfree,8192,100,7\nstep_end,0,0,0\nsegment_free,8192,4096,0\n",
        )
        .unwrap();
        assert_eq!(
            t,
            vec![
                TraceEvent::SegmentAlloc {
                    addr: 8192,
                    size: 4096
                },
                TraceEvent::Alloc {
                    addr: 8192,
                    size: 100,
                    stream: 7
                },
                TraceEvent::StepBegin,
                TraceEvent::Free {
                    addr: 8192,
                    size: 100,
                    stream: 7
                },
                TraceEvent::StepEnd,
                TraceEvent::SegmentFree {
                    addr: 8192,
                    size: 4096
                },
            ]
        );
        assert_eq!(reserved_from_segments(&t), Some((0, 4096)));
    }

    #[test]
    fn an_old_trace_parses_without_segments() {
        let t = parse("event,addr,size,stream\nalloc,1,10,0\nfree,1,0,0\n").unwrap();
        assert_eq!(
            t[1],
            TraceEvent::Free {
                addr: 1,
                size: 0,
                stream: 0
            }
        );
        assert_eq!(reserved_from_segments(&t), None);
    }

    #[test]
    fn bad_lines_are_named() {
        assert!(err("").contains("line 1"));
        assert!(err("a,b\n").contains("header"));
        let e = err("event,addr,size,stream\nalloc,1,10\n");
        assert!(e.contains("line 2") && e.contains("four fields"), "{e}");
        let e = err("event,addr,size,stream\nalloc,1,x,0\n");
        assert!(e.contains("line 2") && e.contains("size"), "{e}");
        let e = err("event,addr,size,stream\nmalloc,1,1,0\n");
        assert!(e.contains("unknown event"), "{e}");
        let e = err("event,addr,size,stream\nstep_begin,0,0,0\nstep_begin,0,0,0\n");
        assert!(e.contains("line 3") && e.contains("inside a step"), "{e}");
        let e = err("event,addr,size,stream\nstep_begin,0,0,0\nstep_end,0,0,0\nstep_end,0,0,0\n");
        assert!(
            e.contains("line 4") && e.contains("outside any step"),
            "{e}"
        );
        let e = err("event,addr,size,stream\nalloc,1,10,0\nalloc,2,1");
        assert!(e.contains("line 3") && e.contains("truncated"), "{e}");
        let e = parse_bytes(b"event,addr,size,stream\nalloc,1,10,0\n\xff\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 3") && e.contains("UTF-8"), "{e}");
    }

    #[test]
    fn phase_lines_parse_and_bad_phases_are_named() {
        let text = "event,addr,size,stream\nstep_begin,0,0,0\nphase,0,1,0\nalloc,1,10,0\nphase,0,0,0\nstep_end,0,0,0\n";
        let t = parse(text).unwrap();
        assert_eq!(t[1], TraceEvent::Phase(RequestPhase::Eval));
        assert_eq!(t[3], TraceEvent::Phase(RequestPhase::Train));
        assert_eq!(to_text(&t), text);
        for bad in ["phase,0,2,0", "phase,0,-1,0", "phase,0,x,0"] {
            let e = err(&format!("event,addr,size,stream\n{bad}\n"));
            assert!(e.contains("line 2") && e.contains("phase"), "{e}");
        }
        let e = err("event,addr,size,stream\nphase,0,7,0\n");
        assert!(e.contains("0 (train) or 1 (eval)"), "{e}");
    }

    #[test]
    fn a_file_that_stops_inside_a_step_or_without_a_final_newline_parses() {
        let t = parse("event,addr,size,stream\nstep_begin,0,0,0\nalloc,1,10,0").unwrap();
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn the_log_writes_free_sizes_and_segments() {
        let dir = std::env::temp_dir().join(format!("ta-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.csv");
        let log = TraceLog::create(path.to_str().unwrap()).unwrap();
        use crate::backing::Backing;
        let mut b = crate::Metered::new(Box::new(crate::replay::NullBacking::new(None)));
        b.set_trace(log.clone());
        let r = b.reserve(4096).unwrap();
        log.step_begin();
        log.alloc(Some(r), 100, 3);
        log.free(r);
        log.step_end();
        b.release(r);
        log.flush();
        let t = read(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            t[3],
            TraceEvent::Free {
                addr: r,
                size: 100,
                stream: 3
            }
        );
        assert_eq!(reserved_from_segments(&t), Some((0, 4096)));
    }

    proptest! {
        // Random text over the format's own alphabet (and random bytes)
        // never panics the parser: it parses or names a line.
        #[test]
        fn random_input_never_panics(
            words in prop::collection::vec(
                prop::sample::select(vec![
                    "alloc", "free", "step_begin", "step_end", "segment_alloc",
                    "segment_free", "phase", ",", "\n", "0", "1", "4096", "-1", "x", " ",
                    "18446744073709551616", "event,addr,size,stream\n",
                ]),
                0..60,
            ),
            bytes in prop::collection::vec(any::<u8>(), 0..200),
        ) {
            let text: String = words.concat();
            for input in [format!("{HEADER}\n{text}"), text] {
                if let Err(e) = parse(&input) {
                    prop_assert!(e.to_string().contains("trace line"));
                }
            }
            let _ = parse_bytes(&bytes);
        }
    }
}
