//! In-place kernels: Philox bernoulli fill, masked scale, multiply, and
//! fused dropout. This module is the reference every device backend is
//! checked against bit for bit.
//!
//! Semantics (for `f32`; `f16` and `bf16` are widened to f32, computed, and
//! rounded back to nearest even):
//!
//! - `bernoulli(p)`: element = 1 where the stream's uniform `u < p`, else 0,
//!   with `u = (word >> 8) * 2^-24` (`docs/rng.md#the-stream-layout`) and `p` an `f32` in `[0, 1]`;
//! - `apply_mask(mask, scale)`: `x = mask != 0 ? x * scale : 0`;
//! - `mul(y)`: `x = x * y`; `mul_scalar(s)`: `x = x * s`;
//! - `dropout(p)`: with `q = 1 - p` and `scale = 1 / q` (both in f32),
//!   `x = u < q ? x * scale : 0` — exactly `bernoulli(q)` into a mask
//!   followed by `apply_mask(mask, scale)`, in one pass and with no mask
//!   buffer. The backward pass is the same kernel on the gradient with the
//!   same `(seed, offset)`, which regenerates the mask.
//!
//! Element `i` of a call reads stream element `offset + i` only, so results
//! are identical however the work is split into chunks or threads.
//!
//! ```
//! use tensor_arena::ops::{self, RngState};
//! let mut mask = vec![0f32; 16];
//! ops::bernoulli(&mut mask, 0.5, RngState::new(1234))?;
//! assert_eq!(mask, [1., 0., 1., 0., 0., 1., 0., 1., 1., 0., 0., 0., 0., 1., 1., 0.]);
//! # Ok::<(), tensor_arena::Error>(())
//! ```
#![deny(unsafe_code, clippy::unwrap_used)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

// Calls into code compiled for AVX2 after detecting the CPU feature.
#[allow(unsafe_code)]
pub(crate) mod cpu_dispatch;
mod elementwise;
mod float;
mod gemm;
pub mod philox;
#[cfg(target_arch = "x86_64")]
pub(crate) mod philox_avx2;
mod random;
mod rng;

pub use float::Float;
pub use gemm::gemm;
pub use rng::RngState;

use crate::error::{Error, Result};

/// One in-place kernel call, described independently of any device, so
/// every backend receives the same request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kernel {
    /// Fill with 1 where `u < p`, else 0, from stream elements starting at
    /// `rng.offset`.
    Bernoulli {
        /// Probability of a one.
        p: f32,
        /// Stream position of element 0.
        rng: RngState,
    },
    /// `x = mask != 0 ? x * scale : 0`; the mask is the second operand.
    ApplyMask {
        /// Factor for kept elements.
        scale: f32,
    },
    /// `x = x * y`; `y` is the second operand.
    Mul,
    /// `x = x * s`.
    MulScalar {
        /// The factor.
        s: f32,
    },
    /// Fused dropout (forward, or backward on the gradient with the same
    /// `rng`): keep where `u < 1 - p`, scaled by `1 / (1 - p)`.
    Dropout {
        /// Probability of dropping an element.
        p: f32,
        /// Stream position of element 0.
        rng: RngState,
    },
}

impl Kernel {
    /// The op's name, as users call it.
    pub fn name(&self) -> &'static str {
        match self {
            Kernel::Bernoulli { .. } => "bernoulli_",
            Kernel::ApplyMask { .. } => "apply_mask_",
            Kernel::Mul => "mul_",
            Kernel::MulScalar { .. } => "mul_scalar_",
            Kernel::Dropout { .. } => "dropout_",
        }
    }

    /// Whether the kernel reads a second operand of the same length.
    pub fn has_operand(&self) -> bool {
        matches!(self, Kernel::ApplyMask { .. } | Kernel::Mul)
    }

    /// Checks the kernel's parameters (probabilities in `[0, 1]`, not NaN).
    pub fn validate(&self) -> Result<()> {
        match *self {
            Kernel::Bernoulli { p, .. } | Kernel::Dropout { p, .. }
                if !(0.0..=1.0).contains(&p) =>
            {
                Err(Error::InvalidProbability { op: self.name(), p })
            }
            _ => Ok(()),
        }
    }

    /// Runs the kernel on `x` (and `other`, for two-operand kernels), where
    /// `x[0]` is element `pos` of the whole call: a chunk of a larger call
    /// passes its position so random kernels read the right stream
    /// elements. Parameters must have been validated; `other` must be as
    /// long as `x` (extra elements are ignored, missing ones leave `x`
    /// unchanged there).
    #[inline(always)]
    pub fn run_chunk<T: Float>(&self, x: &mut [T], other: Option<&[T]>, pos: usize) {
        self.run_chunk_with(random::portable, x, other, pos);
    }

    /// [`Kernel::run_chunk`] with the Philox tiles made by `tile`, whose
    /// generators must return exactly what [`philox::tile`] returns (the
    /// host device passes an AVX2 version).
    // Always inlined so the AVX2 entry point in `cpu_dispatch` compiles the
    // whole kernel with AVX2.
    #[inline(always)]
    pub(crate) fn run_chunk_with<T: Float>(
        &self,
        tile: impl random::TileFn,
        x: &mut [T],
        other: Option<&[T]>,
        pos: usize,
    ) {
        let other = other.unwrap_or_default();
        match *self {
            Kernel::Bernoulli { p, rng } => {
                let t = random::threshold(p);
                T::map_f32(
                    x,
                    #[inline(always)]
                    |buf, off| {
                        let start = rng.offset.wrapping_add((pos + off) as u64);
                        random::bernoulli_f32(tile, buf, t, rng.seed, start);
                    },
                );
            }
            Kernel::Dropout { p, rng } => {
                let q = 1.0 - p;
                let (t, scale) = (random::threshold(q), 1.0 / q);
                T::map_f32(
                    x,
                    #[inline(always)]
                    |buf, off| {
                        let start = rng.offset.wrapping_add((pos + off) as u64);
                        random::dropout_f32(tile, buf, t, scale, rng.seed, start);
                    },
                );
            }
            Kernel::ApplyMask { scale } => {
                T::zip_map_f32(
                    x,
                    other,
                    #[inline(always)]
                    |a, m| elementwise::apply_mask_f32(a, m, scale),
                );
            }
            Kernel::Mul => T::zip_map_f32(x, other, elementwise::mul_f32),
            Kernel::MulScalar { s } => T::map_f32(
                x,
                #[inline(always)]
                |a, _| elementwise::mul_scalar_f32(a, s),
            ),
        }
    }
}

fn check_lengths(op: &'static str, x: usize, other: usize) -> Result<()> {
    if x != other {
        return Err(Error::ShapeMismatch {
            op,
            buffer: "x".to_owned(),
            shape: vec![x],
            other: "operand".to_owned(),
            other_shape: vec![other],
        });
    }
    Ok(())
}

/// Runs a validated kernel on whole slices with the fastest code path the
/// CPU supports (the dispatch lives in `device`, which owns `unsafe`).
fn run<T: Float>(k: Kernel, x: &mut [T], other: Option<&[T]>) {
    crate::ops::cpu_dispatch::run(&k, x, other, 0);
}

/// Fills `out` with bernoulli(`p`) draws from stream elements
/// `rng.offset..rng.offset + out.len()`.
pub fn bernoulli<T: Float>(out: &mut [T], p: f32, rng: RngState) -> Result<()> {
    let k = Kernel::Bernoulli { p, rng };
    k.validate()?;
    run(k, out, None);
    Ok(())
}

/// Fused dropout of `x` in place (also its backward, on the gradient, with
/// the forward's `rng`).
pub fn dropout<T: Float>(x: &mut [T], p: f32, rng: RngState) -> Result<()> {
    let k = Kernel::Dropout { p, rng };
    k.validate()?;
    run(k, x, None);
    Ok(())
}

/// `x = mask != 0 ? x * scale : 0`, elementwise.
pub fn apply_mask<T: Float>(x: &mut [T], mask: &[T], scale: f32) -> Result<()> {
    check_lengths("apply_mask_", x.len(), mask.len())?;
    run(Kernel::ApplyMask { scale }, x, Some(mask));
    Ok(())
}

/// `x = x * y`, elementwise.
pub fn mul<T: Float>(x: &mut [T], y: &[T]) -> Result<()> {
    check_lengths("mul_", x.len(), y.len())?;
    run(Kernel::Mul, x, Some(y));
    Ok(())
}

/// `x = x * s`.
pub fn mul_scalar<T: Float>(x: &mut [T], s: f32) {
    run(Kernel::MulScalar { s }, x, None);
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    #[test]
    fn rng_md_check_value() {
        let mut m = [0f32; 16];
        bernoulli(&mut m, 0.5, RngState::new(1234)).unwrap();
        let bits: Vec<u8> = m.iter().map(|&v| v as u8).collect();
        assert_eq!(bits, [1, 0, 1, 0, 0, 1, 0, 1, 1, 0, 0, 0, 0, 1, 1, 0]);
    }

    #[test]
    fn bernoulli_follows_the_scalar_definition() {
        let rng = RngState {
            seed: 0xdead_beef_0123,
            offset: 5,
        };
        let mut m = vec![0f32; 1000];
        bernoulli(&mut m, 0.3, rng).unwrap();
        for (i, &v) in m.iter().enumerate() {
            let w = philox::stream_word(rng.seed, rng.offset + i as u64);
            let u = (w >> 8) as f32 * (1.0 / 16_777_216.0);
            assert_eq!(v, if u < 0.3 { 1.0 } else { 0.0 }, "element {i}");
        }
    }

    #[test]
    fn dispatched_and_portable_paths_agree() {
        // `bernoulli`/`dropout` run the fastest path for this CPU (AVX2
        // tiles on x86-64 when available); `run_chunk` is the portable code.
        for (seed, offset, len) in [
            (0u64, 0u64, 1usize),
            (1234, 4, 63),
            (u64::MAX, 1 << 34, 4097),
            (5, 3, 1000),
            // The stream position wraps past 2^64 inside the call.
            (7, u64::MAX - 100, 1000),
        ] {
            let rng = RngState { seed, offset };
            let mut fast = vec![0f32; len];
            bernoulli(&mut fast, 0.37, rng).unwrap();
            let mut slow = vec![0f32; len];
            Kernel::Bernoulli { p: 0.37, rng }.run_chunk(&mut slow, None, 0);
            assert_eq!(fast, slow, "bernoulli seed {seed} offset {offset}");
            let mut fast: Vec<f32> = (0..len).map(|i| i as f32).collect();
            let mut slow = fast.clone();
            dropout(&mut fast, 0.2, rng).unwrap();
            Kernel::Dropout { p: 0.2, rng }.run_chunk(&mut slow, None, 0);
            assert_eq!(fast, slow, "dropout seed {seed} offset {offset}");
        }
    }

    #[test]
    fn bad_probabilities_are_errors() {
        let mut x = [0f32; 4];
        for p in [-0.1, 1.5, f32::NAN, f32::INFINITY] {
            let e = bernoulli(&mut x, p, RngState::new(0)).unwrap_err();
            assert!(matches!(e, Error::InvalidProbability { .. }), "{e}");
            assert!(dropout(&mut x, p, RngState::new(0)).is_err());
        }
        bernoulli(&mut x, 0.0, RngState::new(0)).unwrap();
        assert_eq!(x, [0.0; 4]);
        bernoulli(&mut x, 1.0, RngState::new(0)).unwrap();
        assert_eq!(x, [1.0; 4]);
    }

    #[test]
    fn dropout_equals_bernoulli_then_mask() {
        let rng = RngState {
            seed: 42,
            offset: 8,
        };
        for p in [0.0f32, 0.1, 0.5, 0.9, 1.0] {
            let x: Vec<f32> = (0..777).map(|i| i as f32 * 0.25 - 7.0).collect();
            let mut fused = x.clone();
            dropout(&mut fused, p, rng).unwrap();
            let mut mask = vec![0f32; x.len()];
            bernoulli(&mut mask, 1.0 - p, rng).unwrap();
            let mut split = x.clone();
            apply_mask(&mut split, &mask, 1.0 / (1.0 - p)).unwrap();
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&fused), bits(&split), "p {p}");
        }
    }

    #[test]
    fn half_types_compute_in_f32_and_round() {
        let xs: Vec<f32> = (0..300).map(|i| i as f32 / 7.0 - 20.0).collect();
        let ys: Vec<f32> = (0..300).map(|i| 1.5 - i as f32 / 300.0).collect();
        let mut h: Vec<f16> = xs.iter().map(|&v| f16::from_f32(v)).collect();
        let hy: Vec<f16> = ys.iter().map(|&v| f16::from_f32(v)).collect();
        mul(&mut h, &hy).unwrap();
        for i in 0..300 {
            let want = f16::from_f32(f16::from_f32(xs[i]).to_f32() * f16::from_f32(ys[i]).to_f32());
            assert_eq!(h[i].to_bits(), want.to_bits(), "element {i}");
        }
        let mut b: Vec<bf16> = xs.iter().map(|&v| bf16::from_f32(v)).collect();
        mul_scalar(&mut b, 3.0);
        for i in 0..300 {
            let want = bf16::from_f32(bf16::from_f32(xs[i]).to_f32() * 3.0);
            assert_eq!(b[i], want);
        }
        let rng = RngState::new(9);
        let mut hm = vec![f16::ZERO; 300];
        bernoulli(&mut hm, 0.25, rng).unwrap();
        let mut fm = vec![0f32; 300];
        bernoulli(&mut fm, 0.25, rng).unwrap();
        assert!(hm.iter().zip(&fm).all(|(h, f)| h.to_f32() == *f));
    }

    #[test]
    fn mismatched_lengths_are_errors() {
        let mut x = [1f32; 4];
        assert!(matches!(
            mul(&mut x, &[1.0; 3]),
            Err(Error::ShapeMismatch { .. })
        ));
        assert!(apply_mask(&mut x, &[1.0; 5], 2.0).is_err());
    }

    #[test]
    fn mask_treats_negative_zero_as_zero_and_nan_as_set() {
        let mut x = [2f32; 3];
        apply_mask(&mut x, &[-0.0, f32::NAN, 1.0], 3.0).unwrap();
        assert_eq!(x, [0.0, 6.0, 6.0]);
    }
}
