//! Fragmentation diagnostics: replay an allocation trace through the
//! caching-allocator model ([`crate::caching`]) and through the planner,
//! and show why a device ran out of memory while it was not full, and what
//! a planned arena would need instead.
//!
//! - Traces: [`Trace`] from a PyTorch / torch_npu memory snapshot pickle
//!   (feature `pickle`), from the project's CSV or JSON-lines event
//!   formats ([`events`](self::TraceFormat)), or from [`synthetic`].
//! - Replay: [`replay_model`] (the model, event by event), [`plan_trace`]
//!   (the arena), [`capacity_scan`] (every capacity from the least that
//!   could work, so that out-of-memory capacities above the smallest
//!   surviving one are found too), [`explain_at`] (the gap between
//!   reserved and allocated memory split into hard, soft and stream
//!   fragmentation), [`sweep`] (a grid of `PYTORCH_NPU_ALLOC_CONF` settings
//!   and a recommendation; [`sweep_on`] for `PYTORCH_CUDA_ALLOC_CONF`), all
//!   combined by [`diagnose`] into a [`Diagnosis`] that prints as a report
//!   and serialises to JSON.
//! - Configuration: [`configure`] takes the platform (torch_npu or CUDA),
//!   the allocator settings and the capacity from a snapshot
//!   ([`Trace::snapshot`]) unless [`Overrides`] give them, and says where
//!   each came from; the snapshot's recorded state and the model held to
//!   its recorded segment events are part of the [`Diagnosis`].
//! - Steps: [`find_steps`] from a trace's own markers, its stack frames
//!   (after the optimizer's step, [`optimizer_frame`]) or every N
//!   allocations; the command line's `replay --planned` replays them
//!   through the planned allocator.
//! - Plot: [`timeline_svg`] (feature `plot`).
//!
//! ```
//! use tensor_arena::diag::{diagnose, synthetic, DiagnoseOptions, SyntheticConfig};
//! let trace = synthetic(&SyntheticConfig { steps: 20, ..SyntheticConfig::default() })?;
//! let d = diagnose(&trace, &DiagnoseOptions::default())?;
//! assert!(d.arena.slab_bytes < d.model.stats.reserved_bytes.peak);
//! # Ok::<(), tensor_arena::Error>(())
//! ```
#![deny(unsafe_code, clippy::unwrap_used)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod capacity;
mod configure;
mod events;
mod explain;
#[cfg(feature = "pickle")]
mod pickle;
#[cfg(feature = "plot")]
mod plot;
mod replay;
mod report;
#[cfg(feature = "pickle")]
mod snapshot;
mod steps;
mod sweep;
mod synthetic;
mod trace;
mod trace_plan;

pub use capacity::{CAPACITY_STEP, CapacityScan, DEFAULT_WINDOW, capacity_scan, min_capacity};
pub use configure::{Configured, Overrides, configure};
pub use events::{ReadOptions, TraceFormat};
pub use explain::{
    Explanation, Moment, Request, SiteShare, SizeClass, explain_at, request_for, request_on,
};
#[cfg(feature = "plot")]
pub use plot::timeline_svg;
pub use replay::{ModelReplay, OomAt, Sample, downsample, fits, replay_model};
pub use report::{DiagnoseOptions, Diagnosis, TraceSummary, diagnose};
pub use steps::{OPTIMIZER_FRAME, StepRule, find_steps, optimizer_frame};
pub use sweep::{
    HEADROOM_FLOOR_BYTES, HEADROOM_FLOOR_FRACTION, Recommendation, SweepOptions, SweepRow,
    headroom_floor, sweep, sweep_on,
};
pub use synthetic::{SyntheticConfig, synthetic};
pub use trace::{
    Allocation, DeviceSummary, Recorded, RecordedOom, RecordedState, SnapshotInfo, Source,
    StepSpan, StreamState, Trace, TraceBuilder, TraceEvent,
};
pub use trace_plan::{ArenaPlan, MAX_WINDOW, WHOLE_TRACE_LIMIT, intervals, place, plan_trace};
