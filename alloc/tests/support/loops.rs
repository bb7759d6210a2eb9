//! The recorded training loops of the allocator suite
//! (tests/data/loops/*.csv.gz, see its README), read for replays.

use std::io::Read;
use std::path::{Path, PathBuf};

use tensor_arena_alloc::trace::{self, TraceEvent};

/// The directory of the recorded loops: `TA_LOOPS_DIR` when set (the
/// traces `python python/benches/generated_loops --keep-traces` wrote, say),
/// else the suite's checked-in traces.
pub fn dir() -> PathBuf {
    match std::env::var_os("TA_LOOPS_DIR") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/loops"),
    }
}

/// Every recorded loop: its name and its events, by name.
pub fn all() -> Vec<(String, Vec<TraceEvent>)> {
    all_in(&dir())
}

/// Every `*.csv.gz` trace of `dir` (the generated loops' `--keep-traces`
/// directory, for one): its name and its events, by name.
pub fn all_in(dir: &Path) -> Vec<(String, Vec<TraceEvent>)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".csv.gz"))
        .collect();
    paths.sort();
    for p in paths {
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().trim_end_matches(".csv.gz").to_owned())
            .unwrap_or_default();
        out.push((name, read_gz(&p)));
    }
    out
}

/// A gzip-compressed trace file's events.
pub fn read_gz(path: &Path) -> Vec<TraceEvent> {
    let file = std::fs::File::open(path).expect("trace file");
    let mut text = String::new();
    flate2::read::GzDecoder::new(file)
        .read_to_string(&mut text)
        .expect("gzip text");
    // A run that ended between two flushes of its trace leaves a last line
    // cut short: the events before it stand.
    let whole = text.rfind('\n').map_or(0, |i| i + 1);
    trace::parse(&text[..whole]).expect("a valid trace")
}
