//! A model of the caching allocator that torch_npu (and PyTorch) put
//! between the framework and the device, to compare against a planned
//! arena: benchmarks replay the same step through both, and diagnostics
//! ([`crate::diag`]) replay allocation traces to show fragmentation.
//!
//! Rules follow `torch_npu/csrc/core/npu/NPUCachingAllocator.cpp`
//! (`DeviceCachingAllocator`), or with [`Platform::Cuda`] PyTorch's
//! `c10/cuda/CUDACachingAllocator.cpp`: see [`rules`] for the sizes and
//! where the two differ, and [`CachingAllocator`] for the behaviour and
//! what is left out.
#![deny(unsafe_code, clippy::unwrap_used)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod block;
mod check;
mod config;
mod expand;
mod gc;
mod layout;
mod model;
mod release;
pub mod rules;
mod same_state;
mod stats;
#[cfg(test)]
mod tests;

pub use config::{CachingConfig, GcThreshold, Platform, max_split_size_bytes};
pub use expand::UNLIMITED_DEVICE_BYTES;
pub use layout::{BlockState, BlockView, SegmentView};
pub use model::{BlockId, CachingAllocator, OutOfMemory};
pub use stats::{CachingStats, Stat};
