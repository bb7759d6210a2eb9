//! `tensor-arena replay`: replays an allocation trace through the
//! caching-allocator model and the planner, and prints (or writes) the
//! diagnosis. All computation lives in [`tensor_arena::diag`].

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use tensor_arena::caching::{CachingConfig, GcThreshold, Platform, max_split_size_bytes};
use tensor_arena::diag::{
    DEFAULT_WINDOW, DiagnoseOptions, Overrides, ReadOptions, SweepOptions, SyntheticConfig, Trace,
    TraceFormat, configure, diagnose, synthetic, timeline_svg,
};
use tensor_arena::units::parse_bytes;
use tensor_arena::{Error, Result};
use tensor_arena_alloc::trace as alloc_trace_format;

use super::alloc_trace::{self, AllocatorTrace};
use super::planned::{self, PolicyArgs, StepArgs};

/// Replay an allocation trace through a model of the torch_npu (or CUDA)
/// caching allocator and through the planner: peak reserved vs allocated,
/// the smallest capacity that survives and the out-of-memory capacities
/// above it, the gap split into hard / soft / stream fragmentation with
/// the sites that pin it, and the arena's footprint; with --sweep, a grid
/// of PYTORCH_NPU_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF settings and a
/// recommendation. For a memory snapshot, the platform, the settings and
/// the capacity come from the snapshot unless flags give them. With
/// --planned, the trace's requests also go through the planned
/// allocator's own policy, step by step, and the report predicts its
/// whole-run peak reserved, served share, re-plans and slab.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Trace file: a PyTorch / torch_npu memory snapshot pickle
    /// (`_dump_snapshot`, or torch_npu's `oom_snapshot_*.pickle`), the
    /// planned allocator's trace (header `event,addr,size,stream`, with
    /// step markers), CSV (`alloc,ID,SIZE[,STREAM]` / `free,ID[,SIZE]`,
    /// header line optional) or JSON lines; any but the allocator's trace
    /// may be gzip-compressed.
    #[arg(required_unless_present = "synthetic", conflicts_with = "synthetic")]
    trace: Option<PathBuf>,
    /// Trace format (default: from the file name, else the content).
    #[arg(long, value_enum)]
    format: Option<Format>,
    /// Device whose trace to read from a snapshot (default: the one with
    /// the recorded out-of-memory error, else the one with the most
    /// allocations and segments).
    #[arg(long)]
    device: Option<usize>,
    /// The caching allocator to model: `npu` (torch_npu) or `cuda`
    /// (PyTorch's CUDACachingAllocator). Default: what the snapshot names
    /// (its allocator_settings or stack frames), else npu.
    #[arg(long, value_name = "PLATFORM", value_parser = platform)]
    platform: Option<Platform>,
    /// Device memory for the model, e.g. `32GiB` (default: for a snapshot
    /// with a recorded out-of-memory error, the reserved bytes then plus
    /// the device_free it reported; else unlimited). With a
    /// garbage-collection threshold it is also the allowed maximum the
    /// threshold is a fraction of.
    #[arg(long, value_name = "BYTES", value_parser = capacity)]
    capacity: Option<u64>,
    /// The modelled allocator's settings as a PYTORCH_NPU_ALLOC_CONF (or
    /// PYTORCH_CUDA_ALLOC_CONF) value, e.g.
    /// `max_split_size_mb:128,garbage_collection_threshold:0.6` (default:
    /// the snapshot's allocator_settings, else the defaults).
    #[arg(long, value_name = "CONF", conflicts_with_all = ["max_split_size_mb", "garbage_collection_threshold", "expandable_segments"])]
    alloc_conf: Option<String>,
    /// `max_split_size_mb` of the modelled allocator (more than 20).
    #[arg(long, value_name = "N")]
    max_split_size_mb: Option<u64>,
    /// `garbage_collection_threshold` of the modelled allocator (between 0
    /// and 1; acts only with --capacity).
    #[arg(long, value_name = "T")]
    garbage_collection_threshold: Option<f64>,
    /// Model `expandable_segments:True`.
    #[arg(long)]
    expandable_segments: bool,
    /// Replay a grid of PYTORCH_NPU_ALLOC_CONF settings and recommend the
    /// one with the smallest safe capacity.
    #[arg(long)]
    sweep: bool,
    /// max_split_size_mb values for --sweep.
    #[arg(long, value_name = "MB,..", value_delimiter = ',', requires = "sweep")]
    sweep_max_split_mb: Option<Vec<u64>>,
    /// garbage_collection_threshold values for --sweep.
    #[arg(long, value_name = "T,..", value_delimiter = ',', requires = "sweep")]
    sweep_gc: Option<Vec<f64>>,
    /// Scan at least this much above the smallest surviving capacity for
    /// capacities that still run out of memory (default 64MiB).
    #[arg(long, value_name = "BYTES", value_parser = capacity)]
    window: Option<u64>,
    /// Allocation sites listed per explanation (snapshots with frames).
    #[arg(long, value_name = "N", default_value_t = 5)]
    top: usize,
    /// Write the timeline as SVG to this file.
    #[arg(long, value_name = "OUT")]
    svg: Option<PathBuf>,
    /// Print the diagnosis as JSON instead of a report.
    #[arg(long)]
    json: bool,
    /// Replay a synthetic training trace of this many steps instead of a
    /// file (batch size and sequence length change every step).
    #[arg(long, value_name = "STEPS")]
    synthetic: Option<usize>,
    /// Seed of the synthetic trace.
    #[arg(long, default_value_t = 1, requires = "synthetic")]
    seed: u64,
    /// Also write the trace to this file in the planned allocator's trace
    /// format (`event,addr,size,stream`; with --planned, with the steps
    /// found).
    #[arg(long, value_name = "OUT")]
    save_trace: Option<PathBuf>,
    /// Also replay the trace through the planned allocator's policy and
    /// predict its figures (section `planned allocator (predicted)`, JSON
    /// key `planned`).
    #[arg(long)]
    planned: bool,
    #[command(flatten)]
    steps: StepArgs,
    #[command(flatten)]
    policy: PolicyArgs,
    /// Skip the capacity scan of the configured setting.
    #[arg(long)]
    no_search: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    Csv,
    Jsonl,
    Snapshot,
}

fn capacity(text: &str) -> std::result::Result<u64, String> {
    parse_bytes(text).ok_or_else(|| {
        format!("'{text}' is not a byte count (a whole number, or a number with B, KiB, MiB, GiB or TiB)")
    })
}

fn platform(text: &str) -> std::result::Result<Platform, String> {
    text.parse().map_err(|e: Error| e.to_string())
}

/// The settings the flags give, if any flag gives one, checked as
/// `platform`'s allocator checks them.
fn flag_settings(args: &ReplayArgs, platform: Platform) -> Result<Option<CachingConfig>> {
    let given = args.alloc_conf.is_some()
        || args.max_split_size_mb.is_some()
        || args.garbage_collection_threshold.is_some()
        || args.expandable_segments;
    if !given {
        return Ok(None);
    }
    let config = match &args.alloc_conf {
        Some(conf) => CachingConfig::from_alloc_conf_on(platform, conf)?,
        None => CachingConfig {
            max_split_size: args
                .max_split_size_mb
                .map(max_split_size_bytes)
                .transpose()?,
            garbage_collection_threshold: args
                .garbage_collection_threshold
                .map(GcThreshold::new)
                .transpose()?,
            expandable_segments: args.expandable_segments,
            ..CachingConfig::default().on(platform)
        },
    };
    Ok(Some(config))
}

/// Runs the subcommand.
pub fn run(args: ReplayArgs) -> Result<()> {
    print_out(&output(args)?)
}

/// What the subcommand prints (the report, or the JSON with `--json`),
/// after writing the files it was asked for.
pub fn output(args: ReplayArgs) -> Result<String> {
    // The planned allocator's trace, detected by its header.
    let allocator: Option<AllocatorTrace> = match (&args.trace, args.format) {
        (Some(path), None | Some(Format::Csv)) if alloc_trace::is_allocator_trace(path) => {
            Some(alloc_trace::read(path)?)
        }
        _ => None,
    };
    let trace = match (&args.trace, args.synthetic) {
        _ if allocator.is_some() => allocator
            .as_ref()
            .map(|a| a.trace.clone())
            .unwrap_or_default(),
        (_, Some(steps)) => synthetic(&SyntheticConfig {
            steps,
            seed: args.seed,
            ..SyntheticConfig::default()
        })?,
        (Some(path), None) => Trace::read(
            path,
            ReadOptions {
                format: args.format.map(|f| match f {
                    Format::Csv => TraceFormat::Csv,
                    Format::Jsonl => TraceFormat::JsonLines,
                    Format::Snapshot => TraceFormat::Snapshot,
                }),
                device: args.device,
            },
        )?,
        (None, None) => {
            return Err(Error::InvalidArgument {
                what: "TRACE",
                value: String::new(),
                reason: "give a trace file or --synthetic STEPS".to_owned(),
            });
        }
    };
    let platform = args
        .platform
        .or_else(|| trace.snapshot()?.platform.as_ref().map(|p| p.value))
        .unwrap_or_default();
    let settings = flag_settings(&args, platform)?;
    let configured = configure(
        &trace,
        &Overrides {
            platform: args.platform,
            settings,
            capacity: args.capacity,
        },
    )?;
    let planned_events = if args.planned {
        Some(planned::planned_events(
            &trace,
            allocator.as_ref(),
            &args.steps,
        )?)
    } else {
        None
    };
    if let Some(out) = &args.save_trace {
        let text = match (&allocator, &planned_events) {
            (Some(a), _) => alloc_trace_format::to_text(&a.events),
            (None, Some(p)) => alloc_trace_format::to_text(&p.events),
            (None, None) => alloc_trace_format::to_text(&alloc_trace::to_allocator_events(
                &trace,
                trace.marked_steps(),
            )),
        };
        write(out, text.as_bytes())?;
    }
    let capacity_checked = configured.config.capacity;
    let window = args.window.unwrap_or(DEFAULT_WINDOW);
    let sweep = args.sweep.then(|| {
        let d = SweepOptions::default();
        SweepOptions {
            max_split_size_mb: args
                .sweep_max_split_mb
                .clone()
                .unwrap_or(d.max_split_size_mb),
            garbage_collection_thresholds: args
                .sweep_gc
                .clone()
                .unwrap_or(d.garbage_collection_thresholds),
            expandable_segments: true,
            window,
        }
    });
    let d = diagnose(
        &trace,
        &DiagnoseOptions {
            config: configured.config,
            configured: Some(configured),
            search_min_capacity: !args.no_search,
            window,
            top_sites: args.top,
            sweep,
            ..DiagnoseOptions::default()
        },
    )?;
    if let Some(out) = &args.svg {
        write(out, timeline_svg(&d, 960, 600)?.as_bytes())?;
    }
    let prediction = match planned_events {
        Some(events) => Some(planned::predict(
            &trace,
            events,
            &args.policy,
            platform,
            capacity_checked,
            &d,
        )?),
        None => None,
    };
    let json_error = |e: serde_json::Error| Error::InvalidArgument {
        what: "diagnosis",
        value: "JSON".to_owned(),
        reason: e.to_string(),
    };
    let text = if args.json {
        let mut value = serde_json::to_value(&d).map_err(json_error)?;
        if let (Some(p), Some(object)) = (&prediction, value.as_object_mut()) {
            object.insert(
                "planned".to_owned(),
                serde_json::to_value(p).map_err(json_error)?,
            );
        }
        let mut text = serde_json::to_string_pretty(&value).map_err(json_error)?;
        text.push('\n');
        text
    } else {
        let mut text = d.to_string();
        if let Some(p) = &prediction {
            text.push_str(&planned::section(p));
        }
        if let Some(out) = &args.svg {
            text.push_str(&format!("  timeline written to {}\n", out.display()));
        }
        text
    };
    Ok(text)
}

/// Prints to stdout; a closed pipe (`| head`) is not an error.
fn print_out(text: &str) -> Result<()> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Error::io("write", "<stdout>", &e))
        }
        _ => Ok(()),
    }
}

fn write(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(|e| Error::io("write", path, &e))
}
