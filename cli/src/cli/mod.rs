//! Subcommand dispatch. Add a subcommand as a variant of [`Command`] with
//! its `Args` type and `run` function in a module of its own.

mod alloc_trace;
mod plan;
mod planned;
mod replay;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Command-line tools of tensor-arena.
#[derive(Debug, Parser)]
#[command(name = "tensor-arena", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Assign offsets to the buffers of a MiniMalloc CSV file.
    Plan(plan::PlanArgs),
    /// Replay an allocation trace through the caching-allocator model and
    /// the planner (fragmentation diagnostics).
    Replay(Box<replay::ReplayArgs>),
}

/// Runs the chosen subcommand.
pub fn run(cli: Cli) -> Result<ExitCode, Box<dyn std::error::Error>> {
    match cli.command {
        Command::Plan(args) => plan::run(args),
        Command::Replay(args) => {
            replay::run(*args)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// What `cli` prints to stdout, as text, for programs that embed the tool:
/// the Python package compiles this module too and returns the output of
/// `replay` to its callers (`tensor_arena.replay`). Only `replay` has
/// such an output; other subcommands are run with [`run`].
// The binary itself prints through `run`; the Python package calls this.
#[allow(dead_code)]
pub fn output(cli: Cli) -> Result<String, Box<dyn std::error::Error>> {
    match cli.command {
        Command::Replay(args) => Ok(replay::output(*args)?),
        Command::Plan(_) => Err("`plan` prints as it runs; call run() for it".into()),
    }
}
