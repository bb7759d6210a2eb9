//! One diagnosis of a trace: the model's replay, the arena's plan, the
//! capacity scan, the explanation at the peak and at out of memory, and
//! optionally the settings sweep, as a report and as JSON.

use std::fmt;

use serde::Serialize;

use super::capacity::{CapacityScan, DEFAULT_WINDOW, capacity_scan};
use super::explain::{Explanation, Moment, Request, explain_at};
use super::replay::{ModelReplay, Sample, downsample, replay_model};
use super::sweep::{Recommendation, SweepOptions, SweepRow, sweep};
use super::trace::Trace;
use super::trace_plan::{ArenaPlan, plan_trace};
use crate::caching::CachingConfig;
use crate::caching::rules::allocation_size;
use crate::error::Result;
use crate::units::format_bytes;

/// What to compute.
#[derive(Debug, Clone, PartialEq)]
pub struct DiagnoseOptions {
    /// The modelled allocator's settings, capacity included.
    pub config: CachingConfig,
    /// Whether to scan capacities for the configured setting.
    pub search_min_capacity: bool,
    /// Bytes above the smallest surviving capacity to scan, at least.
    pub window: u64,
    /// Samples kept in [`Diagnosis::timeline`].
    pub timeline_points: usize,
    /// Allocation sites listed per explanation.
    pub top_sites: usize,
    /// The settings sweep to run, if any.
    pub sweep: Option<SweepOptions>,
}

impl Default for DiagnoseOptions {
    fn default() -> DiagnoseOptions {
        DiagnoseOptions {
            config: CachingConfig::default(),
            search_min_capacity: true,
            window: DEFAULT_WINDOW,
            timeline_points: 1000,
            top_sites: 5,
            sweep: None,
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
    /// Whether allocation sites were recorded (snapshot frames).
    pub sites: bool,
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
    /// scanned (`capacity_scan.min_capacity`).
    pub model_min_capacity: Option<u64>,
    /// The capacity scan of the configured setting, if run.
    pub capacity_scan: Option<CapacityScan>,
    /// Smallest capacity at which the arena holds the trace: its slab.
    pub arena_min_capacity: u64,
    /// The state explained at the peak of reserved memory, at the model's
    /// out-of-memory error and at each recorded one.
    pub explain: Vec<Explanation>,
    /// The model's timeline, downsampled (per-bucket maxima).
    pub timeline: Vec<Sample>,
    /// Reserved bytes as the recording allocator reported them
    /// (`(event, bytes)`), for snapshots with segment events.
    pub recorded_reserved: Option<Vec<(usize, u64)>>,
    /// One row per swept setting, with `--sweep`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sweep: Option<Vec<SweepRow>>,
    /// The setting the sweep recommends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recommendation: Option<Recommendation>,
}

/// Replays `trace` through the model and plans it for the arena; scans
/// capacities, explains the peak and any out-of-memory error, and runs the
/// sweep if asked. Fails only on sweep settings torch_npu would refuse.
///
/// ```
/// use tensor_arena::diag::{diagnose, DiagnoseOptions, Trace};
/// let t = Trace::from_csv(
///     "t",
///     "alloc,a,6291456\nalloc,b,6291456\nalloc,c,6291456\nfree,b\nalloc,d,7340032\n",
/// )?;
/// let d = diagnose(&t, &DiagnoseOptions::default())?;
/// assert_eq!(d.model.stats.reserved_bytes.peak, 40 << 20);
/// assert_eq!(d.model_min_capacity, Some(40 << 20));
/// // b and d never live together: a, c and d need 2 * 6291968 + 7340544.
/// assert_eq!(d.arena_min_capacity, 2 * 6291968 + 7340544);
/// println!("{d}");
/// # Ok::<(), tensor_arena::Error>(())
/// ```
pub fn diagnose(trace: &Trace, options: &DiagnoseOptions) -> Result<Diagnosis> {
    let config = options.config;
    let model = replay_model(trace, config, true);
    let arena = plan_trace(trace);
    let scan = options
        .search_min_capacity
        .then(|| capacity_scan(trace, config, options.window));
    let timeline = downsample(&model.timeline, options.timeline_points);
    let recorded = trace.recorded();
    let top = options.top_sites;
    let mut explain = Vec::new();
    if model.stats.reserved_bytes.peak > 0 {
        explain.push(explain_at(
            trace,
            config,
            Moment::PeakReserved,
            model.peak_reserved_event,
            None,
            top,
        ));
    }
    if let Some(o) = &model.oom {
        explain.push(explain_at(
            trace,
            config,
            Moment::OutOfMemory,
            o.event,
            None,
            top,
        ));
    }
    for r in recorded.map_or(&[][..], |r| &r.oom_events) {
        let request = Request {
            requested: r.size,
            size: r.size,
            segment: allocation_size(r.size),
            stream: r.stream,
        };
        let before_model_oom = model.oom.as_ref().is_none_or(|o| r.event <= o.event);
        if before_model_oom {
            explain.push(explain_at(
                trace,
                config,
                Moment::RecordedOutOfMemory,
                r.event,
                Some(request),
                top,
            ));
        }
    }
    let (sweep_rows, recommendation) = match &options.sweep {
        Some(s) => {
            let (rows, rec) = sweep(trace, s, arena.slab_bytes)?;
            (Some(rows), Some(rec))
        }
        None => (None, None),
    };
    Ok(Diagnosis {
        trace: TraceSummary {
            name: trace.name().to_owned(),
            events: trace.events().len(),
            allocations: trace.allocations().len(),
            streams: trace.streams(),
            preexisting: trace.preexisting(),
            peak_live_requested: trace.peak_live_bytes(),
            recorded_ooms: recorded.map(|r| r.ooms),
            sites: trace.has_sites(),
        },
        arena_min_capacity: arena.slab_bytes,
        model,
        arena,
        model_min_capacity: scan.as_ref().map(|s| s.min_capacity),
        capacity_scan: scan,
        explain,
        timeline,
        recorded_reserved: recorded.map(|r| r.curve()),
        sweep: sweep_rows,
        recommendation,
    })
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
        let conf = c.to_alloc_conf();
        writeln!(
            f,
            "  model: capacity {cap}, PYTORCH_NPU_ALLOC_CONF=\"{conf}\"{}",
            if conf.is_empty() { " (defaults)" } else { "" }
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
        writeln!(
            f,
            "  arena slab / lower bound: {:.4} ({} window(s), {} long-lived buffer(s))",
            a.footprint_ratio(),
            a.windows,
            a.long_lived
        )?;
        if let Some(scan) = &self.capacity_scan {
            writeln!(f)?;
            write_scan(f, scan)?;
        }
        for e in &self.explain {
            writeln!(f)?;
            write_explanation(f, e)?;
        }
        if let (Some(rows), Some(rec)) = (&self.sweep, &self.recommendation) {
            writeln!(f)?;
            write_sweep(f, rows, rec)?;
        }
        Ok(())
    }
}

fn list(caps: &[u64]) -> String {
    caps.iter()
        .map(|&c| format!("{}", c >> 20))
        .collect::<Vec<_>>()
        .join(", ")
}

fn write_scan(f: &mut fmt::Formatter<'_>, scan: &CapacityScan) -> fmt::Result {
    writeln!(
        f,
        "  capacity scan ({} to {} in 2 MiB steps, {} replays):",
        format_bytes(scan.lower_limit),
        format_bytes(scan.window_top),
        scan.replays
    )?;
    writeln!(
        f,
        "    smallest capacity that survives: {}",
        format_bytes(scan.min_capacity)
    )?;
    if scan.oom_above_min.is_empty() {
        writeln!(
            f,
            "    every capacity above it up to {} survives",
            format_bytes(scan.window_top)
        )
    } else {
        writeln!(
            f,
            "    out of memory again above it at (MiB): {}",
            list(&scan.oom_above_min)
        )?;
        writeln!(
            f,
            "    safe from {} (every capacity from there to {} survives)",
            format_bytes(scan.safe_capacity),
            format_bytes(scan.window_top)
        )
    }
}

fn write_explanation(f: &mut fmt::Formatter<'_>, e: &Explanation) -> fmt::Result {
    let title = match e.moment {
        Moment::PeakReserved => "at the peak of reserved memory",
        Moment::OutOfMemory => "at the model's out-of-memory error",
        Moment::RecordedOutOfMemory => "at the recorded out-of-memory error",
    };
    let b = format_bytes;
    writeln!(f, "  {title} (event {}):", e.event)?;
    writeln!(
        f,
        "    reserved {}, allocated {}, free in the cache {}",
        b(e.reserved),
        b(e.allocated),
        b(e.gap)
    )?;
    writeln!(
        f,
        "    hard fragmentation {}, soft {}, stream {}",
        b(e.hard_fragmentation),
        b(e.soft_fragmentation),
        b(e.stream_fragmentation)
    )?;
    writeln!(
        f,
        "    largest free block {} (on the request's stream {})",
        b(e.largest_free_block),
        b(e.largest_free_block_on_stream)
    )?;
    if !e.free_by_size.is_empty() {
        let classes: Vec<String> = e
            .free_by_size
            .iter()
            .map(|c| {
                let range = match c.max {
                    Some(max) => format!("{}-{}", b(c.min), b(max)),
                    None => format!(">= {}", b(c.min)),
                };
                format!("{range}: {} in {}", b(c.bytes), c.blocks)
            })
            .collect();
        writeln!(f, "    free blocks by size: {}", classes.join("; "))?;
    }
    for s in &e.sites {
        writeln!(
            f,
            "    pins {} in {} segment(s) with {} live block(s): {}",
            b(s.stranded_bytes),
            s.segments,
            s.blocks,
            s.site
        )?;
    }
    writeln!(f, "    {}", e.summary)
}

fn write_sweep(f: &mut fmt::Formatter<'_>, rows: &[SweepRow], rec: &Recommendation) -> fmt::Result {
    writeln!(
        f,
        "  {:<56} {:>12} {:>12} {:>12}  out of memory above the smallest (MiB)",
        "PYTORCH_NPU_ALLOC_CONF", "peak reserv.", "smallest", "safe"
    )?;
    for r in rows {
        let conf = if r.conf.is_empty() {
            "(defaults)"
        } else {
            &r.conf
        };
        writeln!(
            f,
            "  {:<56} {:>12} {:>12} {:>12}  {}",
            conf,
            format_bytes(r.peak_reserved),
            format_bytes(r.min_capacity),
            format_bytes(r.safe_capacity),
            if r.oom_above_min.is_empty() {
                "-".to_owned()
            } else {
                list(&r.oom_above_min)
            }
        )?;
    }
    writeln!(f)?;
    writeln!(f, "  recommended: {}", rec.export)?;
    writeln!(
        f,
        "  headroom above the peak allocated: {} ({:.1}%)",
        format_bytes(rec.headroom_bytes),
        100.0 * rec.headroom_fraction
    )?;
    writeln!(f, "  {}", rec.message)
}
