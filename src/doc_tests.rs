//! The code blocks of `docs/`, compiled and run as doc tests, so every
//! example there stays true. (The README's run as the crate docs.)

/// docs/planner.md
#[doc = include_str!("../docs/planner.md")]
pub struct Planner;

/// docs/record.md
#[doc = include_str!("../docs/record.md")]
pub struct Record;

/// docs/kernels.md
#[doc = include_str!("../docs/kernels.md")]
pub struct Kernels;

/// docs/rng.md
#[doc = include_str!("../docs/rng.md")]
pub struct Rng;

/// docs/ascend.md
#[doc = include_str!("../docs/ascend.md")]
pub struct Ascend;

/// docs/reliability.md
#[doc = include_str!("../docs/reliability.md")]
pub struct Reliability;
