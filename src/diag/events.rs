//! The project's own event formats, and reading a trace file of any
//! supported format.
//!
//! CSV, one event a line (`#` starts a comment, blank lines are skipped):
//!
//! ```text
//! alloc,ID,SIZE[,STREAM]
//! free,ID[,SIZE[,STREAM]]
//! ```
//!
//! A first line whose fields are all names (no number among them) is a
//! header: `op,id,size` or `action,id,size,stream` as exported by most
//! tools. Its columns are matched by name (`action`/`op`/`event`/`kind`/
//! `type`; `id`/`ptr`/`addr`/`address`/`handle`; `size`/`bytes`/`nbytes`;
//! `stream`), so they may come in any order; other columns are ignored.
//!
//! JSON lines, one object a line:
//!
//! ```text
//! {"action": "alloc", "id": "h1", "size": 4096, "stream": 0}
//! {"action": "free", "id": "h1"}
//! ```
//!
//! IDs are any text (or numbers in JSON); an ID may be reused after its
//! free. Sizes are requested bytes. A free that names a size (or stream)
//! must name the allocation's: a different one is an error that names the
//! line.
//!
//! Any input may be gzip-compressed (with the `pickle` feature, which
//! brings the decompressor); it is decompressed as it is read.

use std::io::{BufRead, BufReader};
use std::path::Path;

use serde::Deserialize;

use super::trace::{Trace, TraceBuilder};
use crate::error::{Error, Result};

/// Formats a trace file can be in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceFormat {
    /// `alloc,ID,SIZE[,STREAM]` / `free,ID[,SIZE[,STREAM]]` lines.
    Csv,
    /// One JSON object a line.
    JsonLines,
    /// A PyTorch / torch_npu memory snapshot pickle (`_dump_snapshot`).
    Snapshot,
}

/// The header line of the planned allocator's trace (`tensor_arena_alloc::trace`),
/// which the command line reads (its steps and segment lines are not this
/// format's).
const ALLOCATOR_TRACE_HEADER: &str = "event,addr,size,stream";

/// The two bytes every gzip stream starts with.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

impl TraceFormat {
    /// Guesses the format from the file name (a `.gz` suffix is looked
    /// through), else from the first bytes: a pickle starts with byte 0x80,
    /// JSON lines with `{`.
    pub fn detect(path: &Path, bytes: &[u8]) -> TraceFormat {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        let name = name.strip_suffix(".gz").unwrap_or(&name);
        let ext = Path::new(name).extension().and_then(|e| e.to_str());
        match ext {
            Some("pickle" | "pkl") => return TraceFormat::Snapshot,
            Some("jsonl" | "ndjson" | "json") => return TraceFormat::JsonLines,
            Some("csv") => return TraceFormat::Csv,
            _ => {}
        }
        match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(0x80) => TraceFormat::Snapshot,
            Some(b'{') => TraceFormat::JsonLines,
            _ => TraceFormat::Csv,
        }
    }
}

/// Options for reading a trace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// The format; `None` detects it.
    pub format: Option<TraceFormat>,
    /// For snapshots: which device's trace to read; `None` takes the
    /// device with the most allocations.
    pub device: Option<usize>,
}

impl Trace {
    /// Reads a trace file in any supported format, gzip-compressed or not.
    /// The file is streamed: a snapshot is never held in memory whole.
    pub fn read(path: &Path, options: ReadOptions) -> Result<Trace> {
        let file = std::fs::File::open(path).map_err(|e| Error::io("read", path, &e))?;
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let input = Box::new(BufReader::with_capacity(1 << 16, file));
        Trace::from_reader(&name, path, input, options).map_err(|e| match e {
            // A read error inside the stream names the file.
            Error::Io { kind, message, .. } => Error::Io {
                operation: "read",
                path: path.display().to_string(),
                kind,
                message,
            },
            other => other,
        })
    }

    fn from_reader(
        name: &str,
        path: &Path,
        mut input: Box<dyn BufRead + '_>,
        options: ReadOptions,
    ) -> Result<Trace> {
        let io = |e: std::io::Error| Error::io("read", name, &e);
        let head = input.fill_buf().map_err(io)?;
        if head.starts_with(&GZIP_MAGIC) {
            return gunzip(name, path, input, options);
        }
        let format = options
            .format
            .unwrap_or_else(|| TraceFormat::detect(path, head));
        match format {
            TraceFormat::Snapshot => snapshot(name, input, options.device),
            TraceFormat::Csv | TraceFormat::JsonLines => {
                let mut raw = Vec::new();
                input.read_to_end(&mut raw).map_err(io)?;
                let text = std::str::from_utf8(&raw).map_err(|e| Error::Trace {
                    source_name: name.to_owned(),
                    location: format!("byte {}", e.valid_up_to()),
                    message: "not UTF-8 text".to_owned(),
                })?;
                if format == TraceFormat::Csv {
                    Trace::from_csv(name, text)
                } else {
                    Trace::from_json_lines(name, text)
                }
            }
        }
    }

    /// Parses a trace held in memory (gzip-compressed or not).
    pub fn from_bytes(
        name: &str,
        bytes: &[u8],
        format: TraceFormat,
        device: Option<usize>,
    ) -> Result<Trace> {
        let options = ReadOptions {
            format: Some(format),
            device,
        };
        Trace::from_reader(name, Path::new(name), Box::new(bytes), options)
    }

    /// Parses the CSV event format, with or without a header line.
    ///
    /// ```
    /// use tensor_arena::diag::Trace;
    /// let t = Trace::from_csv("t", "op,id,size\nalloc,0,4096\nfree,0,4096\n")?;
    /// assert_eq!(t.allocations()[0].free_at, Some(1));
    /// let err = Trace::from_csv("t", "alloc,0,4096\nfree,0,100\n").unwrap_err();
    /// assert!(err.to_string().contains("line 2: free of id 0 gives size 100"));
    /// # Ok::<(), tensor_arena::Error>(())
    /// ```
    pub fn from_csv(name: &str, text: &str) -> Result<Trace> {
        let mut b = TraceBuilder::<String>::new(name);
        let mut columns: Option<Columns> = None;
        let mut first = true;
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let fields: Vec<&str> = line.split(',').map(str::trim).collect();
            let err = |message: String| Error::Trace {
                source_name: name.to_owned(),
                location: format!("line {}", n + 1),
                message,
            };
            if first && line == ALLOCATOR_TRACE_HEADER {
                return Err(err(
                    "this is the planned allocator's trace (header event,addr,size,stream, with step markers and segment lines): `tensor-arena replay` reads it, and so does the alloc crate's `tensor_arena_alloc::trace::read`".to_owned(),
                ));
            }
            if std::mem::take(&mut first) && is_header(&fields) {
                columns = Some(Columns::from_header(&fields).map_err(err)?);
                continue;
            }
            let row = match &columns {
                Some(c) => c.row(&fields),
                None => Row::positional(&fields),
            };
            let shape_error = || {
                err(format!(
                    "expected 'alloc,ID,SIZE[,STREAM]' or 'free,ID[,SIZE[,STREAM]]', found '{line}'"
                ))
            };
            let Some(row) = row else {
                return Err(shape_error());
            };
            let stream = match row.stream {
                Some(s) => Some(stream_number(s).map_err(err)?),
                None => None,
            };
            let size = match row.size {
                Some(s) => Some(number(s, "size").map_err(err)?),
                None => None,
            };
            match (row.action.to_ascii_lowercase().as_str(), size) {
                ("alloc", Some(size)) => b
                    .alloc(row.id.to_owned(), size, stream.unwrap_or(0))
                    .map_err(err)?,
                ("free", size) => b
                    .free_checked(&row.id.to_owned(), size, stream)
                    .map_err(err)?,
                _ => return Err(shape_error()),
            }
        }
        Ok(b.finish())
    }

    /// Parses the JSON-lines event format.
    pub fn from_json_lines(name: &str, text: &str) -> Result<Trace> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Id {
            Number(u64),
            Text(String),
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Line {
            action: String,
            id: Id,
            size: Option<u64>,
            stream: Option<u32>,
        }
        let mut b = TraceBuilder::<String>::new(name);
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let err = |message: String| Error::Trace {
                source_name: name.to_owned(),
                location: format!("line {}", n + 1),
                message,
            };
            let l: Line = serde_json::from_str(line).map_err(|e| err(e.to_string()))?;
            let id = match l.id {
                Id::Number(v) => v.to_string(),
                Id::Text(s) => s,
            };
            match (l.action.as_str(), l.size) {
                ("alloc", Some(size)) => b.alloc(id, size, l.stream.unwrap_or(0)),
                ("alloc", None) => Err("an alloc needs a \"size\"".to_owned()),
                ("free", size) => b.free_checked(&id, size, l.stream),
                (other, _) => Err(format!(
                    "unknown action '{other}'; expected \"alloc\" or \"free\""
                )),
            }
            .map_err(err)?;
        }
        Ok(b.finish())
    }
}

/// Whether a CSV line is a header: no field is a number, and the first is
/// not an action.
fn is_header(fields: &[&str]) -> bool {
    let action = fields
        .first()
        .is_some_and(|f| f.eq_ignore_ascii_case("alloc") || f.eq_ignore_ascii_case("free"));
    !action && fields.iter().all(|f| f.parse::<u64>().is_err())
}

/// One CSV event, its fields picked out.
struct Row<'a> {
    action: &'a str,
    id: &'a str,
    size: Option<&'a str>,
    stream: Option<&'a str>,
}

impl<'a> Row<'a> {
    fn positional(fields: &[&'a str]) -> Option<Row<'a>> {
        match fields {
            [action, id, rest @ ..] if rest.len() <= 2 => Some(Row {
                action,
                id,
                size: rest.first().copied(),
                stream: rest.get(1).copied(),
            }),
            _ => None,
        }
    }
}

/// Column positions named by a header line.
struct Columns {
    action: usize,
    id: usize,
    size: Option<usize>,
    stream: Option<usize>,
}

impl Columns {
    fn from_header(fields: &[&str]) -> std::result::Result<Columns, String> {
        let find = |names: &[&str]| {
            fields
                .iter()
                .position(|f| names.iter().any(|n| f.eq_ignore_ascii_case(n)))
        };
        let action = find(&["action", "op", "event", "kind", "type"]);
        let id = find(&["id", "ptr", "addr", "address", "handle"]);
        match (action, id) {
            (Some(action), Some(id)) => {
                let size = find(&["size", "bytes", "nbytes"]);
                // A header naming the first three columns in the usual
                // order leaves the fourth to be the stream, as without one.
                let usual = (action, id, size) == (0, 1, Some(2));
                let stream = find(&["stream"]).or(usual.then_some(3));
                Ok(Columns {
                    action,
                    id,
                    size,
                    stream,
                })
            }
            _ => Err(format!(
                "header '{}' names no action column (action, op, event, kind or type) \
                 or no id column (id, ptr, addr, address or handle)",
                fields.join(",")
            )),
        }
    }

    fn row<'a>(&self, fields: &[&'a str]) -> Option<Row<'a>> {
        let at = |i: Option<usize>| {
            i.and_then(|i| fields.get(i).copied())
                .filter(|f| !f.is_empty())
        };
        Some(Row {
            action: at(Some(self.action))?,
            id: at(Some(self.id))?,
            size: at(self.size),
            stream: at(self.stream),
        })
    }
}

fn number(text: &str, what: &str) -> std::result::Result<u64, String> {
    text.parse()
        .map_err(|_| format!("{what} '{text}' is not a whole number of bytes"))
}

fn stream_number(text: &str) -> std::result::Result<u32, String> {
    text.parse()
        .map_err(|_| format!("stream '{text}' is not a number from 0 to {}", u32::MAX))
}

#[cfg(feature = "pickle")]
fn snapshot<Rd: BufRead>(name: &str, input: Rd, device: Option<usize>) -> Result<Trace> {
    super::snapshot::from_reader(name, input, device)
}

#[cfg(not(feature = "pickle"))]
fn snapshot<Rd: BufRead>(name: &str, _input: Rd, _device: Option<usize>) -> Result<Trace> {
    Err(Error::Trace {
        source_name: name.to_owned(),
        location: "file".to_owned(),
        message: "memory snapshots need the 'pickle' feature of tensor-arena".to_owned(),
    })
}

#[cfg(feature = "pickle")]
fn gunzip(
    name: &str,
    path: &Path,
    input: Box<dyn BufRead + '_>,
    options: ReadOptions,
) -> Result<Trace> {
    let inner = Box::new(BufReader::with_capacity(
        1 << 16,
        flate2::bufread::MultiGzDecoder::new(input),
    ));
    Trace::from_reader(name, path, inner, options).map_err(|e| match e {
        Error::Io { message, .. } => Error::Trace {
            source_name: name.to_owned(),
            location: "gzip stream".to_owned(),
            message: format!("cannot decompress: {message}"),
        },
        other => other,
    })
}

#[cfg(not(feature = "pickle"))]
fn gunzip(
    name: &str,
    _path: &Path,
    _input: Box<dyn BufRead + '_>,
    _options: ReadOptions,
) -> Result<Trace> {
    Err(Error::Trace {
        source_name: name.to_owned(),
        location: "file".to_owned(),
        message: "gzip-compressed traces need the 'pickle' feature of tensor-arena".to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::TraceEvent;

    #[test]
    fn the_allocators_trace_is_named_not_misread() {
        let e = Trace::from_csv("t.csv", "event,addr,size,stream\nstep_begin,0,0,0\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("line 1") && e.contains("planned allocator's trace"),
            "{e}"
        );
    }

    #[test]
    fn csv_with_comments_header_and_streams() {
        let t = Trace::from_csv(
            "t",
            "action,id,size\n# warm-up\nalloc, w, 100\n\nalloc,x,5,1 # on stream 1\nfree,x\nalloc,x,7\n",
        )
        .unwrap();
        assert_eq!(t.allocations().len(), 3);
        assert_eq!(t.allocations()[1].stream, 1);
        assert_eq!(t.events()[2], TraceEvent::Free(1));
    }

    #[test]
    fn csv_errors_name_the_line_and_value() {
        let err = |text| Trace::from_csv("t.csv", text).unwrap_err().to_string();
        assert_eq!(
            err("alloc,a,12\nalloc,b,lots\n"),
            "trace 't.csv', line 2: size 'lots' is not a whole number of bytes"
        );
        assert_eq!(
            err("free,a\n"),
            "trace 't.csv', line 1: free of id a, which is not allocated"
        );
        assert!(err("alloc,a,1\nalloc,a,2\n").contains("line 2: id a is allocated again"));
        assert!(err("malloc,a,1\n").contains("expected 'alloc,ID,SIZE[,STREAM]'"));
        assert!(err("alloc,a,1,-1\n").contains("stream '-1'"));
    }

    #[test]
    fn json_lines() {
        let t = Trace::from_json_lines(
            "t",
            "{\"action\":\"alloc\",\"id\":1,\"size\":64}\n{\"action\":\"alloc\",\"id\":\"b\",\"size\":8,\"stream\":2}\n{\"action\":\"free\",\"id\":1}\n",
        )
        .unwrap();
        assert_eq!(t.allocations().len(), 2);
        assert_eq!(t.streams(), 3);
        let err = Trace::from_json_lines("t", "{\"action\":\"alloc\",\"id\":1}\n")
            .unwrap_err()
            .to_string();
        assert_eq!(err, "trace 't', line 1: an alloc needs a \"size\"");
        let err = Trace::from_json_lines("t", "{\"action\":\"grow\",\"id\":1}")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown action 'grow'"), "{err}");
        assert!(matches!(
            Trace::from_json_lines("t", "{oops"),
            Err(Error::Trace { .. })
        ));
    }

    #[test]
    fn csv_round_trip() {
        let t = Trace::from_csv("t", "alloc,a,10\nalloc,b,20,1\nfree,a\n").unwrap();
        let again = Trace::from_csv("t", &t.to_csv()).unwrap();
        assert_eq!(again.allocations(), t.allocations());
        assert_eq!(again.events(), t.events());
    }

    #[test]
    fn detection() {
        let p = Path::new("trace");
        assert_eq!(TraceFormat::detect(p, &[0x80, 4]), TraceFormat::Snapshot);
        assert_eq!(
            TraceFormat::detect(p, b"  {\"a\":1}"),
            TraceFormat::JsonLines
        );
        assert_eq!(TraceFormat::detect(p, b"alloc,a,1"), TraceFormat::Csv);
        assert_eq!(
            TraceFormat::detect(Path::new("x.PKL"), b""),
            TraceFormat::Snapshot
        );
    }
}
