//! Plan device memory once, lease it every step.
//!
//! Training loops that create differently-shaped temporaries every step
//! fragment a caching allocator's pool until an allocation fails with the
//! device far from full. tensor-arena applies the known cure as a library:
//! declare every buffer once, plan one slab (shapes rounded to 16/32-element
//! multiples, device alignment rules applied, buffers that are never alive
//! together sharing bytes), reserve it with one allocation, then lease views
//! of it inside each step. Nothing is allocated per step.
//!
//! ```
//! use tensor_arena::{Arena, HostDevice, Planner};
//!
//! // Startup: declare, plan, reserve.
//! let mut planner = Planner::new();
//! let fwd = planner.phase("forward")?;
//! let bwd = planner.phase("backward")?;
//! let w = planner.persistent::<f32>("w", &[64, 32])?;
//! let h = planner.span::<f32>("h", &[128, 32], fwd, bwd)?;
//! let g = planner.span::<f32>("g", &[128, 64], bwd, bwd)?;
//! let plan = planner.plan()?;
//! println!("{plan}");
//! let mut arena = Arena::new(HostDevice::new(), plan)?;
//! arena.write(w, &vec![0.01; 64 * 32])?;
//!
//! // Every step: lease, view the actual shape, compute, drop.
//! for batch in [128, 128, 77] {
//!     arena.step(|s| {
//!         let w = s.lease(w)?;
//!         let mut h = s.lease(h)?.with_shape(&[batch, 32])?;
//!         h.as_mut_slice().fill(1.0);
//!         s.enter(bwd)?;
//!         let mut g = s.lease(g)?.with_shape(&[batch, 64])?;
//!         g.as_mut_slice().fill(w.as_slice()[0]);
//!         Ok::<_, tensor_arena::Error>(())
//!     })?;
//! }
//! assert_eq!(arena.stats().device.alloc_calls, 1);
//! assert_eq!(arena.stats().steps, 3);
//! # Ok::<(), tensor_arena::Error>(())
//! ```
//!
//! Modules: [`plan`] (specs, placement, reports; pure computation),
//! [`arena`] (slab, steps, leases, stats), [`record`] (learn the specs from
//! recorded steps, then plan them), [`device`] (the device traits, the host
//! device, and the Ascend backend in [`device::ascend`]: ACL and aclnn
//! loaded at run time). `unsafe` is denied at the crate root and allowed
//! only in the modules that say why: the device backends, the host views
//! of leases, CPU-feature dispatch and the counting allocator.
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

pub use arena::{Arena, ArenaOptions, ArenaStats, DropoutMask, Lease, Step};
pub use counting_alloc::{AllocCounts, CountingAllocator};
pub use device::{Device, DeviceCounters, HostAccessible, HostDevice, Kernels, Region};
pub use dtype::{DType, Element};
pub use error::{Available, Error, GuardViolation, Result};
pub use half::{bf16, f16};
/// The ndarray version the crate's lease views are built on: use
/// `tensor_arena::ndarray` so the two never disagree.
pub use ndarray;
pub use plan::{
    Buffer, BufferId, BufferSpec, Lifetime, Phase, Plan, PlannedBuffer, Planner, PlannerConfig,
};
pub use record::{Persistent, RecordStep, Recorder, SiteLease, SpecSet};
pub use shape::{MAX_DIMS, Rounding, Shape};

/// The README's code blocks, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
