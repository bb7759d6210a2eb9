//! The `tensor-arena` command line, compiled from the binary's own sources
//! (`cli/src/cli/`, the tensor-arena-cli package), so the console script and `tensor_arena.replay` run the
//! same code as the Rust binary.

use std::process::ExitCode;

use clap::Parser;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

#[path = "../../cli/src/cli/mod.rs"]
#[allow(dead_code, missing_docs)]
mod cli;

use crate::errors::{ArenaError, to_py};

/// A command's error, made `Send` to leave the GIL-free section: the
/// Rust error itself when it is one, else its message.
trait Portable {
    fn to_string_and_kind(self) -> (String, Option<tensor_arena::Error>);
}

impl Portable for Box<dyn std::error::Error> {
    fn to_string_and_kind(self) -> (String, Option<tensor_arena::Error>) {
        let message = self.to_string();
        (
            message,
            self.downcast::<tensor_arena::Error>().ok().map(|e| *e),
        )
    }
}

/// What `tensor-arena ARGS...` prints (`argv[0]` is the program name):
/// for `replay`, the report, or the JSON with `--json`.
#[pyfunction]
pub fn cli_output(py: Python<'_>, argv: Vec<String>) -> PyResult<String> {
    let cli = cli::Cli::try_parse_from(&argv)
        .map_err(|e| PyValueError::new_err(e.render().to_string()))?;
    py.detach(|| cli::output(cli).map_err(|e| Box::new(e.to_string_and_kind())))
        .map_err(|failed| match *failed {
            (_, Some(e)) => to_py(e),
            (message, None) => ArenaError::new_err(message),
        })
}

/// Runs `tensor-arena ARGS...` as the binary does, printing to the
/// process's stdout and stderr, and returns the exit status.
#[pyfunction]
pub fn main(py: Python<'_>, argv: Vec<String>) -> PyResult<i32> {
    let cli = match cli::Cli::try_parse_from(&argv) {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version land here too, with status 0.
            let _ = e.print();
            return Ok(e.exit_code());
        }
    };
    let code = py.detach(|| match cli::run(cli) {
        Ok(code) if code == ExitCode::SUCCESS => 0,
        Ok(code) if code == ExitCode::FAILURE => 1,
        Ok(_) => 2,
        Err(e) => {
            eprintln!("error: {e}");
            2
        }
    });
    Ok(code)
}
