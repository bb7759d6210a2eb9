//! The crate's one error type.

use thiserror::Error;

/// What went wrong in the planned allocator's control path. The serving
/// path (`alloc` / `free`) never returns errors: it counts them
/// ([`crate::ErrorCounts`]), logs the first of each kind, and answers NULL
/// where torch expects NULL for out of memory.
#[derive(Debug, Error)]
pub enum Error {
    /// A configuration string that is not valid JSON of the accepted keys.
    #[error("allocator configuration {config:?} is not valid: {reason}")]
    Config {
        /// The configuration as given.
        config: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `configure` after the allocator has served a request.
    #[error(
        "the allocator has already served {requests} requests: configure it before the first allocation (or call reset first)"
    )]
    AlreadyStarted {
        /// Requests served so far.
        requests: u64,
    },
    /// `step_begin` inside a step, or `step_end` outside one.
    #[error("{call} called {state}: steps do not nest (step {step})")]
    StepOrder {
        /// `step_begin` or `step_end`.
        call: &'static str,
        /// `inside step N` or `outside any step`.
        state: &'static str,
        /// Steps begun so far.
        step: u64,
    },
    /// The backing memory could not be opened or reserved.
    #[error("backing '{backend}': {reason}")]
    Backing {
        /// `cpu`, `cuda` or `npu`.
        backend: String,
        /// What failed, with what was searched where it applies.
        reason: String,
    },
    /// A trace file line that is not in the trace format
    /// ([`crate::trace`]), or steps out of order.
    #[error("trace line {line}: {reason}")]
    Trace {
        /// The 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// `set_memory_fraction` with a fraction or device it cannot apply.
    #[error("memory fraction {fraction} for device {device}: {reason}")]
    MemoryFraction {
        /// The fraction asked for.
        fraction: f64,
        /// The device named.
        device: i32,
        /// Why it cannot apply.
        reason: String,
    },
    /// A request phase code other than 0 (train) and 1 (eval)
    /// (`tensor_arena_set_phase`, `tensor_arena_alloc_phase`, a trace's
    /// `phase` line).
    #[error("request phase {value}: a phase is 0 (train) or 1 (eval)")]
    RequestPhase {
        /// The value given.
        value: i64,
    },
    /// `reset` while blocks the allocator gave are still live: refused,
    /// nothing released (their memory is still in use).
    #[error(
        "reset refused: {blocks} blocks ({bytes} bytes) the allocator gave are still live; free them first (nothing was released)"
    )]
    LiveBlocks {
        /// Live blocks.
        blocks: usize,
        /// Their bytes asked for.
        bytes: u64,
    },
    /// An error of the tensor-arena core (the host or Ascend device).
    #[error(transparent)]
    Core(#[from] tensor_arena::Error),
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
