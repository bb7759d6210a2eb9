//! An allocation trace: a sequence of alloc and free events, each
//! allocation with its size, stream and the event indices that bound its
//! life.

use std::collections::HashMap;
use std::hash::Hash;

use serde::Serialize;

use super::explain::SizeClass;
use crate::caching::{CachingConfig, Platform};

/// One allocation of a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Allocation {
    /// Bytes requested.
    pub size: u64,
    /// Stream it was allocated on (dense numbering from 0).
    pub stream: u32,
    /// Index of its alloc event in [`Trace::events`].
    pub alloc_at: usize,
    /// Index of its free event, or `None` if it is still live at the end.
    pub free_at: Option<usize>,
}

/// One event of a trace; the payload is an index into
/// [`Trace::allocations`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum TraceEvent {
    /// The allocation is made.
    Alloc(usize),
    /// The allocation is freed (and its memory reusable).
    Free(usize),
}

/// One training step of a trace: the events `begin..end` (`end` is `None`
/// for a step the trace stops inside).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StepSpan {
    /// Index of its first event in [`Trace::events`].
    pub begin: usize,
    /// Index of the first event after it; `None`: it runs to the end of
    /// the trace without ending.
    pub end: Option<usize>,
}

/// Reserved memory as the recording allocator reported it (from a memory
/// snapshot's segment events), to compare with the model.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Recorded {
    /// Reserved bytes before the first event (segments made before the
    /// recording started).
    pub initial_reserved: u64,
    /// `(event index, reserved bytes)` after each segment event; the event
    /// index is the number of alloc/free events before it.
    pub reserved: Vec<(usize, u64)>,
    /// Out-of-memory entries in the recording.
    pub ooms: usize,
    /// The out-of-memory entries, where the recording carries them.
    pub oom_events: Vec<RecordedOom>,
}

/// An out-of-memory entry of a recording: torch_npu's `oom` trace entry,
/// written when a request failed after releasing the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct RecordedOom {
    /// Number of alloc/free events before it (where in the trace it failed).
    pub event: usize,
    /// The rounded block size that was requested.
    pub size: u64,
    /// Stream of the request (dense numbering, as in [`Allocation::stream`]).
    pub stream: u32,
    /// Device memory the runtime reported free then (`aclrtGetMemInfo`).
    pub device_free: u64,
}

/// One device of a memory snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct DeviceSummary {
    /// Device index.
    pub device: usize,
    /// Segments in the snapshot's state.
    pub segments: usize,
    /// Their bytes.
    pub reserved: u64,
    /// Bytes in their allocated blocks.
    pub allocated: u64,
    /// `alloc` entries in its trace.
    pub allocs: usize,
    /// Segment entries in its trace (`segment_alloc`, `segment_free`,
    /// `segment_map`, `segment_unmap`).
    pub segment_events: usize,
    /// `oom` entries in its trace.
    pub ooms: usize,
}

/// The free and allocated memory of one stream in a recorded state.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct StreamState {
    /// The stream as the snapshot numbers it (a `cudaStream_t` /
    /// `aclrtStream` value; 0 is the default stream).
    pub stream: i64,
    /// Segments of the stream.
    pub segments: usize,
    /// Bytes reserved.
    pub reserved: u64,
    /// Bytes in allocated blocks.
    pub allocated: u64,
    /// Bytes in free (cached) blocks.
    pub free: u64,
    /// Its largest free block.
    pub largest_free_block: u64,
}

/// The allocator's state as the snapshot's `segments` record it, read as
/// recorded (not replayed).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct RecordedState {
    /// Segments.
    pub segments: usize,
    /// Bytes reserved: the segments' `total_size`.
    pub reserved: u64,
    /// Bytes in allocated blocks (`active_*` states), rounded sizes.
    pub allocated: u64,
    /// Bytes those blocks' requests asked for.
    pub requested: u64,
    /// Allocated blocks.
    pub allocated_blocks: usize,
    /// Bytes in free blocks: the cache.
    pub free: u64,
    /// The largest free block.
    pub largest_free_block: u64,
    /// Free blocks by size class (classes that hold any).
    pub free_by_size: Vec<SizeClass>,
    /// Per stream, in order of the stream value.
    pub streams: Vec<StreamState>,
}

/// Where one setting of the diagnosis came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Source<T> {
    /// The value.
    pub value: T,
    /// Where it came from: `"flag --..."`, `"snapshot: ..."` or
    /// `"default: ..."`.
    pub source: String,
}

/// What a memory snapshot says beside its trace: its layout, its devices
/// and which one was read, the platform and allocator settings it was
/// recorded with, and its recorded state.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct SnapshotInfo {
    /// The layout read: `"torch >= 2.1"` (blocks with `address`) or
    /// `"torch 2.0"` (blocks with `history`), with or without a trace.
    pub layout: String,
    /// The device read.
    pub device: usize,
    /// Why that device.
    pub device_reason: String,
    /// Every device with segments or trace entries.
    pub devices: Vec<DeviceSummary>,
    /// The platform the snapshot names, and how it names it.
    pub platform: Option<Source<Platform>>,
    /// The allocator settings of `allocator_settings`, on the snapshot's
    /// platform (or torch_npu's where it names none).
    pub settings: Option<Source<CachingConfig>>,
    /// Device memory available to the allocator when the recorded
    /// out-of-memory error happened: the reserved bytes then plus the
    /// `device_free` the error reported.
    pub capacity: Option<Source<u64>>,
    /// The state recorded in `segments`, for the device read.
    pub state: RecordedState,
    /// Whether the trace holds no allocations: the state is all there is,
    /// and the model's layout of its blocks is a re-packing, not the
    /// recorded one.
    pub state_only: bool,
    /// Live blocks of the state that the trace does not allocate (made
    /// before the recording started); the model places them at its start.
    pub untraced_live_blocks: usize,
    /// What was read but not modelled, or looked odd.
    pub notes: Vec<String>,
}

impl Recorded {
    /// The reserved-bytes curve: `(0, initial_reserved)` then every change.
    pub fn curve(&self) -> Vec<(usize, u64)> {
        std::iter::once((0, self.initial_reserved))
            .chain(self.reserved.iter().copied())
            .collect()
    }
}

/// A sequence of alloc / free events, checked: every free matches a live
/// allocation.
///
/// ```
/// use tensor_arena::diag::{Trace, TraceEvent};
/// let t = Trace::from_csv("demo", "alloc,a,4096\nalloc,b,100\nfree,a\n")?;
/// assert_eq!(t.events().len(), 3);
/// assert_eq!(t.allocations()[0].free_at, Some(2));
/// assert_eq!(t.allocations()[1].free_at, None);
/// assert_eq!(t.events()[2], TraceEvent::Free(0));
/// # Ok::<(), tensor_arena::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Trace {
    pub(super) name: String,
    pub(super) allocations: Vec<Allocation>,
    pub(super) events: Vec<TraceEvent>,
    /// Allocations that existed before the recording started (freed in it,
    /// or listed live in the snapshot's segments).
    pub(super) preexisting: usize,
    pub(super) recorded: Option<Recorded>,
    /// Interned allocation sites (from snapshot frames).
    pub(super) sites: Vec<String>,
    /// Event indices before which the cache was released (`empty_cache`,
    /// or the release before a retry), ascending.
    pub(super) releases: Vec<usize>,
    /// What the snapshot said beside its trace.
    pub(super) snapshot: Option<Box<SnapshotInfo>>,
    /// Site of each allocation, an index into `sites` or [`NO_SITE`].
    pub(super) site_of: Vec<u32>,
    /// Python stack frames (`FILE:LINE in FUNCTION`) of the snapshot's
    /// stacks, by id.
    pub(super) frame_names: Vec<String>,
    /// Distinct stacks, innermost frame first, as ids into `frame_names`.
    pub(super) stacks: Vec<Vec<u32>>,
    /// Stack of each event, an index into `stacks` or [`NO_SITE`]; empty
    /// when no event has one.
    pub(super) event_stack: Vec<u32>,
    /// Steps the trace marks itself (the planned allocator's trace).
    pub(super) steps: Vec<StepSpan>,
}

/// `site_of` entry of an allocation without a recorded site.
const NO_SITE: u32 = u32::MAX;

impl Trace {
    /// Name of the trace (its file name, or a description).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Every allocation, in the order of their alloc events.
    pub fn allocations(&self) -> &[Allocation] {
        &self.allocations
    }

    /// The events in order.
    pub fn events(&self) -> &[TraceEvent] {
        &self.events
    }

    /// How many allocations were made before the recording started; they
    /// are placed at the start of the trace.
    pub fn preexisting(&self) -> usize {
        self.preexisting
    }

    /// What the recording allocator reported, when the trace came from a
    /// memory snapshot with segment events.
    pub fn recorded(&self) -> Option<&Recorded> {
        self.recorded.as_ref()
    }

    /// Where allocation `index` was made (`file:line in function`), when
    /// the trace came from a snapshot that recorded stack frames.
    pub fn site(&self, index: usize) -> Option<&str> {
        let s = *self.site_of.get(index)?;
        self.sites.get(s as usize).map(String::as_str)
    }

    /// Event indices before which the recording released its cache
    /// (a burst of `segment_free` / `segment_unmap` entries: `empty_cache()`
    /// or a release before a retry), ascending; an index equal to the
    /// number of events is a release at the end. Every replay releases
    /// the model's cache there too.
    pub fn releases(&self) -> &[usize] {
        &self.releases
    }

    /// Whether the cache is released before event `at`.
    pub fn releases_before(&self, at: usize) -> bool {
        self.releases.binary_search(&at).is_ok()
    }

    /// What the memory snapshot said beside its trace (snapshots only).
    pub fn snapshot(&self) -> Option<&SnapshotInfo> {
        self.snapshot.as_deref()
    }

    /// The Python frames of the stack recorded with event `at` (an alloc
    /// or a free of a snapshot with stacks), innermost first, as
    /// `FILE:LINE in FUNCTION`.
    pub fn event_frames(&self, at: usize) -> impl Iterator<Item = &str> {
        let stack = self
            .event_stack
            .get(at)
            .and_then(|&s| self.stacks.get(s as usize));
        stack
            .into_iter()
            .flatten()
            .filter_map(|&f| self.frame_names.get(f as usize).map(String::as_str))
    }

    /// Whether any event has recorded stack frames.
    pub fn has_frames(&self) -> bool {
        !self.event_stack.is_empty()
    }

    /// Distinct Python frames of the trace's stacks (`FILE:LINE in
    /// FUNCTION`), by id.
    pub fn frame_names(&self) -> &[String] {
        &self.frame_names
    }

    /// Distinct stacks, as ids into [`Trace::frame_names`], and the stack
    /// of each event (an index into them, `u32::MAX` for none; empty when
    /// no event has one).
    pub fn stacks(&self) -> (&[Vec<u32>], &[u32]) {
        (&self.stacks, &self.event_stack)
    }

    /// The steps the trace marks itself (`step_begin` / `step_end` of the
    /// planned allocator's trace); empty for other traces.
    pub fn marked_steps(&self) -> &[StepSpan] {
        &self.steps
    }

    /// Whether any allocation has a recorded site.
    pub fn has_sites(&self) -> bool {
        !self.sites.is_empty()
    }

    /// Number of distinct streams.
    pub fn streams(&self) -> u32 {
        self.allocations
            .iter()
            .map(|a| a.stream + 1)
            .max()
            .unwrap_or(0)
    }

    /// The largest total of requested bytes live at once.
    pub fn peak_live_bytes(&self) -> u64 {
        let (mut live, mut peak) = (0u64, 0u64);
        for e in &self.events {
            match *e {
                TraceEvent::Alloc(i) => {
                    live += self.allocations[i].size;
                    peak = peak.max(live);
                }
                TraceEvent::Free(i) => live -= self.allocations[i].size,
            }
        }
        peak
    }

    /// The trace in the CSV event format (`alloc,ID,SIZE,STREAM` /
    /// `free,ID`), with allocation indices as ids.
    pub fn to_csv(&self) -> String {
        use std::fmt::Write;
        let mut out = format!("# {}\n", self.name);
        for e in &self.events {
            // Writing to a String cannot fail.
            let _ = match *e {
                TraceEvent::Alloc(i) => {
                    let a = &self.allocations[i];
                    writeln!(out, "alloc,{i},{},{}", a.size, a.stream)
                }
                TraceEvent::Free(i) => writeln!(out, "free,{i}"),
            };
        }
        out
    }
}

/// Builds a [`Trace`] from events keyed by any id (a name, an address).
#[derive(Debug)]
pub struct TraceBuilder<K> {
    name: String,
    live: HashMap<K, usize>,
    allocations: Vec<Allocation>,
    events: Vec<TraceEvent>,
    /// Allocations found to predate the recording, to be put first.
    early: Vec<usize>,
    recorded: Option<Recorded>,
    sites: Vec<String>,
    site_index: HashMap<String, u32>,
    site_of: Vec<u32>,
    releases: Vec<usize>,
    snapshot: Option<Box<SnapshotInfo>>,
    frame_names: Vec<String>,
    stacks: Vec<Vec<u32>>,
    event_stack: Vec<u32>,
    steps: Vec<StepSpan>,
}

impl<K: Hash + Eq + std::fmt::Display> TraceBuilder<K> {
    /// An empty trace called `name`.
    pub fn new(name: &str) -> TraceBuilder<K> {
        TraceBuilder {
            name: name.to_owned(),
            live: HashMap::new(),
            allocations: Vec::new(),
            events: Vec::new(),
            early: Vec::new(),
            recorded: None,
            sites: Vec::new(),
            site_index: HashMap::new(),
            site_of: Vec::new(),
            releases: Vec::new(),
            snapshot: None,
            frame_names: Vec::new(),
            stacks: Vec::new(),
            event_stack: Vec::new(),
            steps: Vec::new(),
        }
    }

    /// Sets the table of frame texts that stacks refer to by id.
    pub fn set_frame_names(&mut self, names: Vec<String>) {
        self.frame_names = names;
    }

    /// Adds a stack (frame ids, innermost first) and returns its id for
    /// [`TraceBuilder::set_event_stack`].
    pub fn add_stack(&mut self, frames: Vec<u32>) -> u32 {
        self.stacks.push(frames);
        self.stacks.len() as u32 - 1
    }

    /// Records that the event made last (an alloc or a free) was made
    /// with stack `stack`.
    pub fn set_event_stack(&mut self, stack: u32) {
        let Some(last) = self.events.len().checked_sub(1) else {
            return;
        };
        if self.event_stack.len() < self.events.len() {
            self.event_stack.resize(self.events.len(), NO_SITE);
        }
        self.event_stack[last] = stack;
    }

    /// A step begins before the next event (a `step_begin` marker). The
    /// caller keeps markers in order (the trace parser checks them).
    pub fn step_begin(&mut self) {
        self.steps.push(StepSpan {
            begin: self.events.len(),
            end: None,
        });
    }

    /// The step begun last ends before the next event.
    pub fn step_end(&mut self) {
        let at = self.events.len();
        if let Some(s) = self.steps.last_mut().filter(|s| s.end.is_none()) {
            s.end = Some(at);
        }
    }

    /// Records that the cache is released (`empty_cache()`) before the
    /// next event.
    pub fn empty_cache(&mut self) {
        let at = self.events.len();
        if self.releases.last() != Some(&at) {
            self.releases.push(at);
        }
    }

    /// Attaches what a memory snapshot said beside its trace.
    pub fn set_snapshot(&mut self, info: SnapshotInfo) {
        self.snapshot = Some(Box::new(info));
    }

    fn push(&mut self, size: u64, stream: u32) -> usize {
        self.allocations.push(Allocation {
            size,
            stream,
            alloc_at: 0,
            free_at: None,
        });
        self.site_of.push(NO_SITE);
        self.allocations.len() - 1
    }

    /// Records where the allocation made last was made.
    pub fn set_site(&mut self, site: &str) {
        let next = self.sites.len() as u32;
        let id = *self.site_index.entry(site.to_owned()).or_insert(next);
        if id == next {
            self.sites.push(site.to_owned());
        }
        if let Some(last) = self.site_of.last_mut() {
            *last = id;
        }
    }

    /// Records an allocation of `size` bytes under `key`. Fails if `key` is
    /// live.
    pub fn alloc(&mut self, key: K, size: u64, stream: u32) -> Result<(), String> {
        if self.live.contains_key(&key) {
            return Err(format!("id {key} is allocated again before it is freed"));
        }
        let i = self.push(size, stream);
        self.live.insert(key, i);
        self.events.push(TraceEvent::Alloc(i));
        Ok(())
    }

    /// Records the free of `key`. Fails if `key` is not live.
    pub fn free(&mut self, key: &K) -> Result<(), String> {
        self.free_checked(key, None, None)
    }

    /// Records the free of `key`, checking the size (and stream) the free
    /// names, where it names them, against the allocation's. Fails if `key`
    /// is not live or a value differs; nothing is recorded then.
    pub fn free_checked(
        &mut self,
        key: &K,
        size: Option<u64>,
        stream: Option<u32>,
    ) -> Result<(), String> {
        let &i = self
            .live
            .get(key)
            .ok_or_else(|| format!("free of id {key}, which is not allocated"))?;
        let a = &self.allocations[i];
        if let Some(size) = size.filter(|&s| s != a.size) {
            return Err(format!(
                "free of id {key} gives size {size}, but it was allocated with size {}",
                a.size
            ));
        }
        if let Some(stream) = stream.filter(|&s| s != a.stream) {
            return Err(format!(
                "free of id {key} gives stream {stream}, but it was allocated on stream {}",
                a.stream
            ));
        }
        self.live.remove(key);
        self.events.push(TraceEvent::Free(i));
        Ok(())
    }

    /// Records the free of `key`; if it is not live, it was allocated
    /// before the recording started, so its allocation is put at the start
    /// of the trace.
    pub fn free_or_adopt(&mut self, key: &K, size: u64, stream: u32) {
        let i = match self.live.remove(key) {
            Some(i) => i,
            None => {
                let i = self.push(size, stream);
                self.early.push(i);
                i
            }
        };
        self.events.push(TraceEvent::Free(i));
    }

    /// Whether `key` is live now.
    pub fn is_live(&self, key: &K) -> bool {
        self.live.contains_key(key)
    }

    /// Adds an allocation made before the recording and never freed in it.
    pub fn adopt_live(&mut self, size: u64, stream: u32) {
        let i = self.push(size, stream);
        self.early.push(i);
    }

    /// Number of events so far (the index the next event will have, not
    /// counting adopted allocations).
    pub fn event_count(&self) -> usize {
        self.events.len()
    }

    /// Attaches what the recording allocator reported.
    pub fn set_recorded(&mut self, recorded: Recorded) {
        self.recorded = Some(recorded);
    }

    /// The finished trace; allocations still live stay live to the end.
    pub fn finish(self) -> Trace {
        let shift = self.early.len();
        let mut events = Vec::with_capacity(shift + self.events.len());
        events.extend(self.early.iter().map(|&i| TraceEvent::Alloc(i)));
        events.extend(self.events);
        // Number allocations in the order of their alloc events, so that
        // adopted ones come first as their events do.
        let mut order = vec![usize::MAX; self.allocations.len()];
        let mut allocations = Vec::with_capacity(self.allocations.len());
        let mut site_of = Vec::with_capacity(self.allocations.len());
        for (at, e) in events.iter_mut().enumerate() {
            match e {
                TraceEvent::Alloc(i) => {
                    order[*i] = allocations.len();
                    allocations.push(Allocation {
                        alloc_at: at,
                        ..self.allocations[*i]
                    });
                    site_of.push(self.site_of[*i]);
                    *i = order[*i];
                }
                TraceEvent::Free(i) => {
                    *i = order[*i];
                    allocations[*i].free_at = Some(at);
                }
            }
        }
        let recorded = self.recorded.map(|mut r| {
            for (at, _) in &mut r.reserved {
                *at += shift;
            }
            for oom in &mut r.oom_events {
                oom.event += shift;
            }
            r
        });
        let event_stack = if self.event_stack.is_empty() {
            Vec::new()
        } else {
            let mut v = vec![NO_SITE; shift];
            v.extend(self.event_stack);
            v.resize(events.len(), NO_SITE);
            v
        };
        let steps = self
            .steps
            .into_iter()
            .map(|s| StepSpan {
                begin: s.begin + shift,
                end: s.end.map(|e| e + shift),
            })
            .collect();
        let sites = if site_of.iter().all(|&s| s == NO_SITE) {
            Vec::new()
        } else {
            self.sites
        };
        Trace {
            name: self.name,
            allocations,
            events,
            preexisting: shift,
            recorded,
            sites,
            site_of,
            releases: self.releases.into_iter().map(|r| r + shift).collect(),
            snapshot: self.snapshot,
            frame_names: self.frame_names,
            stacks: self.stacks,
            event_stack,
            steps,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adopted_allocations_come_first() {
        let mut b = TraceBuilder::<u64>::new("t");
        b.alloc(1, 10, 0).unwrap();
        b.free_or_adopt(&7, 30, 0); // allocated before the recording
        b.free(&1).unwrap();
        b.adopt_live(5, 1);
        let t = b.finish();
        assert_eq!(t.preexisting(), 2);
        let sizes: Vec<u64> = t.allocations().iter().map(|a| a.size).collect();
        assert_eq!(sizes, vec![30, 5, 10]);
        assert_eq!(
            t.events(),
            &[
                TraceEvent::Alloc(0),
                TraceEvent::Alloc(1),
                TraceEvent::Alloc(2),
                TraceEvent::Free(0),
                TraceEvent::Free(2)
            ]
        );
        assert_eq!(t.allocations()[0].free_at, Some(3));
        assert_eq!(t.allocations()[1].free_at, None);
        assert_eq!(t.peak_live_bytes(), 45);
        assert_eq!(t.streams(), 2);
    }

    #[test]
    fn double_alloc_and_unknown_free_are_refused() {
        let mut b = TraceBuilder::<&str>::new("t");
        b.alloc("a", 1, 0).unwrap();
        assert!(b.alloc("a", 1, 0).unwrap_err().contains("id a"));
        assert!(b.free(&"b").unwrap_err().contains("id b"));
    }
}
