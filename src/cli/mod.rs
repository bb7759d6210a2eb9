//! Subcommand dispatch. Add a subcommand as a variant of [`Command`] with
//! its `Args` type and `run` function in a module of its own.

use clap::{Parser, Subcommand};

/// Command-line tools of tensor-arena.
#[derive(Debug, Parser)]
#[command(name = "tensor-arena", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {}

/// Runs the chosen subcommand.
pub fn run(cli: Cli) -> Result<(), Box<dyn std::error::Error>> {
    match cli.command {}
}
