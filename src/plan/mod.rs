//! Planning: declared buffer specs in, one slab with every offset out.
//!
//! Pure computation: no device, no `unsafe`, no panics on user input.
#![deny(unsafe_code, clippy::unwrap_used)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod families;
pub mod layout;
pub mod minimalloc;
pub mod placement;
mod planned;
mod planner;
mod report;
mod spec;

pub use planned::{LifetimeKind, PlacementSummary, Plan, PlannedBuffer, PlannedMode};
pub use planner::{DEFAULT_MODE, DEFAULT_OFFSET_ALIGN, MIN_OFFSET_ALIGN, Planner, PlannerConfig};
pub(crate) use planner::{new_mode_index, next_owner_id};
pub use report::{BufferReport, ModeReport, PlanReport};
pub use spec::{Buffer, BufferId, BufferSpec, Lifetime, Mode, Phase};
