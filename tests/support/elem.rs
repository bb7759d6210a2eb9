//! Element types under test, with their bits for exact comparison.

// Every test binary that uses `support` compiles this; not all use it.
#![allow(dead_code)]

use std::fmt::Debug;

use tensor_arena::ops::Float;
use tensor_arena::{bf16, f16};

/// An element type the kernels run on, built from f32 and compared by bits.
pub trait Elem: Float + Debug {
    /// The value nearest `v`.
    fn from_f32(v: f32) -> Self;
    /// Its bit pattern, widened.
    fn bits(self) -> u32;
}

impl Elem for f32 {
    fn from_f32(v: f32) -> Self {
        v
    }
    fn bits(self) -> u32 {
        self.to_bits()
    }
}

impl Elem for f16 {
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
    fn bits(self) -> u32 {
        u32::from(self.to_bits())
    }
}

impl Elem for bf16 {
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
    fn bits(self) -> u32 {
        u32::from(self.to_bits())
    }
}
