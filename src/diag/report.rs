//! One diagnosis of a trace: the model's replay, the arena's plan, the
//! smallest capacities, as a table and as JSON.

use std::fmt;

use serde::Serialize;

use super::arena::{ArenaPlan, plan_trace};
use super::replay::{ModelReplay, Sample, downsample, min_capacity, replay_model};
use super::trace::Trace;
use crate::caching::CachingConfig;
use crate::units::format_bytes;

/// What to compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiagnoseOptions {
    /// The modelled allocator's settings, capacity included.
    pub config: CachingConfig,
    /// Whether to bisect for the model's smallest capacity (one replay per
    /// step, about 10 to 20 replays).
    pub search_min_capacity: bool,
    /// Samples kept in [`Diagnosis::timeline`].
    pub timeline_points: usize,
}

impl Default for DiagnoseOptions {
    fn default() -> DiagnoseOptions {
        DiagnoseOptions {
            config: CachingConfig::default(),
            search_min_capacity: true,
            timeline_points: 1000,
        }
    }
}

/// Facts about the trace itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TraceSummary {
    /// Its name.
    pub name: String,
    /// Alloc and free events.
    pub events: usize,
    /// Allocations.
    pub allocations: usize,
    /// Streams.
    pub streams: u32,
    /// Allocations made before the recording started.
    pub preexisting: usize,
    /// Largest total of requested bytes live at once.
    pub peak_live_requested: u64,
    /// Out-of-memory entries in the recording (snapshots only).
    pub recorded_ooms: Option<usize>,
}

/// The result of [`diagnose`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diagnosis {
    /// The trace.
    pub trace: TraceSummary,
    /// The caching-allocator model's replay at the configured capacity.
    pub model: ModelReplay,
    /// The arena's plan.
    pub arena: ArenaPlan,
    /// Smallest capacity at which the model replays the whole trace, if
    /// searched.
    pub model_min_capacity: Option<u64>,
    /// Smallest capacity at which the arena holds the trace: its slab.
    pub arena_min_capacity: u64,
    /// The model's timeline, downsampled (per-bucket maxima).
    pub timeline: Vec<Sample>,
    /// Reserved bytes as the recording allocator reported them
    /// (`(event, bytes)`), for snapshots with segment events.
    pub recorded_reserved: Option<Vec<(usize, u64)>>,
}

/// Replays `trace` through the model and plans it for the arena.
///
/// ```
/// use tensor_arena::diag::{diagnose, DiagnoseOptions, Trace};
/// let t = Trace::from_csv(
///     "t",
///     "alloc,a,6291456\nalloc,b,6291456\nalloc,c,6291456\nfree,b\nalloc,d,7340032\n",
/// )?;
/// let d = diagnose(&t, &DiagnoseOptions::default());
/// assert_eq!(d.model.stats.reserved_bytes.peak, 40 << 20);
/// assert_eq!(d.model_min_capacity, Some(40 << 20));
/// // b and d never live together: a, c and d need 2 * 6291968 + 7340544.
/// assert_eq!(d.arena_min_capacity, 2 * 6291968 + 7340544);
/// println!("{d}");
/// # Ok::<(), tensor_arena::Error>(())
/// ```
pub fn diagnose(trace: &Trace, options: &DiagnoseOptions) -> Diagnosis {
    let model = replay_model(trace, options.config, true);
    let arena = plan_trace(trace);
    let model_min_capacity = options
        .search_min_capacity
        .then(|| min_capacity(trace, options.config));
    let timeline = downsample(&model.timeline, options.timeline_points);
    let recorded = trace.recorded();
    Diagnosis {
        trace: TraceSummary {
            name: trace.name().to_owned(),
            events: trace.events().len(),
            allocations: trace.allocations().len(),
            streams: trace.streams(),
            preexisting: trace.preexisting(),
            peak_live_requested: trace.peak_live_bytes(),
            recorded_ooms: recorded.map(|r| r.ooms),
        },
        arena_min_capacity: arena.slab_bytes,
        model,
        arena,
        model_min_capacity,
        timeline,
        recorded_reserved: recorded.map(|r| r.curve()),
    }
}

impl fmt::Display for Diagnosis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = &self.trace;
        let (m, s, a) = (&self.model, &self.model.stats, &self.arena);
        writeln!(f, "trace: {}", t.name)?;
        writeln!(
            f,
            "  {} events, {} allocations ({} before the recording), {} stream(s), peak live {} requested",
            t.events,
            t.allocations,
            t.preexisting,
            t.streams,
            format_bytes(t.peak_live_requested)
        )?;
        let c = &m.config;
        let cap = c.capacity.map_or("unlimited".to_owned(), format_bytes);
        let split = c
            .max_split_size
            .map_or("none".to_owned(), |b| format!("{} MiB", b >> 20));
        writeln!(
            f,
            "  model: capacity {cap}, max_split_size {split}, expandable segments {}",
            if c.expandable_segments { "on" } else { "off" }
        )?;
        writeln!(f)?;
        let min_model = self.model_min_capacity.map_or("-".to_owned(), format_bytes);
        let rows: [(&str, String, String); 7] = [
            (
                "peak reserved",
                format_bytes(s.reserved_bytes.peak),
                format!("{} (one slab)", format_bytes(a.slab_bytes)),
            ),
            (
                "peak allocated",
                format_bytes(s.allocated_bytes.peak),
                format!("{} (lower bound)", format_bytes(a.lower_bound)),
            ),
            (
                "fragmentation at peak",
                format!("{:.3}", m.fragmentation()),
                format!("{:.3}", 1.0 - 1.0 / a.footprint_ratio()),
            ),
            (
                "segments: peak / end",
                format!("{} / {}", m.peak_segments, m.end_segments),
                "1 / 1".to_owned(),
            ),
            (
                "inactive split: peak",
                format_bytes(s.inactive_split_bytes.peak),
                "0 B".to_owned(),
            ),
            (
                "alloc retries / OOMs",
                format!("{} / {}", s.num_alloc_retries, s.num_ooms),
                "0 / 0".to_owned(),
            ),
            (
                "smallest capacity, no OOM",
                min_model,
                format_bytes(self.arena_min_capacity),
            ),
        ];
        writeln!(f, "  {:<27} {:<24} planned arena", "", "caching allocator")?;
        for (name, model, arena) in rows {
            writeln!(f, "  {name:<27} {model:<24} {arena}")?;
        }
        writeln!(f)?;
        match &m.oom {
            Some(o) => writeln!(
                f,
                "  at {cap} the caching allocator runs out of memory at event {} of {}: {} requested, {} allocated, {} reserved, largest cached free block {}",
                o.event,
                t.events,
                format_bytes(o.requested),
                format_bytes(o.allocated),
                format_bytes(o.reserved),
                format_bytes(o.largest_free_block)
            )?,
            None => writeln!(
                f,
                "  at {cap} the caching allocator replays all {} events",
                m.events
            )?,
        }
        if let Some(c) = c.capacity {
            let verdict = if a.slab_bytes <= c {
                "fits"
            } else {
                "does not fit"
            };
            writeln!(
                f,
                "  the arena's {} slab {verdict} in {}",
                format_bytes(a.slab_bytes),
                format_bytes(c)
            )?;
        }
        if m.oom.is_none() && s.reserved_bytes.peak > 0 {
            writeln!(
                f,
                "  arena slab / model peak reserved: {:.3}",
                a.slab_bytes as f64 / s.reserved_bytes.peak as f64
            )?;
        }
        Ok(())
    }
}
