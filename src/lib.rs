#![doc = include_str!("../README.md")]
//!
//! ## Modules
//!
//! [`plan`] (specs, placement, reports; pure computation), [`arena`] (slab,
//! steps, leases, stats), [`record`] (learn the specs from recorded steps,
//! then plan them), [`ops`] (the kernels' host reference, Philox4x32-10),
//! [`device`] (the device traits, the host device, and the Ascend backend in
//! [`device::ascend`]), [`caching`] (a model of the torch_npu caching
//! allocator), [`diag`] (trace replay: the model against the planned arena).

pub mod arena;
pub mod caching;
pub mod device;
pub mod diag;
pub mod dtype;
pub mod error;
pub mod ops;
pub mod plan;
pub mod record;
pub mod shape;
pub mod units;

pub use arena::{Arena, ArenaOptions, ArenaStats, DropoutMask, GuardViolation, Lease, Step};
pub use device::{
    AllocCounts, CountingAllocator, Device, DeviceCounters, HostAccessible, HostDevice, Kernels,
    Region,
};
pub use dtype::{DType, Element};
pub use error::{Available, Error, Result};
pub use half::{bf16, f16};
/// The ndarray version lease views are built on, so users need not pin it.
pub use ndarray;
pub use plan::{
    Buffer, BufferId, BufferSpec, Lifetime, Phase, Plan, PlannedBuffer, Planner, PlannerConfig,
};
pub use record::{Persistent, RecordStep, Recorder, SiteLease, SpecSet};
pub use shape::{MAX_DIMS, Rounding, Shape};

#[cfg(doctest)]
mod doc_tests;
