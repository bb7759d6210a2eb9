//! Floating-point element types the kernels run on. Half types are widened
//! to f32 in small stack tiles, computed in f32 and rounded back to nearest
//! even, so every backend that follows the same rule gets the same bits.

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

use super::{Kernel, Operand, cpu_dispatch};
use crate::dtype::Element;

/// Elements per tile when half types are widened to f32 (on the stack).
const TILE: usize = 256;

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// An element type the kernels accept: `f32`, `f16` or `bf16`.
pub trait Float: MaskElement + sealed::Sealed {
    /// Runs `f` on `xs` widened to f32, in order, writing the results back.
    /// `f` receives each piece and its position in `xs`.
    fn map_f32(xs: &mut [Self], f: impl FnMut(&mut [f32], usize));

    /// Like [`Float::map_f32`] with a second, read-only operand of the same
    /// length.
    fn zip_map_f32(xs: &mut [Self], ys: &[Self], f: impl FnMut(&mut [f32], &[f32]));
}

impl Float for f32 {
    #[inline(always)]
    fn map_f32(xs: &mut [f32], mut f: impl FnMut(&mut [f32], usize)) {
        f(xs, 0);
    }

    #[inline(always)]
    fn zip_map_f32(xs: &mut [f32], ys: &[f32], mut f: impl FnMut(&mut [f32], &[f32])) {
        f(xs, ys);
    }
}

macro_rules! half_float {
    ($t:ty) => {
        impl Float for $t {
            #[inline(always)]
            fn map_f32(xs: &mut [$t], mut f: impl FnMut(&mut [f32], usize)) {
                let mut buf = [0f32; TILE];
                for (k, chunk) in xs.chunks_mut(TILE).enumerate() {
                    let buf = &mut buf[..chunk.len()];
                    chunk.convert_to_f32_slice(buf);
                    f(buf, k * TILE);
                    chunk.convert_from_f32_slice(buf);
                }
            }

            #[inline(always)]
            fn zip_map_f32(xs: &mut [$t], ys: &[$t], mut f: impl FnMut(&mut [f32], &[f32])) {
                let mut bx = [0f32; TILE];
                let mut by = [0f32; TILE];
                for (cx, cy) in xs.chunks_mut(TILE).zip(ys.chunks(TILE)) {
                    let (bx, by) = (&mut bx[..cx.len()], &mut by[..cy.len()]);
                    cx.convert_to_f32_slice(bx);
                    cy.convert_to_f32_slice(by);
                    f(bx, by);
                    cx.convert_from_f32_slice(bx);
                }
            }
        }
    };
}

half_float!(f16);
half_float!(bf16);

mod mask_sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
    impl Sealed for u8 {}
}

/// An element type a mask can hold, which `bernoulli_` fills with 1 or 0:
/// the float types (1.0 / 0.0) and `u8` (1 / 0, a quarter of an f32 mask's
/// bytes). Both make the same decisions from the same stream.
pub trait MaskElement: Element + mask_sealed::Sealed {
    /// Runs a validated [`Kernel::Bernoulli`] over `out` on the host, with
    /// the fastest code path the CPU supports.
    #[doc(hidden)]
    fn fill(kernel: &Kernel, out: &mut [Self]);
}

macro_rules! float_mask {
    ($($t:ty),*) => {$(
        impl MaskElement for $t {
            fn fill(kernel: &Kernel, out: &mut [$t]) {
                cpu_dispatch::run(kernel, out, Operand::None, 0);
            }
        }
    )*};
}
float_mask!(f32, f16, bf16);

impl MaskElement for u8 {
    fn fill(kernel: &Kernel, out: &mut [u8]) {
        cpu_dispatch::run_bytes(kernel, out, 0);
    }
}

/// A mask type `apply_mask_` accepts for values of `T`: `T` itself, or a
/// `u8` mask.
pub trait MaskFor<T: Float>: MaskElement {
    /// `x = mask != 0 ? x * scale : 0` on the host (lengths checked by the
    /// caller).
    #[doc(hidden)]
    fn apply(x: &mut [T], mask: &[Self], scale: f32);
}

impl<T: Float> MaskFor<T> for T {
    fn apply(x: &mut [T], mask: &[T], scale: f32) {
        cpu_dispatch::run(&Kernel::ApplyMask { scale }, x, Operand::Same(mask), 0);
    }
}

impl<T: Float> MaskFor<T> for u8 {
    fn apply(x: &mut [T], mask: &[u8], scale: f32) {
        cpu_dispatch::run(&Kernel::ApplyMaskU8 { scale }, x, Operand::Mask(mask), 0);
    }
}
