//! A planned allocator for unmodified PyTorch training loops.
//!
//! Installed as torch's allocator (`torch.cuda.memory.CUDAPluggableAllocator`,
//! `torch_npu.npu.NPUPluggableAllocator`, or torch's CPU allocator), it
//! records the first steps (every request's size, stream, place in the step
//! and when it was freed), merges them into one sequence of sites by a
//! banded alignment ([`align`]; a step the plan served is folded in by the
//! sites serving gave its requests, see `merge`), plans one slab for that
//! sequence with tensor-arena's planner (the step taken as a circle, cut
//! where the fewest bytes cross it) — on a thread of its own while the next
//! step runs when the steps it plans from made `background_plan_requests`
//! requests or more (1,024 by default), at the step boundary itself when
//! fewer —, and serves every later request
//! whose site a cursor finds at its planned offset, when no live block
//! holds any of the site's bytes (checked on every request, so a program
//! that strays from its recording never gets memory that overlaps a live
//! block). What the plan does not serve (blocks kept past their step, other
//! streams, requests outside steps, misses) gets a region of its own, and
//! persistent misses re-plan at the next boundary.
//!
//! Every region comes from one reserved address range whose pages are
//! mapped as they are needed ([`space`]: CUDA's driver VMM, Ascend's
//! `aclrtMapMem`, host pages under a `PROT_NONE` reservation), so a region
//! costs no device call, the slab grows in place and idle pages are
//! unmapped only when a plan changes. A steady step makes a device call
//! only when a block the plan does not serve needs pages the range has not
//! mapped yet (it maps them); `backing_calls_max_steady_step` counts the
//! most in one steady step (0 on 8 of the allocator suite's 18 loops, 1 to
//! 7 on the others, by `replay_loops` on 2026-12-06: BENCHMARKS.md,
//! "Planned allocator: the 18 suite loops replayed").
//! The figures are whole-run: peak reserved against the live lower bound
//! and against caching-allocator models fed the same requests, and the
//! device calls by kind with their estimated cost ([`cost`]). See
//! docs/allocator.md.
//!
//! - [`PlannedAllocator`]: the policy over one [`Backing`];
//! - [`ffi`]: the C ABI (`tensor_arena_alloc` / `tensor_arena_free` and the
//!   control functions) over one process-wide allocator;
//! - [`backing`]: host pages, CUDA (runtime loaded at run time) and Ascend
//!   (`aclrtMalloc` through the core crate's ACL loading);
//! - [`Fallback`]: the core crate's caching-allocator model made live
//!   (regions without a mapped range);
//! - [`space`]: the mapped range's layout; [`Metered`]: every region and
//!   every backing call counted.
//!
//! ```
//! use tensor_arena_alloc::{Config, PlannedAllocator};
//! let mut a = PlannedAllocator::new(Config::from_json(r#"{"warmup_steps": 1, "record_steps": 1}"#)?)?;
//! for step in 0..4 {
//!     a.step_begin()?;
//!     let act = a.alloc(1 << 20, 0, 0).unwrap(); // an activation
//!     let tmp = a.alloc(4096, 0, 0).unwrap(); // a temporary
//!     a.free(tmp);
//!     a.free(act);
//!     a.step_end()?;
//! }
//! let s = a.stats();
//! assert_eq!((s.plans, s.served_from_plan, s.requests_after_warmup), (1, 4, 4));
//! assert!(s.slab_ratio <= 1.0 + 1e-9);
//! # Ok::<(), tensor_arena_alloc::Error>(())
//! ```
#![deny(unsafe_code)]

mod addr_hash;
pub mod align;
mod allocator;
pub mod backing;
mod comparison;
mod config;
pub mod cost;
pub mod device_stats;
mod error;
mod exact;
mod fallback;
mod kinds;
// The C ABI: C strings and caller buffers cross here.
#[allow(unsafe_code)]
pub mod ffi;
mod live_set;
mod merge;
mod metered;
mod parity;
mod pending;
mod record;
pub mod replay;
pub mod report;
pub mod request_phase;
mod site_plan;
mod slab;
pub mod space;
mod squeaky;
mod stats;
mod step_conflicts;
pub mod trace;

pub use align::{Shape, WINDOW};
pub use allocator::{Phase, PlannedAllocator, caching_config};
pub use backing::Backing;
pub use config::{Backend, Config, Platform};
pub use device_stats::DeviceStats;
pub use error::{Error, Result};
pub use exact::ExactPool;
pub use fallback::{Fallback, FallbackBlock};
pub use live_set::LiveSet;
pub use metered::{BackingCalls, Metered};
pub use record::{FreedAt, Life, Origin, Records, Request, StepRecord};
pub use request_phase::RequestPhase;
pub use site_plan::{GRANULE, GUARD, Site, SitePlan, Unplanned, slot_for};
pub use slab::{PlannedSlab, Refusal, SlabBlock};
pub use stats::{ErrorCounts, Misses, ModelFigures, PlanWindow, Stats};
