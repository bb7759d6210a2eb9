//! PyTorch / torch_npu memory snapshots: the pickle that
//! `torch.cuda.memory._dump_snapshot` and
//! `torch_npu.npu.memory._dump_snapshot` write.
//!
//! It is a dict with `segments` (the allocator's state when the snapshot
//! was taken: each segment with its `stream` and `blocks`, each block with
//! `address`, `size`, `requested_size` and `state`) and `device_traces`
//! (one list per device of entries with `action`, `addr`, `size`, `stream`,
//! and more we do not need). Actions: `alloc`, `free_requested`,
//! `free_completed`, `segment_alloc`, `segment_free`, `segment_map`,
//! `segment_unmap`, `snapshot`, `oom`.
//!
//! An allocation lives from its `alloc` to its `free_completed` (when the
//! block returns to the cache). A `free_completed` of an address the trace
//! never allocated, and a block listed as allocated in `segments` that the
//! trace does not hold, were allocated before recording started: both are
//! placed at the start of the trace.

use std::collections::HashMap;

use serde::Deserialize;

use super::trace::{Recorded, Trace, TraceBuilder};
use crate::error::{Error, Result};

#[derive(Debug, Deserialize)]
struct Snapshot {
    #[serde(default)]
    segments: Vec<Segment>,
    #[serde(default)]
    device_traces: Vec<Vec<Entry>>,
}

#[derive(Debug, Deserialize)]
struct Segment {
    #[serde(default)]
    device: i64,
    #[serde(default)]
    stream: i64,
    #[serde(default)]
    total_size: i64,
    #[serde(default)]
    blocks: Vec<SegmentBlock>,
}

#[derive(Debug, Deserialize)]
struct SegmentBlock {
    address: i64,
    size: i64,
    #[serde(default)]
    requested_size: i64,
    state: String,
}

#[derive(Debug, Deserialize)]
struct Entry {
    action: String,
    #[serde(default)]
    addr: Option<i64>,
    #[serde(default)]
    size: Option<i64>,
    #[serde(default)]
    stream: Option<i64>,
}

/// Reads a memory snapshot pickle; `device` picks one device's trace
/// (default: the one with the most allocations).
pub(super) fn from_pickle(name: &str, bytes: &[u8], device: Option<usize>) -> Result<Trace> {
    let err = |location: String, message: String| Error::Trace {
        source_name: name.to_owned(),
        location,
        message,
    };
    // serde-pickle 1.2 drops a container shared by several parents (frames
    // lists often are) from its memo too early and then reports a recursive
    // structure (serde-pickle PR #24); replacing such references by None
    // only affects fields this reader ignores.
    let options = serde_pickle::DeOptions::new()
        .replace_unresolved_globals()
        .replace_recursive_structures();
    let snap: Snapshot = serde_pickle::from_slice(bytes, options).map_err(|e| {
        err(
            "snapshot".to_owned(),
            format!("not a memory snapshot pickle ({e})"),
        )
    })?;
    let count = |t: &Vec<Entry>| t.iter().filter(|e| e.action == "alloc").count();
    let device = match device {
        Some(d) if d < snap.device_traces.len() => d,
        Some(d) => {
            return Err(err(
                "device_traces".to_owned(),
                format!(
                    "device {d} is not in the snapshot, which has {} device trace(s)",
                    snap.device_traces.len()
                ),
            ));
        }
        None => (0..snap.device_traces.len())
            .max_by_key(|&d| (count(&snap.device_traces[d]), std::cmp::Reverse(d)))
            .unwrap_or(0),
    };
    let mut streams = Streams::default();
    let mut b = TraceBuilder::<u64>::new(name);
    let mut recorded = Recorded::default();
    let mut reserved_delta = 0i128;
    let mut deltas: Vec<(usize, i128)> = Vec::new();
    let entries = snap.device_traces.get(device).map_or(&[][..], |v| v);
    for (k, e) in entries.iter().enumerate() {
        let at = || format!("device_traces[{device}][{k}]");
        let field = |v: Option<i64>, what: &str| {
            v.filter(|&x| x >= 0).map(|x| x as u64).ok_or_else(|| {
                err(
                    at(),
                    format!("'{}' entry without a valid '{what}'", e.action),
                )
            })
        };
        let stream = streams.id(e.stream.unwrap_or(0));
        match e.action.as_str() {
            "alloc" => {
                let (addr, size) = (field(e.addr, "addr")?, field(e.size, "size")?);
                b.alloc(addr, size, stream).map_err(|m| err(at(), m))?;
            }
            "free_completed" => {
                let (addr, size) = (field(e.addr, "addr")?, field(e.size, "size")?);
                b.free_or_adopt(&addr, size, stream);
            }
            "segment_alloc" | "segment_map" | "segment_free" | "segment_unmap" => {
                let size = i128::from(field(e.size, "size")?);
                let sign = if e.action.ends_with("alloc") || e.action.ends_with("_map") {
                    1
                } else {
                    -1
                };
                reserved_delta += sign * size;
                deltas.push((b.event_count(), reserved_delta));
            }
            "oom" => recorded.ooms += 1,
            // free_requested: the block is not reusable until
            // free_completed; snapshot: a marker.
            _ => {}
        }
    }
    // Blocks allocated when the snapshot was taken that the trace does not
    // hold were allocated before recording began.
    let mut final_reserved = 0i128;
    for seg in snap.segments.iter().filter(|s| s.device == device as i64) {
        final_reserved += i128::from(seg.total_size);
        let stream = streams.id(seg.stream);
        for blk in &seg.blocks {
            let allocated = blk.state.starts_with("active");
            if allocated && !b.is_live(&(blk.address as u64)) {
                let size = if blk.requested_size > 0 {
                    blk.requested_size
                } else {
                    blk.size
                };
                b.adopt_live(size.max(0) as u64, stream);
            }
        }
    }
    if !deltas.is_empty() || recorded.ooms > 0 {
        // The recording starts with whatever was reserved before it; the
        // snapshot's segments give the reserved total at its end.
        let start = (final_reserved - reserved_delta).max(0);
        let bytes = |v: i128| u64::try_from(v.max(0)).unwrap_or(u64::MAX);
        recorded.initial_reserved = bytes(start);
        recorded.reserved = deltas
            .into_iter()
            .map(|(at, d)| (at, bytes(start + d)))
            .collect();
        b.set_recorded(recorded);
    }
    Ok(b.finish())
}

/// Dense stream numbers in order of first appearance.
#[derive(Debug, Default)]
struct Streams(HashMap<i64, u32>);

impl Streams {
    fn id(&mut self, raw: i64) -> u32 {
        let next = self.0.len() as u32;
        *self.0.entry(raw).or_insert(next)
    }
}
