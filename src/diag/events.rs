//! The project's own event formats, and reading a trace file of any
//! supported format.
//!
//! CSV, one event a line (`#` starts a comment, blank lines are skipped, an
//! optional header line starts with `action`):
//!
//! ```text
//! alloc,ID,SIZE[,STREAM]
//! free,ID
//! ```
//!
//! JSON lines, one object a line:
//!
//! ```text
//! {"action": "alloc", "id": "h1", "size": 4096, "stream": 0}
//! {"action": "free", "id": "h1"}
//! ```
//!
//! IDs are any text (or numbers in JSON); an ID may be reused after its
//! free. Sizes are requested bytes.

use std::path::Path;

use serde::Deserialize;

use super::trace::{Trace, TraceBuilder};
use crate::error::{Error, Result};

/// Formats a trace file can be in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceFormat {
    /// `alloc,ID,SIZE[,STREAM]` / `free,ID` lines.
    Csv,
    /// One JSON object a line.
    JsonLines,
    /// A PyTorch / torch_npu memory snapshot pickle (`_dump_snapshot`).
    Snapshot,
}

impl TraceFormat {
    /// Guesses the format from the file name, else from the first bytes:
    /// a pickle starts with byte 0x80, JSON lines with `{`.
    pub fn detect(path: &Path, bytes: &[u8]) -> TraceFormat {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
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
    /// Reads a trace file in any supported format.
    pub fn read(path: &Path, options: ReadOptions) -> Result<Trace> {
        let bytes = std::fs::read(path).map_err(|e| Error::io("read", path, &e))?;
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let format = options
            .format
            .unwrap_or_else(|| TraceFormat::detect(path, &bytes));
        Trace::from_bytes(&name, &bytes, format, options.device)
    }

    /// Parses a trace held in memory.
    pub fn from_bytes(
        name: &str,
        bytes: &[u8],
        format: TraceFormat,
        device: Option<usize>,
    ) -> Result<Trace> {
        let text = || {
            std::str::from_utf8(bytes).map_err(|e| Error::Trace {
                source_name: name.to_owned(),
                location: format!("byte {}", e.valid_up_to()),
                message: "not UTF-8 text".to_owned(),
            })
        };
        match format {
            TraceFormat::Csv => Trace::from_csv(name, text()?),
            TraceFormat::JsonLines => Trace::from_json_lines(name, text()?),
            TraceFormat::Snapshot => snapshot(name, bytes, device),
        }
    }

    /// Parses the CSV event format.
    pub fn from_csv(name: &str, text: &str) -> Result<Trace> {
        let mut b = TraceBuilder::<String>::new(name);
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() || (n == 0 && line.starts_with("action")) {
                continue;
            }
            let fields: Vec<&str> = line.split(',').map(str::trim).collect();
            let err = |message: String| Error::Trace {
                source_name: name.to_owned(),
                location: format!("line {}", n + 1),
                message,
            };
            match fields.as_slice() {
                ["alloc", id, size, rest @ ..] if rest.len() <= 1 => {
                    let size = number(size, "size").map_err(err)?;
                    let stream = match rest.first() {
                        Some(s) => stream_number(s).map_err(err)?,
                        None => 0,
                    };
                    b.alloc((*id).to_owned(), size, stream).map_err(err)?;
                }
                ["free", id] => b.free(&(*id).to_owned()).map_err(err)?,
                _ => {
                    return Err(err(format!(
                        "expected 'alloc,ID,SIZE[,STREAM]' or 'free,ID', found '{line}'"
                    )));
                }
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
                ("free", _) => b.free(&id),
                (other, _) => Err(format!(
                    "unknown action '{other}'; expected \"alloc\" or \"free\""
                )),
            }
            .map_err(err)?;
        }
        Ok(b.finish())
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
fn snapshot(name: &str, bytes: &[u8], device: Option<usize>) -> Result<Trace> {
    super::snapshot::from_pickle(name, bytes, device)
}

#[cfg(not(feature = "pickle"))]
fn snapshot(name: &str, _bytes: &[u8], _device: Option<usize>) -> Result<Trace> {
    Err(Error::Trace {
        source_name: name.to_owned(),
        location: "file".to_owned(),
        message: "memory snapshots need the 'pickle' feature of tensor-arena".to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::TraceEvent;

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
        assert!(Trace::from_json_lines("t", "{oops").is_err());
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
