//! Replaying a trace through the caching-allocator model.

use serde::Serialize;

use super::trace::{Trace, TraceEvent};
use crate::caching::{BlockId, CachingAllocator, CachingConfig, CachingStats, OutOfMemory};

/// The allocator's state after one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Sample {
    /// Index of the event (the first of its bucket, when downsampled).
    pub event: usize,
    /// `allocated_bytes`.
    pub allocated: u64,
    /// `reserved_bytes`.
    pub reserved: u64,
    /// Segments as a memory snapshot lists them.
    pub segments: u64,
    /// `inactive_split_bytes`.
    pub inactive_split: u64,
}

/// Where a replay ran out of memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct OomAt {
    /// Index of the alloc event that failed.
    pub event: usize,
    /// Index of the allocation.
    pub allocation: usize,
    /// Bytes it asked for.
    pub requested: u64,
    /// Segment size the allocator tried to obtain.
    pub segment: u64,
    /// Bytes allocated then.
    pub allocated: u64,
    /// Bytes reserved then.
    pub reserved: u64,
    /// The largest cached free block then: every request above it needed
    /// a new segment.
    pub largest_free_block: u64,
}

/// The outcome of replaying a trace through the model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelReplay {
    /// The settings replayed with.
    pub config: CachingConfig,
    /// Counters when the replay ended.
    pub stats: CachingStats,
    /// Events replayed (all of them, unless it ran out of memory).
    pub events: usize,
    /// The first out-of-memory error; the replay stops there, as the
    /// training step would.
    pub oom: Option<OomAt>,
    /// Event at which `reserved_bytes` first reached its peak.
    pub peak_reserved_event: usize,
    /// `allocated_bytes` at that event.
    pub allocated_at_peak_reserved: u64,
    /// Highest segment count, as a snapshot lists segments.
    pub peak_segments: u64,
    /// Segment count when the replay ended.
    pub end_segments: u64,
    /// State after every event (empty unless asked for).
    #[serde(skip)]
    pub timeline: Vec<Sample>,
}

impl ModelReplay {
    /// `1 - allocated / reserved` when reserved memory peaked: the share of
    /// the peak reservation that held no live block.
    pub fn fragmentation(&self) -> f64 {
        let reserved = self.stats.reserved_bytes.peak;
        if reserved == 0 {
            0.0
        } else {
            1.0 - self.allocated_at_peak_reserved as f64 / reserved as f64
        }
    }
}

/// Replays every event of `trace` through a fresh model with `config`,
/// stopping at the first out-of-memory error. With `timeline`, records the
/// state after every event.
///
/// ```
/// use tensor_arena::caching::CachingConfig;
/// use tensor_arena::diag::{replay_model, Trace};
/// let t = Trace::from_csv("t", "alloc,a,6291456\nalloc,b,6291456\nalloc,c,6291456\nfree,b\nalloc,d,7340032\n")?;
/// let r = replay_model(&t, CachingConfig::default(), false);
/// assert!(r.oom.is_none());
/// assert_eq!(r.stats.reserved_bytes.peak, 40 << 20); // d does not fit b's hole
/// # Ok::<(), tensor_arena::Error>(())
/// ```
pub fn replay_model(trace: &Trace, config: CachingConfig, timeline: bool) -> ModelReplay {
    let mut model = CachingAllocator::new(config);
    let mut ids: Vec<Option<BlockId>> = vec![None; trace.allocations().len()];
    let mut samples = Vec::with_capacity(if timeline { trace.events().len() } else { 0 });
    let (mut peak_event, mut at_peak, mut peak_segments, mut max_reserved) = (0, 0, 0, 0);
    let mut oom = None;
    let mut replayed = 0;
    for (at, event) in trace.events().iter().enumerate() {
        if trace.releases_before(at) {
            model.empty_cache();
        }
        match *event {
            TraceEvent::Alloc(i) => {
                let a = &trace.allocations()[i];
                match model.malloc_on(a.size, a.stream) {
                    Ok(id) => ids[i] = Some(id),
                    Err(e) => {
                        oom = Some(oom_at(at, i, &e, &model));
                        break;
                    }
                }
            }
            TraceEvent::Free(i) => {
                if let Some(id) = ids[i].take() {
                    model.free(id);
                }
            }
        }
        replayed = at + 1;
        let s = model.stats();
        if s.reserved_bytes.current > max_reserved {
            max_reserved = s.reserved_bytes.current;
            peak_event = at;
            at_peak = s.allocated_bytes.current;
        }
        let segments = model.segment_count();
        peak_segments = peak_segments.max(segments);
        if timeline {
            samples.push(Sample {
                event: at,
                allocated: s.allocated_bytes.current,
                reserved: s.reserved_bytes.current,
                segments,
                inactive_split: s.inactive_split_bytes.current,
            });
        }
    }
    if oom.is_none() && trace.releases_before(trace.events().len()) {
        // The recording ends with a release (empty_cache() after the
        // last event): the end state is after it.
        model.empty_cache();
    }
    ModelReplay {
        config,
        stats: model.stats(),
        events: replayed,
        oom,
        peak_reserved_event: peak_event,
        allocated_at_peak_reserved: at_peak,
        peak_segments,
        end_segments: model.segment_count(),
        timeline: samples,
    }
}

fn oom_at(event: usize, allocation: usize, e: &OutOfMemory, model: &CachingAllocator) -> OomAt {
    OomAt {
        event,
        allocation,
        requested: e.requested,
        segment: e.segment,
        allocated: e.allocated,
        reserved: e.reserved,
        largest_free_block: model.largest_free_block(),
    }
}

/// Whether the whole trace replays without running out of memory.
pub fn fits(trace: &Trace, config: CachingConfig) -> bool {
    let mut model = CachingAllocator::new(config);
    let mut ids: Vec<Option<BlockId>> = vec![None; trace.allocations().len()];
    for (at, event) in trace.events().iter().enumerate() {
        if trace.releases_before(at) {
            model.empty_cache();
        }
        match *event {
            TraceEvent::Alloc(i) => {
                let a = &trace.allocations()[i];
                match model.malloc_on(a.size, a.stream) {
                    Ok(id) => ids[i] = Some(id),
                    Err(_) => return false,
                }
            }
            TraceEvent::Free(i) => {
                if let Some(id) = ids[i].take() {
                    model.free(id);
                }
            }
        }
    }
    true
}

/// Reduces a timeline to at most `points` samples, keeping each bucket's
/// largest values so that peaks survive.
pub fn downsample(samples: &[Sample], points: usize) -> Vec<Sample> {
    if samples.len() <= points || points == 0 {
        return samples.to_vec();
    }
    let per = samples.len().div_ceil(points);
    samples
        .chunks(per)
        .map(|chunk| {
            chunk.iter().fold(
                Sample {
                    event: chunk[0].event,
                    ..Sample::default()
                },
                |m, s| Sample {
                    event: m.event,
                    allocated: m.allocated.max(s.allocated),
                    reserved: m.reserved.max(s.reserved),
                    segments: m.segments.max(s.segments),
                    inactive_split: m.inactive_split.max(s.inactive_split),
                },
            )
        })
        .collect()
}
