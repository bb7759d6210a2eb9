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
//!
//! `unsafe` is denied at the crate root and allowed only in the modules
//! that say why (see `docs/architecture.md`): the device backends, the host
//! views of leases, CPU-feature dispatch and the counting allocator.
#![deny(unsafe_code)]

pub mod arena;
pub mod caching;
// A `GlobalAlloc` wrapper: implementing the trait is `unsafe` by definition.
#[allow(unsafe_code)]
mod counting_alloc;
pub mod device;
pub mod diag;
pub mod dtype;
pub mod error;
pub mod ops;
pub mod plan;
pub mod record;
pub mod shape;
pub mod units;

pub use arena::{
    Arena, ArenaOptions, ArenaStats, DropoutBitMask, DropoutMask, Lease, LeaseOf, LeaseOps, Leases,
    Step, StepScope,
};
pub use counting_alloc::{AllocCounts, CountingAllocator};
pub use device::{Device, DeviceCounters, HostAccessible, HostDevice, Kernels, Region};
pub use dtype::{DType, Element};
pub use error::{Available, Error, ExceedsRecorded, GuardViolation, Result};
pub use half::{bf16, f16};
/// The ndarray version the crate's lease views are built on: use
/// `tensor_arena::ndarray` so the two never disagree.
pub use ndarray;
pub use plan::{
    Buffer, BufferId, BufferSpec, Lifetime, Mode, Phase, Plan, PlannedBuffer, Planner,
    PlannerConfig,
};
pub use record::{Persistent, RecordStep, Recorder, SiteLease, SpecSet};
pub use shape::{MAX_DIMS, Rounding, Shape, ShapeRule};

#[cfg(doctest)]
mod doc_tests;
