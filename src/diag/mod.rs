//! Fragmentation diagnostics: replay an allocation trace through the
//! caching-allocator model ([`crate::caching`]) and through the planner,
//! and show why a device ran out of memory while it was not full, and what
//! a planned arena would need instead.
//!
//! - Traces: [`Trace`] from a PyTorch / torch_npu memory snapshot pickle
//!   (feature `pickle`), from the project's CSV or JSON-lines event
//!   formats ([`events`](self::TraceFormat)), or from [`synthetic`].
//! - Replay: [`replay_model`] (the model, event by event), [`plan_trace`]
//!   (the arena), [`min_capacity`] (bisection for the smallest device that
//!   holds the trace), all combined by [`diagnose`] into a [`Diagnosis`]
//!   that prints as a table and serialises to JSON.
//! - Plot: [`timeline_svg`] (feature `plot`).
//!
//! ```
//! use tensor_arena::diag::{diagnose, synthetic, DiagnoseOptions, SyntheticConfig};
//! let trace = synthetic(&SyntheticConfig { steps: 20, ..SyntheticConfig::default() })?;
//! let d = diagnose(&trace, &DiagnoseOptions::default());
//! assert!(d.arena.slab_bytes < d.model.stats.reserved_bytes.peak);
//! # Ok::<(), tensor_arena::Error>(())
//! ```
#![deny(unsafe_code, clippy::unwrap_used)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod arena;
mod events;
#[cfg(feature = "plot")]
mod plot;
mod replay;
mod report;
#[cfg(feature = "pickle")]
mod snapshot;
mod synthetic;
mod trace;

pub use arena::{ArenaPlan, WHOLE_TRACE_LIMIT, intervals, place, plan_trace, slot_size};
pub use events::{ReadOptions, TraceFormat};
#[cfg(feature = "plot")]
pub use plot::timeline_svg;
pub use replay::{
    CAPACITY_STEP, ModelReplay, OomAt, Sample, downsample, fits, min_capacity, replay_model,
};
pub use report::{DiagnoseOptions, Diagnosis, TraceSummary, diagnose};
pub use synthetic::{SyntheticConfig, synthetic};
pub use trace::{Allocation, Recorded, Trace, TraceBuilder, TraceEvent};
