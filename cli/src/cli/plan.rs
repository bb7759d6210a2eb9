//! `tensor-arena plan`: place the buffers of a MiniMalloc CSV file.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;
use tensor_arena::plan::minimalloc;
use tensor_arena::plan::placement::{self, Strategy, StrategyKind};

/// Places the buffers of a MiniMalloc CSV file (`id,lower,upper,size`,
/// lifetimes `[lower, upper)`) and reports the height against the lower
/// bound. Exits with 1 when a capacity is given and not met.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The input CSV file.
    #[arg(long, value_name = "FILE")]
    csv: PathBuf,
    /// Bytes the placement must fit in.
    #[arg(long, value_name = "N")]
    capacity: Option<usize>,
    /// greedy (by size), best (of every greedy order), search (branch and
    /// bound) or auto (best, or one sweep above 2,048 buffers; re-ordered
    /// best fit while above the lower bound, each round quadratic within a
    /// time-independent piece and skipped above 2^34 pairs for more sweeps
    /// and a windowed repair; then the search, polishing for at most
    /// 200,000 nodes unless --node-limit, or longer if the capacity is
    /// missed).
    #[arg(long, default_value = "auto", value_parser = parse_strategy)]
    strategy: StrategyKind,
    /// Time limit of the search, in seconds (the search returns the best
    /// placement found by then).
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds, default_value = "10")]
    time_limit: Duration,
    /// Keep lowering the height after the capacity is met (the search
    /// always minimises when no capacity is given).
    #[arg(long)]
    minimize: bool,
    /// Limit on search nodes, for reproducible runs.
    #[arg(long, value_name = "N")]
    node_limit: Option<u64>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Write the CSV with an `offset` column to this file.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Also prove a lower bound stronger than the load bound within this
    /// many seconds (the exact search on subsets and on the busiest times
    /// of the instance; JSON key `stronger_bound`), to read the ratio
    /// against what is possible.
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    bound: Option<Duration>,
}

fn parse_strategy(s: &str) -> Result<StrategyKind, String> {
    s.parse()
}

fn parse_seconds(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds"))?;
    Duration::try_from_secs_f64(secs)
        .map_err(|_| format!("'{s}' is not a usable time limit (non-negative and finite)"))
}

/// What `--json` prints.
#[derive(Debug, Serialize)]
struct Report<'a> {
    file: String,
    buffers: usize,
    lower_bound: usize,
    height: usize,
    ratio: f64,
    capacity: Option<usize>,
    fits: bool,
    valid: bool,
    optimal: bool,
    proven_bound: usize,
    strategy: &'a str,
    greedy: Option<String>,
    rounds: u32,
    search_status: Option<placement::SearchStatus>,
    nodes: u64,
    seconds: f64,
    out: Option<String>,
    /// With `--bound`: a proven lower bound on the optimal height, at
    /// least `lower_bound` (`placement::stronger_bound`).
    stronger_bound: Option<usize>,
}

/// Runs `plan`.
pub fn run(args: PlanArgs) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(&args.csv)
        .map_err(|e| format!("cannot read {}: {e}", args.csv.display()))?;
    let problem = minimalloc::parse(&text).map_err(|e| format!("{}: {e}", args.csv.display()))?;
    let strategy = Strategy {
        kind: args.strategy,
        capacity: args.capacity,
        time_limit: args.time_limit,
        minimize: args.minimize,
        node_limit: args.node_limit,
        // A user's own instance, placed once: worth the search's polish
        // at any size (docs/planner.md, "The default on small instances").
        polish_small: true,
    };
    let start = Instant::now();
    let solution = placement::solve(&problem.buffers, &strategy)?;
    let seconds = start.elapsed().as_secs_f64();
    let valid = placement::validate(&problem.buffers, &solution.offsets, None).is_ok();
    // Never below what the placement's own search proved, never above
    // the placement found.
    let stronger_bound = args.bound.map(|limit| {
        placement::stronger_bound(&problem.buffers, limit)
            .max(solution.proven_bound)
            .min(solution.height)
    });
    if let Some(path) = &args.out {
        std::fs::write(path, problem.to_csv(Some(&solution.offsets)))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    let report = Report {
        file: args.csv.display().to_string(),
        buffers: problem.len(),
        lower_bound: solution.lower_bound,
        height: solution.height,
        ratio: solution.height as f64 / solution.lower_bound.max(1) as f64,
        capacity: solution.capacity,
        fits: solution.fits,
        valid,
        optimal: solution.optimal,
        proven_bound: solution.proven_bound,
        strategy: strategy.kind.name(),
        greedy: solution.greedy.map(|g| g.to_string()),
        rounds: solution.rounds,
        search_status: solution.search_status,
        nodes: solution.nodes,
        seconds,
        out: args.out.as_ref().map(|p| p.display().to_string()),
        stronger_bound,
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_table(&report);
    }
    Ok(if report.valid && report.fits {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn print_table(r: &Report<'_>) {
    println!("file          {}", r.file);
    println!("buffers       {}", r.buffers);
    println!("lower bound   {}", r.lower_bound);
    println!(
        "height        {} ({:.4}x the lower bound)",
        r.height, r.ratio
    );
    match r.capacity {
        Some(c) => println!(
            "capacity      {c} ({})",
            if r.fits { "fits" } else { "does not fit" }
        ),
        None => println!("capacity      none"),
    }
    println!("valid         {}", if r.valid { "yes" } else { "no" });
    let reordered = if r.rounds > 0 {
        let plural = if r.rounds == 1 { "" } else { "s" };
        format!(", {} re-ordering round{plural}", r.rounds)
    } else {
        String::new()
    };
    let how = match (&r.greedy, r.search_status) {
        (Some(greedy), None) => format!("greedy placement ({greedy}){reordered}"),
        (None, None) => format!("re-ordered best fit{reordered}"),
        (Some(greedy), Some(status)) => {
            format!(
                "greedy placement ({greedy}) kept; search {status:?}, {} nodes",
                r.nodes
            )
        }
        (None, Some(status)) => format!("search {status:?}, {} nodes", r.nodes),
    };
    println!("strategy      {} -> {how}", r.strategy);
    if r.optimal {
        println!("optimal       yes");
    } else {
        println!("optimal       not proven (optimum >= {})", r.proven_bound);
    }
    if let Some(b) = r.stronger_bound {
        println!(
            "bound         optimum >= {b} ({:.4}x the lower bound; height {:.4}x it)",
            b as f64 / r.lower_bound.max(1) as f64,
            r.height as f64 / b.max(1) as f64
        );
    }
    println!("seconds       {:.3}", r.seconds);
    if let Some(out) = &r.out {
        println!("written       {out}");
    }
}
