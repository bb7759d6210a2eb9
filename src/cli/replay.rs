//! `tensor-arena replay`: replays an allocation trace through the
//! caching-allocator model and the planner, and prints (or writes) the
//! diagnosis. All computation lives in [`tensor_arena::diag`].

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use tensor_arena::caching::{CachingConfig, max_split_size_bytes};
use tensor_arena::diag::{
    DiagnoseOptions, ReadOptions, SyntheticConfig, Trace, TraceFormat, diagnose, synthetic,
    timeline_svg,
};
use tensor_arena::units::parse_bytes;
use tensor_arena::{Error, Result};

/// Replay an allocation trace through a model of the torch_npu caching
/// allocator and through the planner; report peak reserved vs allocated,
/// fragmentation, segments, the smallest capacity each needs, and the
/// arena's footprint.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Trace file: a PyTorch / torch_npu memory snapshot pickle
    /// (`_dump_snapshot`), CSV (`alloc,ID,SIZE[,STREAM]` / `free,ID`) or
    /// JSON lines.
    #[arg(required_unless_present = "synthetic", conflicts_with = "synthetic")]
    trace: Option<PathBuf>,
    /// Trace format (default: from the file name, else the content).
    #[arg(long, value_enum)]
    format: Option<Format>,
    /// Device whose trace to read from a snapshot (default: the one with
    /// the most allocations).
    #[arg(long)]
    device: Option<usize>,
    /// Device memory for the model, e.g. `32GiB` (default: unlimited).
    #[arg(long, value_name = "BYTES", value_parser = capacity)]
    capacity: Option<u64>,
    /// `max_split_size_mb` of the modelled allocator (more than 20).
    #[arg(long, value_name = "N")]
    max_split_size_mb: Option<u64>,
    /// Model `expandable_segments:True`.
    #[arg(long)]
    expandable_segments: bool,
    /// Write the timeline as SVG to this file.
    #[arg(long, value_name = "OUT")]
    svg: Option<PathBuf>,
    /// Print the diagnosis as JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Replay a synthetic training trace of this many steps instead of a
    /// file (batch size and sequence length change every step).
    #[arg(long, value_name = "STEPS")]
    synthetic: Option<usize>,
    /// Seed of the synthetic trace.
    #[arg(long, default_value_t = 1, requires = "synthetic")]
    seed: u64,
    /// Also write the trace in the CSV event format to this file.
    #[arg(long, value_name = "OUT")]
    save_trace: Option<PathBuf>,
    /// Skip the bisection for the model's smallest capacity.
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

/// Runs the subcommand.
pub fn run(args: ReplayArgs) -> Result<()> {
    let config = CachingConfig {
        capacity: args.capacity,
        max_split_size: args
            .max_split_size_mb
            .map(max_split_size_bytes)
            .transpose()?,
        expandable_segments: args.expandable_segments,
    };
    config.validate()?;
    let trace = match (&args.trace, args.synthetic) {
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
    if let Some(out) = &args.save_trace {
        write(out, trace.to_csv().as_bytes())?;
    }
    let d = diagnose(
        &trace,
        &DiagnoseOptions {
            config,
            search_min_capacity: !args.no_search,
            ..DiagnoseOptions::default()
        },
    );
    if let Some(out) = &args.svg {
        write(out, timeline_svg(&d, 960, 600)?.as_bytes())?;
    }
    let text = if args.json {
        let mut text = serde_json::to_string_pretty(&d).map_err(|e| Error::InvalidArgument {
            what: "diagnosis",
            value: "JSON".to_owned(),
            reason: e.to_string(),
        })?;
        text.push('\n');
        text
    } else {
        let mut text = d.to_string();
        if let Some(out) = &args.svg {
            text.push_str(&format!("  timeline written to {}\n", out.display()));
        }
        text
    };
    print_out(&text)
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
