//! One diagnosis of a trace: the model's replay, the arena's plan, the
//! capacity scan, the explanation at the peak and at out of memory, and
//! optionally the settings sweep, as a report and as JSON.

use std::fmt;

use serde::Serialize;

use super::capacity::{CapacityScan, DEFAULT_WINDOW, capacity_scan};
use super::configure::Configured;
use super::explain::{Explanation, Moment, Request, SizeClass, explain_at};
use super::replay::{ModelReplay, Sample, downsample, replay_model};
use super::sweep::{Recommendation, SweepOptions, SweepRow, sweep_on};
use super::trace::{RecordedState, SnapshotInfo, Trace};
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
    /// Where `config` came from ([`configure`](super::configure)), to
    /// report beside it.
    pub configured: Option<Configured>,
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
            configured: None,
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

/// A recorded point of the reserved-bytes curve and the model's value
/// there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Divergence {
    /// Alloc/free events replayed before the point.
    pub event: usize,
    /// Reserved bytes the recording reports.
    pub recorded: u64,
    /// Reserved bytes in the model.
    pub modelled: u64,
}

/// The model's reserved bytes held to the recorded segment events.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RecordedComparison {
    /// Peak reserved bytes of the recording (segment events).
    pub recorded_peak_reserved: u64,
    /// Peak reserved bytes of the model's replay.
    pub modelled_peak_reserved: u64,
    /// `modelled / recorded`.
    pub ratio: f64,
    /// Reserved bytes before the first event: what the recording started
    /// with, and what the model holds after placing the allocations made
    /// before it.
    pub recorded_initial_reserved: u64,
    /// Recorded points compared.
    pub points: usize,
    /// Points where the two differ.
    pub differing_points: usize,
    /// Reserved bytes when the recording ended (the snapshot's segments).
    pub recorded_end_reserved: u64,
    /// Reserved bytes when the model's replay ended.
    pub modelled_end_reserved: u64,
    /// The first point where they differ.
    pub first_divergence: Option<Divergence>,
    /// The first point where they differ by more than 1% of the recorded
    /// value.
    pub first_divergence_over_1pct: Option<Divergence>,
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
    /// Where the model's settings came from, when resolved by
    /// [`configure`](super::configure).
    pub configuration: Option<Configured>,
    /// What the snapshot said beside its trace (snapshots only).
    pub snapshot: Option<SnapshotInfo>,
    /// The model held to the recorded segment events, where the trace has
    /// them.
    pub recorded_vs_model: Option<RecordedComparison>,
}

/// Compares the model's timeline with the recorded reserved bytes.
fn compare(trace: &Trace, model: &ModelReplay) -> Option<RecordedComparison> {
    let recorded = trace.recorded()?;
    if recorded.reserved.is_empty() {
        return None;
    }
    let curve = recorded.curve();
    let recorded_peak = curve.iter().map(|&(_, v)| v).max().unwrap_or(0);
    // The last recorded value for each event index, against the model
    // after that event (its segment is made while serving it).
    let mut points: Vec<(usize, u64)> = Vec::new();
    for &(at, v) in &recorded.reserved {
        match points.last_mut() {
            Some(last) if last.0 == at => last.1 = v,
            _ => points.push((at, v)),
        }
    }
    let modelled_at = |at: usize| {
        model
            .timeline
            .get(at)
            .or(model.timeline.last())
            .map_or(0, |s| s.reserved)
    };
    let replayed = model.timeline.len();
    let mut differing = 0;
    let (mut first, mut first_1pct) = (None, None);
    let mut compared = 0;
    for &(at, v) in points.iter().filter(|&&(at, _)| at < replayed) {
        compared += 1;
        let m = modelled_at(at);
        if m != v {
            differing += 1;
            let d = Divergence {
                event: at,
                recorded: v,
                modelled: m,
            };
            first.get_or_insert(d);
            if m.abs_diff(v) as f64 > 0.01 * v as f64 {
                first_1pct.get_or_insert(d);
            }
        }
    }
    let modelled_peak = model.stats.reserved_bytes.peak;
    Some(RecordedComparison {
        recorded_peak_reserved: recorded_peak,
        modelled_peak_reserved: modelled_peak,
        ratio: if recorded_peak == 0 {
            0.0
        } else {
            modelled_peak as f64 / recorded_peak as f64
        },
        recorded_initial_reserved: recorded.initial_reserved,
        points: compared,
        differing_points: differing,
        recorded_end_reserved: curve.last().map_or(0, |&(_, v)| v),
        modelled_end_reserved: model.stats.reserved_bytes.current,
        first_divergence: first,
        first_divergence_over_1pct: first_1pct,
    })
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
            let (rows, rec) = sweep_on(trace, s, config.platform, arena.slab_bytes)?;
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
        arena,
        model_min_capacity: scan.as_ref().map(|s| s.min_capacity),
        capacity_scan: scan,
        explain,
        timeline,
        recorded_reserved: recorded.map(|r| r.curve()),
        sweep: sweep_rows,
        recommendation,
        configuration: options.configured.clone(),
        snapshot: trace.snapshot().cloned(),
        recorded_vs_model: compare(trace, &model),
        model,
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
        if let Some(snap) = &self.snapshot {
            write_snapshot(f, snap)?;
        }
        let c = &m.config;
        let cap = c.capacity.map_or("unlimited".to_owned(), format_bytes);
        let conf = c.to_alloc_conf();
        writeln!(
            f,
            "  model: {} caching allocator, capacity {cap}, {}=\"{conf}\"{}",
            match c.platform {
                crate::caching::Platform::Npu => "torch_npu",
                crate::caching::Platform::Cuda => "CUDA",
            },
            c.platform.alloc_conf_var(),
            if conf.is_empty() { " (defaults)" } else { "" }
        )?;
        if let Some(cf) = &self.configuration {
            writeln!(
                f,
                "    platform {}: {}",
                cf.platform.value, cf.platform.source
            )?;
            writeln!(f, "    settings: {}", cf.alloc_conf.source)?;
            writeln!(f, "    capacity: {}", cf.capacity.source)?;
        }
        writeln!(f)?;
        if let Some(snap) = self.snapshot.as_ref().filter(|s| s.state_only) {
            write_state(
                f,
                &snap.state,
                "recorded state (the snapshot holds no trace of allocations)",
            )?;
            writeln!(
                f,
                "  the model's figures below re-pack these live blocks; they are not the recorded layout"
            )?;
            writeln!(f)?;
        }
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
        if let Some(r) = &self.recorded_vs_model {
            writeln!(f)?;
            write_comparison(f, r)?;
        }
        if let Some(snap) = self.snapshot.as_ref().filter(|s| !s.state_only) {
            writeln!(f)?;
            write_state(f, &snap.state, "recorded state when the snapshot was taken")?;
        }
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

fn write_snapshot(f: &mut fmt::Formatter<'_>, s: &SnapshotInfo) -> fmt::Result {
    writeln!(f, "  snapshot: {}", s.layout)?;
    let others: Vec<String> = s
        .devices
        .iter()
        .filter(|d| d.device != s.device)
        .map(|d| {
            format!(
                "{} ({} segment(s), {} reserved, {} allocation(s){})",
                d.device,
                d.segments,
                format_bytes(d.reserved),
                d.allocs,
                if d.ooms > 0 {
                    format!(", {} out-of-memory error(s)", d.ooms)
                } else {
                    String::new()
                }
            )
        })
        .collect();
    writeln!(f, "  device {} ({})", s.device, s.device_reason)?;
    if !others.is_empty() {
        writeln!(
            f,
            "  other devices (read one with --device N): {}",
            others.join("; ")
        )?;
    }
    if s.untraced_live_blocks > 0 && !s.state_only {
        writeln!(
            f,
            "  {} live block(s) of the state predate the trace; the model places them first",
            s.untraced_live_blocks
        )?;
    }
    for n in &s.notes {
        writeln!(f, "  note: {n}")?;
    }
    Ok(())
}

fn write_state(f: &mut fmt::Formatter<'_>, s: &RecordedState, title: &str) -> fmt::Result {
    let b = format_bytes;
    writeln!(f, "  {title}:")?;
    writeln!(
        f,
        "    reserved {} in {} segment(s), allocated {} in {} block(s) ({} requested), free in the cache {}, largest free block {}",
        b(s.reserved),
        s.segments,
        b(s.allocated),
        s.allocated_blocks,
        b(s.requested),
        b(s.free),
        b(s.largest_free_block)
    )?;
    write_free_by_size(f, &s.free_by_size)?;
    if s.streams.len() > 1 {
        for st in &s.streams {
            writeln!(
                f,
                "    stream {:#x}: reserved {} in {} segment(s), allocated {}, free {}, largest free block {}",
                st.stream,
                b(st.reserved),
                st.segments,
                b(st.allocated),
                b(st.free),
                b(st.largest_free_block)
            )?;
        }
    }
    Ok(())
}

/// The `free blocks by size` line, when any class holds blocks.
fn write_free_by_size(f: &mut fmt::Formatter<'_>, classes: &[SizeClass]) -> fmt::Result {
    if classes.is_empty() {
        return Ok(());
    }
    let b = format_bytes;
    let parts: Vec<String> = classes
        .iter()
        .map(|c| {
            let range = match c.max {
                Some(max) => format!("{}-{}", b(c.min), b(max)),
                None => format!(">= {}", b(c.min)),
            };
            format!("{range}: {} in {}", b(c.bytes), c.blocks)
        })
        .collect();
    writeln!(f, "    free blocks by size: {}", parts.join("; "))
}

fn write_comparison(f: &mut fmt::Formatter<'_>, r: &RecordedComparison) -> fmt::Result {
    let b = format_bytes;
    writeln!(
        f,
        "  reserved, recorded vs model: peak {} recorded, {} modelled (ratio {:.4}); at the end {} recorded, {} modelled; the recording started with {}",
        b(r.recorded_peak_reserved),
        b(r.modelled_peak_reserved),
        r.ratio,
        b(r.recorded_end_reserved),
        b(r.modelled_end_reserved),
        b(r.recorded_initial_reserved)
    )?;
    match (&r.first_divergence, &r.first_divergence_over_1pct) {
        (None, _) => writeln!(
            f,
            "    the model matches all {} recorded segment events",
            r.points
        ),
        (Some(d), over) => {
            writeln!(
                f,
                "    {} of {} recorded points differ; the first at event {}: {} recorded, {} modelled",
                r.differing_points,
                r.points,
                d.event,
                b(d.recorded),
                b(d.modelled)
            )?;
            match over {
                Some(o) => writeln!(
                    f,
                    "    first difference over 1%: event {}: {} recorded, {} modelled",
                    o.event,
                    b(o.recorded),
                    b(o.modelled)
                ),
                None => writeln!(f, "    none differs by more than 1%"),
            }
        }
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
            "    safe from {} MiB (every capacity from there to {} MiB survives)",
            scan.safe_capacity >> 20,
            scan.window_top >> 20
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
    write_free_by_size(f, &e.free_by_size)?;
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
        rec.variable, "peak reserv.", "smallest", "safe"
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
        "  headroom above the peak allocated: {} ({} bytes, {:.1}% of the peak allocated, {:.1}% of the peak reserved){}",
        format_bytes(rec.headroom_bytes),
        rec.headroom_bytes,
        100.0 * rec.headroom_fraction,
        100.0 * rec.headroom_of_peak_reserved,
        if rec.below_floor {
            format!(": below the {} floor", format_bytes(rec.headroom_floor))
        } else {
            String::new()
        }
    )?;
    writeln!(f, "  {}", rec.message)
}
