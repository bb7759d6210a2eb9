//! The inner loops of the host kernels that depend on the CPU, bundled so
//! that one kernel body compiles for the baseline target and, in
//! `cpu_dispatch`, for AVX2: the Philox tiles and the two bit-mask loops
//! (the autovectoriser spreads a byte's eight lanes over eight vectors, so
//! AVX2 spells them with intrinsics). Every path returns exactly the
//! portable path's bits.

use super::{elementwise, random};
use random::TileFn;

/// `apply_bits(x, bits, scale)`: [`elementwise::apply_bits_f32`]'s contract.
pub(crate) trait ApplyBitsFn: Fn(&mut [f32], &[u8], f32) + Copy {}
impl<F: Fn(&mut [f32], &[u8], f32) + Copy> ApplyBitsFn for F {}

/// `keep_bits(x, words, bits, t, scale)`: [`random::keep_bits_f32`]'s
/// contract.
pub(crate) trait KeepBitsFn: Fn(&mut [f32], &[u32], &mut [u8], u32, f32) + Copy {}
impl<F: Fn(&mut [f32], &[u32], &mut [u8], u32, f32) + Copy> KeepBitsFn for F {}

/// One code path's inner loops.
#[derive(Clone, Copy)]
pub(crate) struct CpuPath<T, A, K> {
    /// Philox tiles ([`super::philox::tile`] or an equivalent).
    pub tile: T,
    /// The bit-mask apply.
    pub apply_bits: A,
    /// The bit-mask dropout's decisions, applied and packed.
    pub keep_bits: K,
}

impl<T: TileFn, A: ApplyBitsFn, K: KeepBitsFn> CpuPath<T, A, K> {
    /// A path of these loops (a function, so that closures passed to it
    /// may carry `#[inline(always)]`).
    #[inline(always)]
    pub fn new(tile: T, apply_bits: A, keep_bits: K) -> Self {
        CpuPath {
            tile,
            apply_bits,
            keep_bits,
        }
    }
}

/// The path every CPU runs: the definitions.
#[inline(always)]
pub(crate) fn portable() -> CpuPath<impl TileFn, impl ApplyBitsFn, impl KeepBitsFn> {
    CpuPath::new(
        random::portable,
        elementwise::apply_bits_f32,
        random::keep_bits_f32,
    )
}
