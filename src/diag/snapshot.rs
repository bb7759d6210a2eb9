//! PyTorch / torch_npu memory snapshots: the pickle that
//! `torch.cuda.memory._dump_snapshot` and
//! `torch_npu.npu.memory._dump_snapshot` write, and that torch_npu writes
//! by itself on an out-of-memory error with `OOM_SNAPSHOT_ENABLE=1`
//! (`oom_snapshot_<pid>_<time>.pickle` under `OOM_SNAPSHOT_PATH`).
//!
//! It is a dict with `segments` (the allocator's state when the snapshot
//! was taken: each segment with its `stream` and `blocks`, each block with
//! `address`, `size`, `requested_size`, `state` and `frames`) and
//! `device_traces` (one list per device of entries with `action`, `addr`,
//! `size`, `stream`, `frames`, and more we do not need). Actions: `alloc`,
//! `free_requested`, `free_completed`, `segment_alloc`, `segment_free`,
//! `segment_map`, `segment_unmap`, `snapshot`, `oom` (whose address field
//! is `device_free`).
//!
//! An allocation lives from its `alloc` to its `free_completed` (when the
//! block returns to the cache). A `free_completed` of an address the trace
//! never allocated, and a block listed as allocated in `segments` that the
//! trace does not hold, were allocated before recording started: both are
//! placed at the start of the trace. The pickle is read as a stream by
//! `pickle.rs`, in memory linear in the number of entries.

use std::collections::HashMap;
use std::io::BufRead;

use super::pickle::{self, Action, V};
use super::trace::{Recorded, RecordedOom, Trace, TraceBuilder};
use crate::error::{Error, Result};

/// Reads a memory snapshot pickle from `input`; `device` picks one
/// device's trace (default: the one with the most allocations).
pub(super) fn from_reader<Rd: BufRead>(
    name: &str,
    input: Rd,
    device: Option<usize>,
) -> Result<Trace> {
    let err = |location: String, message: String| Error::Trace {
        source_name: name.to_owned(),
        location,
        message,
    };
    let top = pickle::read(input).map_err(|e| {
        err(
            format!("byte {}", e.at),
            format!("not a memory snapshot pickle ({})", e.message),
        )
    })?;
    if !top.is_dict() {
        return Err(err(
            "snapshot".to_owned(),
            "not a memory snapshot pickle (its top-level value is not a dict with \
             'segments' and 'device_traces')"
                .to_owned(),
        ));
    }
    let traces = top
        .field("device_traces")
        .map_or_else(Vec::new, |t| t.items());
    let allocs = |t: &V| t.event_count(|e| e.action == Action::Alloc);
    let device = match device {
        Some(d) if d < traces.len() => d,
        Some(d) => {
            return Err(err(
                "device_traces".to_owned(),
                format!(
                    "device {d} is not in the snapshot, which has {} device trace(s)",
                    traces.len()
                ),
            ));
        }
        None => (0..traces.len())
            .max_by_key(|&d| (allocs(&traces[d]), std::cmp::Reverse(d)))
            .unwrap_or(0),
    };
    let entries = traces.get(device).map_or_else(Vec::new, V::take_events);
    drop(traces);
    let mut streams = Streams::default();
    let mut b = TraceBuilder::<u64>::new(name);
    let mut recorded = Recorded::default();
    let mut reserved_delta = 0i128;
    let mut deltas: Vec<(usize, i128)> = Vec::new();
    for (k, e) in entries.iter().enumerate() {
        let at = || format!("device_traces[{device}][{k}]");
        let action = || format!("{:?}", e.action).to_lowercase();
        let field = |v: Option<i64>, what: &str| {
            v.filter(|&x| x >= 0).map(|x| x as u64).ok_or_else(|| {
                err(
                    at(),
                    format!("'{}' entry without a valid '{what}'", action()),
                )
            })
        };
        let stream = streams.id(e.stream);
        match e.action {
            Action::Alloc => {
                let (addr, size) = (field(e.addr(), "addr")?, field(e.size(), "size")?);
                b.alloc(addr, size, stream).map_err(|m| err(at(), m))?;
                if let Some(site) = &e.site {
                    b.set_site(site);
                }
            }
            Action::FreeCompleted => {
                let (addr, size) = (field(e.addr(), "addr")?, field(e.size(), "size")?);
                b.free_or_adopt(&addr, size, stream);
            }
            Action::SegmentAlloc
            | Action::SegmentMap
            | Action::SegmentFree
            | Action::SegmentUnmap => {
                let size = i128::from(field(e.size(), "size")?);
                let grows = matches!(e.action, Action::SegmentAlloc | Action::SegmentMap);
                reserved_delta += if grows { size } else { -size };
                deltas.push((b.event_count(), reserved_delta));
            }
            Action::Oom => {
                recorded.ooms += 1;
                recorded.oom_events.push(RecordedOom {
                    event: b.event_count(),
                    size: e.size().map_or(0, |s| s.max(0) as u64),
                    stream,
                    device_free: e.addr().map_or(0, |s| s.max(0) as u64),
                });
            }
            // free_requested (the block is not reusable until
            // free_completed) and snapshot markers are dropped by the
            // reader already.
            Action::FreeRequested | Action::Snapshot | Action::Other => {}
        }
    }
    drop(entries);
    // Blocks allocated when the snapshot was taken that the trace does not
    // hold were allocated before recording began.
    let mut final_reserved = 0i128;
    let segments = top.field("segments").map_or_else(Vec::new, |s| s.items());
    let number = |seg: &V, key: &str| seg.field(key).and_then(|v| v.as_int()).unwrap_or(0);
    for seg in segments
        .iter()
        .filter(|s| number(s, "device") == device as i64)
    {
        final_reserved += i128::from(number(seg, "total_size"));
        let stream = streams.id(number(seg, "stream"));
        let blocks = seg.field("blocks").map_or_else(Vec::new, |b| b.items());
        for blk in blocks.iter().filter_map(V::as_block) {
            let address = blk.address.unwrap_or(-1);
            if blk.allocated && !(address >= 0 && b.is_live(&(address as u64))) {
                let size = blk
                    .requested_size
                    .filter(|&r| r > 0)
                    .or(blk.size)
                    .unwrap_or(0);
                b.adopt_live(size.max(0) as u64, stream);
                if let Some(site) = &blk.site {
                    b.set_site(site);
                }
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
