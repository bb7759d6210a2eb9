//! Subcommand dispatch. Add a subcommand as a variant of [`Command`] with
//! its `Args` type and `run` function in a module of its own.

use clap::{Parser, Subcommand};

mod replay;

/// Command-line tools of tensor-arena.
#[derive(Debug, Parser)]
#[command(name = "tensor-arena", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Replay an allocation trace through the caching-allocator model and
    /// the planner (fragmentation diagnostics).
    Replay(replay::ReplayArgs),
}

/// Runs the chosen subcommand.
pub fn run(cli: Cli) -> Result<(), Box<dyn std::error::Error>> {
    match cli.command {
        Command::Replay(args) => replay::run(args)?,
    }
    Ok(())
}
