//! The optional event trace (`"trace": "path.csv"`): one CSV line per
//! step boundary, allocation and free, to replay through the C ABI.

use std::fs::File;
use std::io::{BufWriter, Write};

use crate::error::{Error, Result};

/// The CSV header line.
pub const HEADER: &str = "event,addr,size,stream";

/// An open trace file.
pub struct TraceWriter {
    out: BufWriter<File>,
    failed: bool,
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
        Ok(TraceWriter { out, failed: false })
    }

    /// Appends one event; a write error stops the trace (counted once by
    /// the caller through [`TraceWriter::failed`]).
    pub fn event(&mut self, event: &str, addr: usize, size: usize, stream: usize) {
        if !self.failed && writeln!(self.out, "{event},{addr},{size},{stream}").is_err() {
            self.failed = true;
        }
    }

    /// Flushes buffered lines (at every step end).
    pub fn flush(&mut self) {
        if !self.failed && self.out.flush().is_err() {
            self.failed = true;
        }
    }

    /// Whether a write failed.
    pub fn failed(&self) -> bool {
        self.failed
    }
}

/// One event of a trace file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceEvent {
    /// `step_begin`.
    StepBegin,
    /// `step_end`.
    StepEnd,
    /// `alloc`: the address it got (an id), its size and stream.
    Alloc {
        /// Address in the traced run (an id here).
        addr: usize,
        /// Bytes.
        size: usize,
        /// Stream handle.
        stream: usize,
    },
    /// `free` of the block with that address.
    Free {
        /// Address in the traced run.
        addr: usize,
    },
}

/// Reads a trace file's text (header line first).
pub fn parse(text: &str) -> Result<Vec<TraceEvent>> {
    let mut lines = text.lines();
    let bad = |line: usize, why: &str| Error::Config {
        config: format!("trace line {line}"),
        reason: why.to_owned(),
    };
    if lines.next().map(str::trim) != Some(HEADER) {
        return Err(bad(1, "the header line must be event,addr,size,stream"));
    }
    let mut events = Vec::new();
    for (i, line) in lines.enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let mut f = line.split(',');
        let (Some(event), Some(addr), Some(size), Some(stream)) =
            (f.next(), f.next(), f.next(), f.next())
        else {
            return Err(bad(i + 2, "expected four fields"));
        };
        let num = |s: &str| {
            s.parse::<usize>()
                .map_err(|_| bad(i + 2, "a field is not a number"))
        };
        events.push(match event {
            "step_begin" => TraceEvent::StepBegin,
            "step_end" => TraceEvent::StepEnd,
            "alloc" => TraceEvent::Alloc {
                addr: num(addr)?,
                size: num(size)?,
                stream: num(stream)?,
            },
            "free" => TraceEvent::Free { addr: num(addr)? },
            _ => return Err(bad(i + 2, "unknown event")),
        });
    }
    Ok(events)
}
