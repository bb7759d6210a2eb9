//! A model of the caching allocator that torch_npu (and PyTorch) put
//! between the framework and the device, to compare against a planned
//! arena: benchmarks replay the same step through both, and diagnostics
//! replay allocation traces to show fragmentation.
#![deny(unsafe_code, clippy::unwrap_used)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod model;
pub mod rules;

pub use model::{BlockId, CachingAllocator, CachingConfig, CachingStats, OutOfMemory};
