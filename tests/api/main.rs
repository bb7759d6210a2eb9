//! Integration tests through the public API, linked as one binary (one link
//! instead of one per file). Run one part with a filter:
//!
//! ```sh
//! cargo test --release --test api ops::
//! ```
//!
//! Test files that install a `#[global_allocator]` (they count the
//! process's allocations) or set process environment variables keep their
//! own binaries: `zero_alloc`, `zero_alloc_threads`, `record_zero_alloc`,
//! `mask_and_train`, `mask_and_train_record`, `ascend_env`.

#[path = "../support/mod.rs"]
mod support;

// The main example's modules, driven on the simulated Ascend runtime by
// `ascend_faults`. They name each other through `crate::`, so they sit at
// the crate root.
#[path = "../../examples/mask_and_train/ascend.rs"]
#[allow(dead_code)]
mod ascend;
#[path = "../../examples/mask_and_train/backend.rs"]
#[allow(dead_code)]
mod backend;
#[path = "../../examples/mask_and_train/data.rs"]
mod data;
#[path = "../../examples/mask_and_train/model.rs"]
#[allow(dead_code)]
mod model;
#[path = "../../examples/mask_and_train/train.rs"]
#[allow(dead_code)]
mod train;

mod architecture;
mod arena;
mod ascend_faults;
mod ascend_sim;
mod bit_masks;
mod checked;
mod families;
mod fuzz_specs;
mod large_instances;
mod minimalloc;
mod modes;
mod ops;
mod placement;
mod properties;
mod record;
mod record_properties;
mod record_specs;
mod scope;
mod solve_large;
mod u8_masks;
