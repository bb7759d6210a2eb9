//! PyTorch / torch_npu memory snapshots: the pickle that
//! `torch.cuda.memory._dump_snapshot` and
//! `torch_npu.npu.memory._dump_snapshot` write, and that torch_npu writes
//! by itself on an out-of-memory error with `OOM_SNAPSHOT_ENABLE=1`
//! (`oom_snapshot_<pid>_<time>.pickle` under `OOM_SNAPSHOT_PATH`).
//!
//! It is a dict with `segments` (the allocator's state when the snapshot
//! was taken: each segment with its `device`, `address`, `stream` and
//! `blocks`, each block with `size`, `state` and, from torch 2.1,
//! `address`, `requested_size` and `frames`; torch 2.0 wrote no block
//! address and kept the request and its frames under `history`),
//! `device_traces` (one list per device of entries with `action`, `addr`,
//! `size`, `stream`, `frames`, and more we do not need; absent or empty
//! when history was not recorded) and, from torch 2.1, `allocator_settings`
//! (the `PYTORCH_CUDA_ALLOC_CONF` string and the parsed options). Actions: `alloc`,
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

use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;

use super::explain::size_classes;
use super::pickle::{self, Action, Event, PlatformHints, V};
use super::trace::{
    DeviceSummary, Recorded, RecordedOom, RecordedState, SnapshotInfo, Source, StreamState, Trace,
    TraceBuilder,
};
use crate::caching::{CachingConfig, GcThreshold, Platform, max_split_size_bytes};
use crate::error::{Error, Result};
use crate::units::format_bytes;

/// A block of a segment, with its address resolved.
struct SegBlock {
    address: i64,
    size: u64,
    requested: u64,
    allocated: bool,
    site: Option<std::rc::Rc<String>>,
}

/// A segment of the snapshot's state.
struct Segment {
    device: i64,
    stream: i64,
    total: u64,
    blocks: Vec<SegBlock>,
}

fn number(v: &V, key: &str) -> Option<i64> {
    v.field(key).and_then(|x| x.as_int())
}

/// Reads the state's segments; fails on blocks in a layout this reader
/// does not know, rather than dropping them.
fn read_segments(top: &V, err: &dyn Fn(String, String) -> Error) -> Result<(Vec<Segment>, bool)> {
    let mut out = Vec::new();
    let mut history_layout = false;
    for (k, seg) in top
        .field("segments")
        .map_or_else(Vec::new, |s| s.items())
        .iter()
        .enumerate()
    {
        let base = number(seg, "address");
        let mut next = base;
        let mut blocks = Vec::new();
        for (j, raw) in seg
            .field("blocks")
            .map_or_else(Vec::new, |b| b.items())
            .iter()
            .enumerate()
        {
            let Some(blk) = raw.as_block() else {
                return Err(err(
                    format!("segments[{k}].blocks[{j}]"),
                    "a block without 'size' and 'state' and without 'address' or 'history': \
                     not a layout torch writes"
                        .to_owned(),
                ));
            };
            history_layout |= blk.address.is_none();
            let size = blk.size.unwrap_or(0).max(0) as u64;
            let address = blk.address.or(next).unwrap_or(-1);
            next = (address >= 0).then(|| address + size as i64);
            let requested = blk
                .requested_size
                .filter(|&r| r > 0)
                .map_or(size, |r| r as u64);
            blocks.push(SegBlock {
                address,
                size,
                requested,
                allocated: blk.allocated,
                site: blk.site,
            });
        }
        out.push(Segment {
            device: number(seg, "device").unwrap_or(0),
            stream: number(seg, "stream").unwrap_or(0),
            total: number(seg, "total_size").unwrap_or(0).max(0) as u64,
            blocks,
        });
    }
    Ok((out, history_layout))
}

fn recorded_state(segments: &[&Segment]) -> RecordedState {
    let mut state = RecordedState {
        segments: segments.len(),
        ..RecordedState::default()
    };
    let mut streams: BTreeMap<i64, StreamState> = BTreeMap::new();
    for seg in segments {
        let st = streams.entry(seg.stream).or_insert_with(|| StreamState {
            stream: seg.stream,
            ..StreamState::default()
        });
        st.segments += 1;
        st.reserved += seg.total;
        state.reserved += seg.total;
        for b in &seg.blocks {
            if b.allocated {
                state.allocated += b.size;
                state.requested += b.requested;
                state.allocated_blocks += 1;
                st.allocated += b.size;
            } else {
                state.free += b.size;
                state.largest_free_block = state.largest_free_block.max(b.size);
                st.free += b.size;
                st.largest_free_block = st.largest_free_block.max(b.size);
            }
        }
    }
    state.free_by_size = size_classes(
        segments
            .iter()
            .flat_map(|s| s.blocks.iter().filter(|b| !b.allocated).map(|b| b.size)),
    );
    state.streams = streams.into_values().collect();
    state
}

/// The platform the snapshot names: the variable in `allocator_settings`,
/// else its stack frames.
fn platform_of(settings: Option<&V>, hints: PlatformHints) -> Option<Source<Platform>> {
    if let Some(s) = settings {
        for p in [Platform::Cuda, Platform::Npu] {
            if s.field(p.alloc_conf_var()).is_some() {
                return Some(Source {
                    value: p,
                    source: format!("snapshot: allocator_settings has {}", p.alloc_conf_var()),
                });
            }
        }
    }
    let (value, frames, kind) = match (hints.cuda, hints.npu) {
        (0, 0) => return None,
        (c, n) if c >= n => (Platform::Cuda, c, "CUDA"),
        (_, n) => (Platform::Npu, n, "torch_npu"),
    };
    Some(Source {
        value,
        source: format!("snapshot: {frames} stack frame(s) in {kind} code"),
    })
}

/// The allocator settings of `allocator_settings`, with what the model
/// does not model noted.
fn settings_of(
    settings: &V,
    platform: Platform,
    notes: &mut Vec<String>,
) -> Option<Source<CachingConfig>> {
    let mut config = CachingConfig::default().on(platform);
    let mut read = false;
    if let Some(split) = number(settings, "max_split_size") {
        read = true;
        // torch writes SIZE_MAX (-1 as a signed integer) when unset.
        if split > 0 && split < i64::MAX {
            match max_split_size_bytes(split as u64 >> 20) {
                Ok(bytes) => config.max_split_size = Some(bytes),
                Err(e) => notes.push(format!("allocator_settings max_split_size ignored: {e}")),
            }
        }
    }
    if let Some(t) = settings
        .field("garbage_collection_threshold")
        .and_then(|v| v.as_float())
    {
        read = true;
        if t > 0.0 {
            match GcThreshold::new(t) {
                Ok(t) => config.garbage_collection_threshold = Some(t),
                Err(e) => notes.push(format!(
                    "allocator_settings garbage_collection_threshold ignored: {e}"
                )),
            }
        }
    }
    if let Some(e) = number(settings, "expandable_segments") {
        read = true;
        config.expandable_segments = e != 0;
    }
    if let Some(r) = settings.field("roundup_power2_divisions") {
        let values: Vec<i64> = match r.entries() {
            e if !e.is_empty() => e.iter().filter_map(|(_, v)| v.as_int()).collect(),
            _ => r.items().iter().filter_map(V::as_int).collect(),
        };
        if values.iter().any(|&v| v > 1) {
            notes.push(
                "allocator_settings sets roundup_power2_divisions, which the model does not \
                 model: requests are rounded to 512 bytes only"
                    .to_owned(),
            );
        }
    }
    let conf = settings
        .field(platform.alloc_conf_var())
        .and_then(|v| v.as_str());
    if !read {
        // Only the string: read what the model knows of it.
        let conf = conf.as_deref().map_or("", String::as_str);
        match CachingConfig::from_alloc_conf(conf) {
            Ok(c) => config = c.on(platform),
            Err(e) => {
                notes.push(format!("allocator_settings not read: {e}"));
                return None;
            }
        }
    }
    let source = match conf.as_deref().map(String::as_str) {
        Some("") | None => "snapshot: allocator_settings (the defaults)".to_owned(),
        Some(c) => format!(
            "snapshot: allocator_settings ({}=\"{c}\")",
            platform.alloc_conf_var()
        ),
    };
    Some(Source {
        value: config,
        source,
    })
}

/// Reads a memory snapshot pickle from `input`; `device` picks one
/// device's trace (default: the device with the recorded out-of-memory
/// error, else the one with the most allocations).
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
    let (top, hints, frames) = pickle::read_snapshot(input).map_err(|e| {
        err(
            format!("byte {}", e.at),
            format!("not a memory snapshot pickle ({})", e.message),
        )
    })?;
    if !top.is_dict() || (top.field("segments").is_none() && top.field("device_traces").is_none()) {
        return Err(err(
            "snapshot".to_owned(),
            "not a memory snapshot pickle (its top-level value is not a dict with \
             'segments' and 'device_traces')"
                .to_owned(),
        ));
    }
    let (segments, history_layout) = read_segments(&top, &err)?;
    let traces = top
        .field("device_traces")
        .map_or_else(Vec::new, |t| t.items());
    let count = |t: &V, pick: &dyn Fn(&Event) -> bool| t.event_count(pick);
    let devices: Vec<DeviceSummary> = {
        let most = segments
            .iter()
            .map(|s| s.device.max(0) as usize + 1)
            .max()
            .unwrap_or(0)
            .max(traces.len());
        (0..most)
            .map(|d| {
                let segs: Vec<&Segment> =
                    segments.iter().filter(|s| s.device == d as i64).collect();
                let t = traces.get(d);
                let n = |pick: &dyn Fn(&Event) -> bool| t.map_or(0, |t| count(t, pick));
                DeviceSummary {
                    device: d,
                    segments: segs.len(),
                    reserved: segs.iter().map(|s| s.total).sum(),
                    allocated: segs
                        .iter()
                        .flat_map(|s| s.blocks.iter().filter(|b| b.allocated))
                        .map(|b| b.size)
                        .sum(),
                    allocs: n(&|e| e.action == Action::Alloc),
                    segment_events: n(&|e| {
                        matches!(
                            e.action,
                            Action::SegmentAlloc
                                | Action::SegmentFree
                                | Action::SegmentMap
                                | Action::SegmentUnmap
                        )
                    }),
                    ooms: n(&|e| e.action == Action::Oom),
                }
            })
            .filter(|d| d.segments > 0 || d.allocs > 0 || d.segment_events > 0 || d.ooms > 0)
            .collect()
    };
    let (device, device_reason) = match device {
        Some(d) if devices.iter().any(|s| s.device == d) || d < traces.len() => {
            (d, "flag --device".to_owned())
        }
        Some(d) => {
            let with: Vec<String> = devices.iter().map(|s| s.device.to_string()).collect();
            return Err(err(
                "device_traces".to_owned(),
                format!(
                    "device {d} is not in the snapshot, which has {} device trace(s){}",
                    traces.len(),
                    if with.is_empty() {
                        String::new()
                    } else {
                        format!(" and data for device(s) {}", with.join(", "))
                    }
                ),
            ));
        }
        None => match devices.iter().find(|d| d.ooms > 0) {
            Some(d) => (
                d.device,
                "the default: it has the recorded out-of-memory error".to_owned(),
            ),
            None => devices
                .iter()
                .max_by_key(|d| {
                    (
                        d.allocs + d.segments,
                        d.reserved,
                        std::cmp::Reverse(d.device),
                    )
                })
                .map_or(
                    (0, "the default: the snapshot holds no data".to_owned()),
                    |d| {
                        (
                            d.device,
                            "the default: it has the most allocations and segments".to_owned(),
                        )
                    },
                ),
        },
    };
    let entries = traces.get(device).map_or_else(Vec::new, V::take_events);
    drop(traces);
    let mut streams = Streams::default();
    let mut b = TraceBuilder::<u64>::new(name);
    b.set_frame_names(frames.names);
    // Stacks are shared between entries: one id per distinct stack.
    let mut stack_ids: HashMap<*const u32, u32> = HashMap::new();
    let mut stack_of = |b: &mut TraceBuilder<u64>, e: &Event| {
        if let Some(st) = &e.stack {
            let id = *stack_ids
                .entry(st.as_ptr())
                .or_insert_with(|| b.add_stack(st.to_vec()));
            b.set_event_stack(id);
        }
    };
    let mut recorded = Recorded::default();
    let mut reserved_delta = 0i128;
    let mut deltas: Vec<(usize, i128)> = Vec::new();
    let mut oom_deltas: Vec<i128> = Vec::new();
    let mut releasing = false;
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
        let frees = matches!(e.action, Action::SegmentFree | Action::SegmentUnmap);
        if frees && !releasing {
            // The first of a burst: the allocator released its cache.
            b.empty_cache();
        }
        releasing = frees;
        match e.action {
            Action::Alloc => {
                let (addr, size) = (field(e.addr(), "addr")?, field(e.size(), "size")?);
                b.alloc(addr, size, stream).map_err(|m| err(at(), m))?;
                if let Some(site) = &e.site {
                    b.set_site(site);
                }
                stack_of(&mut b, e);
            }
            Action::FreeCompleted => {
                let (addr, size) = (field(e.addr(), "addr")?, field(e.size(), "size")?);
                b.free_or_adopt(&addr, size, stream);
                stack_of(&mut b, e);
            }
            Action::SegmentAlloc
            | Action::SegmentMap
            | Action::SegmentFree
            | Action::SegmentUnmap => {
                let size = i128::from(field(e.size(), "size")?);
                reserved_delta += if frees { -size } else { size };
                deltas.push((b.event_count(), reserved_delta));
            }
            Action::Oom => {
                recorded.ooms += 1;
                oom_deltas.push(reserved_delta);
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
    let traced_allocs = entries.iter().filter(|e| e.action == Action::Alloc).count();
    drop(entries);
    // Blocks allocated when the snapshot was taken that the trace does not
    // hold were allocated before recording began.
    let mine: Vec<&Segment> = segments
        .iter()
        .filter(|s| s.device == device as i64)
        .collect();
    let mut final_reserved = 0i128;
    let mut untraced_live = 0usize;
    for seg in &mine {
        final_reserved += i128::from(seg.total);
        let stream = streams.id(seg.stream);
        for blk in &seg.blocks {
            if blk.allocated && !(blk.address >= 0 && b.is_live(&(blk.address as u64))) {
                b.adopt_live(blk.requested, stream);
                untraced_live += 1;
                if let Some(site) = &blk.site {
                    b.set_site(site);
                }
            }
        }
    }
    let start = (final_reserved - reserved_delta).max(0);
    let bytes = |v: i128| u64::try_from(v.max(0)).unwrap_or(u64::MAX);
    let settings_v = top.field("allocator_settings");
    let mut notes = Vec::new();
    let platform = platform_of(settings_v.as_ref(), hints);
    let settings = settings_v.as_ref().and_then(|s| {
        settings_of(
            s,
            platform.as_ref().map_or(Platform::default(), |p| p.value),
            &mut notes,
        )
    });
    let capacity = recorded
        .oom_events
        .first()
        .zip(oom_deltas.first())
        .map(|(oom, &delta)| {
            let reserved = bytes(start + delta);
            Source {
                value: reserved.saturating_add(oom.device_free),
                source: format!(
                    "snapshot: reserved {} at the recorded out-of-memory error + device_free {}",
                    format_bytes(reserved),
                    format_bytes(oom.device_free)
                ),
            }
        });
    if !deltas.is_empty() || recorded.ooms > 0 {
        // The recording starts with whatever was reserved before it; the
        // snapshot's segments give the reserved total at its end.
        recorded.initial_reserved = bytes(start);
        recorded.reserved = deltas
            .into_iter()
            .map(|(at, d)| (at, bytes(start + d)))
            .collect();
        b.set_recorded(recorded);
    }
    let layout = format!(
        "{}{}",
        if history_layout {
            "torch 2.0 (blocks with history, no address)"
        } else {
            "torch >= 2.1 (blocks with address)"
        },
        if traced_allocs == 0 {
            ", state only (no allocations in the trace)"
        } else {
            ""
        }
    );
    b.set_snapshot(SnapshotInfo {
        layout,
        device,
        device_reason,
        devices,
        platform,
        settings,
        capacity,
        state: recorded_state(&mine),
        state_only: traced_allocs == 0,
        untraced_live_blocks: untraced_live,
        notes,
    });
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
