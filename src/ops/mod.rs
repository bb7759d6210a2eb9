//! In-place kernels: Philox bernoulli fill, masked scale, multiply, and
//! dropout, fused or with a 1-bit mask. This module is the reference every device backend is
//! checked against bit for bit.
//!
//! Semantics (for `f32`; `f16` and `bf16` are widened to f32, computed, and
//! rounded back to nearest even):
//!
//! - `bernoulli(p)`: element = 1 where the stream's uniform `u < p`, else 0,
//!   with `u = (word >> 8) * 2^-24` (`docs/rng.md#the-stream-layout`) and `p` an `f32` in `[0, 1]`;
//!   into a float mask (1.0 / 0.0) or a `u8` mask (1 / 0, a quarter of an
//!   f32 mask's bytes), with the same decisions for the same stream;
//! - `apply_mask(mask, scale)`: `x = mask != 0 ? x * scale : 0`, the mask
//!   of `x`'s type or `u8`;
//! - `mul(y)`: `x = x * y`; `mul_scalar(s)`: `x = x * s`;
//! - `dropout(p)`: with `q = 1 - p` and `scale = 1 / q` (both in f32),
//!   `x = u < q ? x * scale : 0` — exactly `bernoulli(q)` into a mask
//!   followed by `apply_mask(mask, scale)`, in one pass and with no mask
//!   buffer. The backward pass is the same kernel on the gradient with the
//!   same `(seed, offset)`, which regenerates the mask;
//! - `dropout_bits(p)`: `x` exactly as `dropout(p)` leaves it, and the keep
//!   decisions stored one bit per element in a second buffer of
//!   [`bit_mask_bytes`]`(n)` bytes (bit `e % 8` of byte `e / 8` is element
//!   `e`, 1 = kept; the host writes the bits past the last element as 0,
//!   devices leave them unspecified and no kernel reads them);
//!   `apply_bits(scale)`: `x = bit ? x * scale : 0`, its backward with
//!   `scale = 1 / (1 - p)`: the regenerating backward's bits, from memory
//!   instead of the random stream. The default for training where the
//!   n / 8 bytes fit (on an NPU the backward is then bounded by memory
//!   bandwidth, not by Philox); the fused pair where they do not
//!   (`docs/kernels.md`).
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

#[cfg(target_arch = "x86_64")]
mod bits_avx2;
mod cpu_path;
mod elementwise;
mod float;
mod gemm;
pub mod philox;
#[cfg(target_arch = "x86_64")]
pub(crate) mod philox_avx2;
mod random;
mod rng;

pub use float::{Float, MaskElement, MaskFor};
pub use gemm::gemm;
pub use rng::RngState;

use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use cpu_path::{ApplyBitsFn, CpuPath, KeepBitsFn};
use random::TileFn;

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
    /// `x = mask != 0 ? x * scale : 0`; the mask is the second operand,
    /// of `x`'s element type.
    ApplyMask {
        /// Factor for kept elements.
        scale: f32,
    },
    /// `x = mask != 0 ? x * scale : 0` with a `u8` mask (one byte per
    /// element of `x`) as the second operand.
    ApplyMaskU8 {
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
    /// [`Kernel::Dropout`]'s forward that also writes its keep decisions
    /// into the second operand, a `u8` bit mask of
    /// [`bit_mask_bytes`]`(n)` bytes: bit `e % 8` of byte `e / 8` is 1 where
    /// element `e` was kept. `x` gets exactly the fused kernel's bits. The
    /// host writes the bits past the last element as 0; devices leave them
    /// unspecified.
    DropoutBits {
        /// Probability of dropping an element.
        p: f32,
        /// Stream position of element 0.
        rng: RngState,
    },
    /// `x = bit ? x * scale : 0`, reading the bit mask
    /// [`Kernel::DropoutBits`] wrote (the second operand, read only):
    /// dropout's backward with `scale = 1 / (1 - p)`, no random numbers.
    ApplyBits {
        /// Factor for kept elements.
        scale: f32,
    },
}

impl Kernel {
    /// The op's name, as users call it.
    pub fn name(&self) -> &'static str {
        match self {
            Kernel::Bernoulli { .. } => "bernoulli_",
            Kernel::ApplyMask { .. } | Kernel::ApplyMaskU8 { .. } => "apply_mask_",
            Kernel::Mul => "mul_",
            Kernel::MulScalar { .. } => "mul_scalar_",
            Kernel::Dropout { .. } => "dropout_",
            Kernel::DropoutBits { .. } => "dropout_with_bits_",
            Kernel::ApplyBits { .. } => "apply_bits_",
        }
    }

    /// Whether the kernel takes a second operand (of
    /// [`operand_len`](Kernel::operand_len) elements of
    /// [`operand_dtype`](Kernel::operand_dtype)).
    pub fn has_operand(&self) -> bool {
        matches!(
            self,
            Kernel::ApplyMask { .. }
                | Kernel::ApplyMaskU8 { .. }
                | Kernel::Mul
                | Kernel::DropoutBits { .. }
                | Kernel::ApplyBits { .. }
        )
    }

    /// Whether the kernel writes its second operand ([`Kernel::DropoutBits`]
    /// writes its bit mask); the others only read it.
    pub fn writes_operand(&self) -> bool {
        matches!(self, Kernel::DropoutBits { .. })
    }

    /// The element type of the second operand when `x` holds `dtype`:
    /// `u8` for the byte and bit masks ([`Kernel::ApplyMaskU8`],
    /// [`Kernel::DropoutBits`], [`Kernel::ApplyBits`]), `dtype` otherwise.
    pub fn operand_dtype(&self, dtype: DType) -> DType {
        match self {
            Kernel::ApplyMaskU8 { .. } | Kernel::DropoutBits { .. } | Kernel::ApplyBits { .. } => {
                DType::U8
            }
            _ => dtype,
        }
    }

    /// Elements (of [`operand_dtype`](Kernel::operand_dtype)) the second
    /// operand holds for a call on `elements` elements of `x`: one bit
    /// each, [`bit_mask_bytes`]`(elements)` bytes, for the bit masks; one
    /// element each otherwise.
    ///
    /// ```
    /// use tensor_arena::ops::{Kernel, RngState};
    /// let bits = Kernel::DropoutBits { p: 0.1, rng: RngState::new(1) };
    /// assert_eq!(bits.operand_len(1000), 125);
    /// assert_eq!(bits.operand_len(1001), 126);
    /// assert_eq!(Kernel::Mul.operand_len(1001), 1001);
    /// ```
    pub fn operand_len(&self, elements: usize) -> usize {
        match self {
            Kernel::DropoutBits { .. } | Kernel::ApplyBits { .. } => bit_mask_bytes(elements),
            _ => elements,
        }
    }

    /// Whether the kernel runs on `x` of element type `dtype`: f32, f16 and
    /// bf16 for every kernel; also u8 for [`Kernel::Bernoulli`] (a u8
    /// mask).
    pub fn supports(&self, dtype: DType) -> bool {
        match dtype {
            DType::F32 | DType::F16 | DType::BF16 => true,
            DType::U8 => matches!(self, Kernel::Bernoulli { .. }),
            DType::I32 => false,
        }
    }

    /// Checks the kernel's parameters (probabilities in `[0, 1]`, not NaN).
    pub fn validate(&self) -> Result<()> {
        match *self {
            Kernel::Bernoulli { p, .. }
            | Kernel::Dropout { p, .. }
            | Kernel::DropoutBits { p, .. }
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
    /// unchanged there; [`Kernel::ApplyMaskU8`] takes its mask through
    /// [`run_chunk_masked`](Kernel::run_chunk_masked), the bit-mask kernels
    /// theirs through [`run_chunk_bits`](Kernel::run_chunk_bits) and
    /// [`run_chunk_writing_bits`](Kernel::run_chunk_writing_bits); here
    /// [`Kernel::DropoutBits`] updates `x` only).
    #[inline(always)]
    pub fn run_chunk<T: Float>(&self, x: &mut [T], other: Option<&[T]>, pos: usize) {
        let other = other.map_or(Operand::None, Operand::Same);
        self.run_chunk_with(cpu_path::portable(), x, other, pos);
    }

    /// [`Kernel::run_chunk`] of [`Kernel::ApplyMaskU8`]: `mask` holds one
    /// byte per element of `x`. Other kernels run as with no operand.
    #[inline(always)]
    pub fn run_chunk_masked<T: Float>(&self, x: &mut [T], mask: &[u8], pos: usize) {
        self.run_chunk_with(cpu_path::portable(), x, Operand::Mask(mask), pos);
    }

    /// [`Kernel::run_chunk`] of [`Kernel::ApplyBits`]: `bits` holds the
    /// chunk's bit mask from its first element (bit 0 of `bits[0]` is
    /// `x[0]`, so a chunk of a larger call starts at a multiple of 8
    /// elements), [`bit_mask_bytes`]`(x.len())` bytes; elements past the
    /// bits it has are left unchanged. Other kernels run as with no operand.
    #[inline(always)]
    pub fn run_chunk_bits<T: Float>(&self, x: &mut [T], bits: &[u8], pos: usize) {
        self.run_chunk_with(cpu_path::portable(), x, Operand::Bits(bits), pos);
    }

    /// [`Kernel::run_chunk`] of [`Kernel::DropoutBits`]: `x` as
    /// [`Kernel::Dropout`] leaves it, and its keep bits written into `bits`,
    /// laid out as for [`run_chunk_bits`](Kernel::run_chunk_bits) (bits
    /// past the chunk's last element 0). Other kernels run as
    /// [`run_chunk_bits`](Kernel::run_chunk_bits).
    #[inline(always)]
    pub fn run_chunk_writing_bits<T: Float>(&self, x: &mut [T], bits: &mut [u8], pos: usize) {
        self.run_writing_bits_with(cpu_path::portable(), x, bits, pos);
    }

    /// [`Kernel::run_chunk_writing_bits`] with the inner loops of `path`.
    #[inline(always)]
    pub(crate) fn run_writing_bits_with<T: Float>(
        &self,
        path: CpuPath<impl TileFn, impl ApplyBitsFn, impl KeepBitsFn>,
        x: &mut [T],
        bits: &mut [u8],
        pos: usize,
    ) {
        let Kernel::DropoutBits { p, rng } = *self else {
            return self.run_chunk_with(path, x, Operand::Bits(bits), pos);
        };
        let q = 1.0 - p;
        let (t, scale) = (random::threshold(q), 1.0 / q);
        // Only as far as the bits go, as for the other operands.
        let n = x.len().min(bits.len().saturating_mul(8));
        T::map_f32(
            &mut x[..n],
            #[inline(always)]
            |buf, off| {
                // Pieces start at multiples of 8 elements (map_f32's tiles).
                let b = &mut bits[off / 8..(off + buf.len()).div_ceil(8)];
                let start = rng.offset.wrapping_add((pos + off) as u64);
                random::dropout_bits_f32(
                    path.tile,
                    path.keep_bits,
                    buf,
                    b,
                    t,
                    scale,
                    rng.seed,
                    start,
                );
            },
        );
    }

    /// [`Kernel::run_chunk`] into a `u8` buffer: [`Kernel::Bernoulli`]
    /// writes 1 or 0 per byte, the decisions it writes as 1.0 / 0.0 into a
    /// float buffer. Other kernels leave `x` unchanged (they have no u8
    /// form; launches refuse them).
    #[inline(always)]
    pub fn run_chunk_bytes(&self, x: &mut [u8], pos: usize) {
        self.run_bytes_with(cpu_path::portable(), x, pos);
    }

    /// [`Kernel::run_chunk_bytes`] with the inner loops of `path`.
    #[inline(always)]
    pub(crate) fn run_bytes_with(
        &self,
        path: CpuPath<impl TileFn, impl ApplyBitsFn, impl KeepBitsFn>,
        x: &mut [u8],
        pos: usize,
    ) {
        if let Kernel::Bernoulli { p, rng } = *self {
            let start = rng.offset.wrapping_add(pos as u64);
            random::bernoulli_u8(path.tile, x, random::threshold(p), rng.seed, start);
        }
    }

    /// [`Kernel::run_chunk`] with the inner loops of `path`, which must
    /// return exactly what the portable ones return (Philox tiles as
    /// [`philox::tile`]; the host device passes AVX2 versions).
    // Always inlined so the AVX2 entry point in `cpu_dispatch` compiles the
    // whole kernel with AVX2.
    #[inline(always)]
    pub(crate) fn run_chunk_with<T: Float>(
        &self,
        path: CpuPath<impl TileFn, impl ApplyBitsFn, impl KeepBitsFn>,
        x: &mut [T],
        operand: Operand<'_, T>,
        pos: usize,
    ) {
        let other = match operand {
            Operand::Same(o) => o,
            _ => &[],
        };
        match *self {
            Kernel::Bernoulli { p, rng } => {
                let t = random::threshold(p);
                T::map_f32(
                    x,
                    #[inline(always)]
                    |buf, off| {
                        let start = rng.offset.wrapping_add((pos + off) as u64);
                        random::bernoulli_f32(path.tile, buf, t, rng.seed, start);
                    },
                );
            }
            Kernel::Dropout { p, rng } | Kernel::DropoutBits { p, rng } => {
                let q = 1.0 - p;
                let (t, scale) = (random::threshold(q), 1.0 / q);
                T::map_f32(
                    x,
                    #[inline(always)]
                    |buf, off| {
                        let start = rng.offset.wrapping_add((pos + off) as u64);
                        random::dropout_f32(path.tile, buf, t, scale, rng.seed, start);
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
            Kernel::ApplyMaskU8 { scale } => {
                let mask = match operand {
                    Operand::Mask(m) => m,
                    _ => &[],
                };
                // Only as far as the mask goes, as for the other operands.
                let n = x.len().min(mask.len());
                T::map_f32(
                    &mut x[..n],
                    #[inline(always)]
                    |a, off| elementwise::apply_mask_u8_f32(a, &mask[off..off + a.len()], scale),
                );
            }
            Kernel::ApplyBits { scale } => {
                let bits = match operand {
                    Operand::Bits(b) => b,
                    _ => &[],
                };
                let n = x.len().min(bits.len().saturating_mul(8));
                T::map_f32(
                    &mut x[..n],
                    // Pieces start at multiples of 8 elements (map_f32's tiles).
                    #[inline(always)]
                    |a, off| (path.apply_bits)(a, &bits[off / 8..], scale),
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

/// The second operand of a kernel call on the host.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Operand<'a, T> {
    /// None (one-operand kernels).
    None,
    /// Of `x`'s element type.
    Same(&'a [T]),
    /// A u8 mask.
    Mask(&'a [u8]),
    /// A bit mask, read: one bit per element.
    Bits(&'a [u8]),
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
/// CPU supports (`cpu_dispatch`).
fn run<T: Float>(k: Kernel, x: &mut [T], other: Option<&[T]>) {
    let other = other.map_or(Operand::None, Operand::Same);
    crate::ops::cpu_dispatch::run(&k, x, other, 0);
}

/// Fills `out` with bernoulli(`p`) draws from stream elements
/// `rng.offset..rng.offset + out.len()`: 1.0 / 0.0 in a float mask, 1 / 0
/// in a `u8` mask, the same decisions either way.
///
/// ```
/// use tensor_arena::ops::{self, RngState};
/// let (mut f, mut b) = (vec![0f32; 64], vec![0u8; 64]);
/// ops::bernoulli(&mut f, 0.3, RngState::new(5))?;
/// ops::bernoulli(&mut b, 0.3, RngState::new(5))?;
/// assert!(f.iter().zip(&b).all(|(&f, &b)| f == f32::from(b)));
/// # Ok::<(), tensor_arena::Error>(())
/// ```
pub fn bernoulli<M: MaskElement>(out: &mut [M], p: f32, rng: RngState) -> Result<()> {
    let k = Kernel::Bernoulli { p, rng };
    k.validate()?;
    M::fill(&k, out);
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

/// Bytes of a bit mask for `elements` elements: `ceil(elements / 8)`, one
/// bit each. The size of the buffer
/// [`dropout_with_bits_`](crate::Lease::dropout_with_bits_) writes, for a
/// planner's spec or a recorder's request.
///
/// ```
/// use tensor_arena::ops::bit_mask_bytes;
/// assert_eq!(bit_mask_bytes(4096 * 128), 65_536); // 512 KiB less than a u8 mask
/// assert_eq!((bit_mask_bytes(0), bit_mask_bytes(1), bit_mask_bytes(9)), (0, 1, 2));
/// ```
pub const fn bit_mask_bytes(elements: usize) -> usize {
    elements.div_ceil(8)
}

/// Checks that the `bytes`-byte buffer `mask` is the bit mask of the
/// `elements` elements of `buffer`.
pub(crate) fn check_bit_mask(
    op: &'static str,
    buffer: &str,
    elements: usize,
    mask: &str,
    bytes: usize,
) -> Result<()> {
    let needed = bit_mask_bytes(elements);
    if bytes != needed {
        return Err(Error::BitMaskBytes {
            op,
            buffer: buffer.to_owned(),
            elements,
            mask: mask.to_owned(),
            bytes,
            needed,
        });
    }
    Ok(())
}

fn check_bits(op: &'static str, elements: usize, bits: usize) -> Result<()> {
    check_bit_mask(op, "x", elements, "bits", bits)
}

/// Dropout of `x` in place, as [`dropout`] computes it (the same stream
/// elements, keep rule and scale, so the same bits), that also stores the
/// keep decisions in `bits`, one bit per element
/// ([`bit_mask_bytes`]`(x.len())` bytes; bit `e % 8` of byte `e / 8` is 1
/// where element `e` was kept; the bits past the last element are written
/// as 0). [`apply_bits`] with `1 / (1 - p)` is its backward.
///
/// ```
/// use tensor_arena::ops::{self, RngState};
/// let rng = RngState::new(9);
/// let (mut fused, mut split) = (vec![1f32; 20], vec![1f32; 20]);
/// ops::dropout(&mut fused, 0.5, rng)?;
/// let mut bits = [0u8; ops::bit_mask_bytes(20)];
/// ops::dropout_bits(&mut split, &mut bits, 0.5, rng)?;
/// assert_eq!(fused, split);
/// for (e, v) in split.iter().enumerate() {
///     assert_eq!(*v != 0.0, bits[e / 8] >> (e % 8) & 1 == 1);
/// }
/// // The backward: a gradient through the same mask, no random numbers.
/// let mut grad = vec![3f32; 20];
/// ops::apply_bits(&mut grad, &bits, 1.0 / (1.0 - 0.5))?;
/// assert!(grad.iter().zip(&split).all(|(g, y)| (*g == 0.0) == (*y == 0.0)));
/// # Ok::<(), tensor_arena::Error>(())
/// ```
pub fn dropout_bits<T: Float>(x: &mut [T], bits: &mut [u8], p: f32, rng: RngState) -> Result<()> {
    let k = Kernel::DropoutBits { p, rng };
    k.validate()?;
    check_bits(k.name(), x.len(), bits.len())?;
    crate::ops::cpu_dispatch::run_writing_bits(&k, x, bits, 0);
    Ok(())
}

/// `x = bit ? x * scale : 0`, with the bit mask [`dropout_bits`] wrote
/// ([`bit_mask_bytes`]`(x.len())` bytes).
pub fn apply_bits<T: Float>(x: &mut [T], bits: &[u8], scale: f32) -> Result<()> {
    let k = Kernel::ApplyBits { scale };
    check_bits(k.name(), x.len(), bits.len())?;
    crate::ops::cpu_dispatch::run(&k, x, Operand::Bits(bits), 0);
    Ok(())
}

/// `x = mask != 0 ? x * scale : 0`, elementwise; the mask is of `x`'s
/// type or `u8`.
pub fn apply_mask<T: Float, M: MaskFor<T>>(x: &mut [T], mask: &[M], scale: f32) -> Result<()> {
    check_lengths("apply_mask_", x.len(), mask.len())?;
    M::apply(x, mask, scale);
    Ok(())
}

/// The kernel `apply_mask_` launches for a mask of element type `M`.
pub(crate) fn apply_mask_kernel<M: Element>(scale: f32) -> Kernel {
    match M::DTYPE {
        DType::U8 => Kernel::ApplyMaskU8 { scale },
        _ => Kernel::ApplyMask { scale },
    }
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
    fn dispatched_and_portable_bit_mask_paths_agree() {
        // `dropout_bits`/`apply_bits` run the AVX2 bit-mask loops on x86-64
        // when available; `run_chunk_writing_bits`/`run_chunk_bits` are the
        // portable loops. Values include signed zeros, infinities and NaN,
        // lengths the tails of a byte and of a 256-element group.
        let special = [
            -0.0f32,
            0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1e-40,
        ];
        let bits_of = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        for (offset, len) in [
            (0u64, 0usize),
            (0, 1),
            (3, 7),
            (1, 8),
            (5, 9),
            (2, 255),
            (7, 257),
            (9, 1029),
        ] {
            let rng = RngState { seed: 77, offset };
            let x: Vec<f32> = (0..len)
                .map(|i| {
                    special
                        .get(i % 11)
                        .copied()
                        .unwrap_or(i as f32 * 0.37 - 50.0)
                })
                .collect();
            for p in [0.0f32, 0.3, 1.0] {
                let (mut fast, mut slow) = (x.clone(), x.clone());
                let mut fast_bits = vec![0xAAu8; bit_mask_bytes(len)];
                let mut slow_bits = fast_bits.clone();
                dropout_bits(&mut fast, &mut fast_bits, p, rng).unwrap();
                Kernel::DropoutBits { p, rng }.run_chunk_writing_bits(&mut slow, &mut slow_bits, 0);
                assert_eq!(
                    bits_of(&fast),
                    bits_of(&slow),
                    "dropout_bits p {p} len {len}"
                );
                assert_eq!(fast_bits, slow_bits, "bits p {p} len {len}");
                let scale = 1.0 / (1.0 - p).max(0.5);
                let (mut fast, mut slow) = (x.clone(), x.clone());
                apply_bits(&mut fast, &fast_bits, scale).unwrap();
                Kernel::ApplyBits { scale }.run_chunk_bits(&mut slow, &slow_bits, 0);
                assert_eq!(bits_of(&fast), bits_of(&slow), "apply_bits p {p} len {len}");
            }
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
    fn u8_masks_make_the_f32_decisions() {
        for (seed, offset, len, p) in [
            (0u64, 0u64, 1usize, 0.5f32),
            (1234, 3, 63, 0.9),
            (7, u64::MAX - 100, 1000, 0.3),
            (99, 1 << 40, 4097, 1.0 / 16_777_216.0),
            (5, 5, 300, 1.0),
            (5, 5, 300, 0.0),
        ] {
            let rng = RngState { seed, offset };
            let mut f = vec![0f32; len];
            bernoulli(&mut f, p, rng).unwrap();
            let mut b = vec![7u8; len];
            bernoulli(&mut b, p, rng).unwrap();
            assert!(
                f.iter().zip(&b).all(|(&f, &b)| f32::from(b) == f),
                "seed {seed} offset {offset} p {p}"
            );
            let mut slow = vec![7u8; len];
            Kernel::Bernoulli { p, rng }.run_chunk_bytes(&mut slow, 0);
            assert_eq!(slow, b, "dispatched and portable u8 paths agree");
            let x: Vec<f32> = (0..len).map(|i| i as f32 * 0.5 - 3.0).collect();
            let (mut by_f32, mut by_u8) = (x.clone(), x.clone());
            apply_mask(&mut by_f32, &f, 1.25).unwrap();
            apply_mask(&mut by_u8, &b, 1.25).unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&by_f32), bits(&by_u8));
            let xh: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
            let fh: Vec<bf16> = f.iter().map(|&v| bf16::from_f32(v)).collect();
            let (mut hf, mut hu) = (xh.clone(), xh.clone());
            apply_mask(&mut hf, &fh, 0.75).unwrap();
            apply_mask(&mut hu, &b, 0.75).unwrap();
            assert_eq!(hf, hu);
        }
        // Any non-zero byte keeps.
        let mut x = [2f32; 3];
        apply_mask(&mut x, &[0u8, 255, 1], 3.0).unwrap();
        assert_eq!(x, [0.0, 6.0, 6.0]);
        assert!(apply_mask(&mut x, &[1u8; 2], 1.0).is_err());
    }

    #[test]
    fn bit_masks_are_the_fused_dropout_on_every_path() {
        // The dispatched path (AVX2 where the CPU has it), the portable one
        // chunk by chunk, and the definition element by element.
        for (seed, offset, len) in [
            (3u64, 0u64, 1usize),
            (3, 4, 7),
            (4, 8, 9),
            (5, 13, 65),
            (6, (1 << 34) - 40, 1000),
            (7, u64::MAX - 100, 1000),
        ] {
            let rng = RngState { seed, offset };
            let x: Vec<f32> = (0..len).map(|i| i as f32 - 20.5).collect();
            let mut fused = x.clone();
            dropout(&mut fused, 0.3, rng).unwrap();
            let mut fast = x.clone();
            let mut bits = vec![0xFFu8; bit_mask_bytes(len)];
            dropout_bits(&mut fast, &mut bits, 0.3, rng).unwrap();
            assert_eq!(fast, fused, "seed {seed} offset {offset}");
            let k = Kernel::DropoutBits { p: 0.3, rng };
            let (mut slow, mut slow_bits) = (x.clone(), vec![0xFFu8; bits.len()]);
            for (c, (xc, bc)) in slow.chunks_mut(64).zip(slow_bits.chunks_mut(8)).enumerate() {
                k.run_chunk_writing_bits(xc, bc, 64 * c);
            }
            assert_eq!((&slow, &slow_bits), (&fused, &bits));
            for (e, &v) in fused.iter().enumerate() {
                let w = philox::stream_word(seed, offset.wrapping_add(e as u64));
                let kept = (w >> 8) as f32 * (1.0 / 16_777_216.0) < 0.7;
                assert_eq!(bits[e / 8] >> (e % 8) & 1 == 1, kept, "element {e}");
                assert_eq!(v == 0.0, !kept || x[e] == 0.0);
            }
            // Bits past the last element are 0 on the host.
            if len % 8 != 0 {
                assert_eq!(bits[len / 8] >> (len % 8), 0);
            }
            let g: Vec<f32> = (0..len).map(|i| 1.5 - i as f32).collect();
            let (mut regen, mut applied) = (g.clone(), g.clone());
            dropout(&mut regen, 0.3, rng).unwrap();
            apply_bits(&mut applied, &bits, 1.0 / (1.0 - 0.3)).unwrap();
            assert_eq!(regen, applied);
            let mut portable = g.clone();
            Kernel::ApplyBits {
                scale: 1.0 / (1.0 - 0.3),
            }
            .run_chunk_bits(&mut portable, &bits, 0);
            assert_eq!(portable, regen);
        }
    }

    #[test]
    fn bit_mask_lengths_are_checked() {
        let mut x = [1f32; 9];
        let rng = RngState::new(1);
        for wrong in [1usize, 3] {
            let mut bits = vec![0u8; wrong];
            let e = dropout_bits(&mut x, &mut bits, 0.5, rng).unwrap_err();
            assert!(
                matches!(e, Error::BitMaskBytes { elements: 9, bytes, needed: 2, .. } if bytes == wrong),
                "{e}"
            );
            assert!(apply_bits(&mut x, &bits, 2.0).is_err());
        }
        let mut bits = [0u8; 2];
        assert!(matches!(
            dropout_bits(&mut x, &mut bits, 1.5, rng),
            Err(Error::InvalidProbability { .. })
        ));
        assert_eq!(x, [1.0; 9], "nothing ran");
        let mut empty: [f32; 0] = [];
        dropout_bits(&mut empty, &mut [], 0.5, rng).unwrap();
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
