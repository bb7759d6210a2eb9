//! CPU-feature dispatch for the reference kernels: the same safe Rust
//! compiled twice, for the baseline target and for AVX2, chosen at run time.

use crate::ops::cpu_path::{self, ApplyBitsFn, CpuPath, KeepBitsFn};
use crate::ops::random::TileFn;
use crate::ops::{Float, Kernel, Operand};

/// Runs one chunk with the best code path the CPU supports.
pub(crate) fn run<T: Float>(kernel: &Kernel, x: &mut [T], other: Operand<'_, T>, pos: usize) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2 (detected just above), the only
        // requirement of calling a function compiled for it.
        unsafe { run_avx2(kernel, x, other, pos) };
        return;
    }
    kernel.run_chunk_with(cpu_path::portable(), x, other, pos);
}

/// Runs one chunk of a kernel writing a `u8` buffer (bernoulli into a u8
/// mask) with the best code path the CPU supports.
pub(crate) fn run_bytes(kernel: &Kernel, x: &mut [u8], pos: usize) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2 (detected just above), the only
        // requirement of calling a function compiled for it.
        unsafe { run_bytes_avx2(kernel, x, pos) };
        return;
    }
    kernel.run_bytes_with(cpu_path::portable(), x, pos);
}

/// Runs one chunk of a kernel that writes a bit mask besides `x`
/// ([`Kernel::DropoutBits`]) with the best code path the CPU supports.
pub(crate) fn run_writing_bits<T: Float>(
    kernel: &Kernel,
    x: &mut [T],
    bits: &mut [u8],
    pos: usize,
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2 (detected just above), the only
        // requirement of calling a function compiled for it.
        unsafe { run_writing_bits_avx2(kernel, x, bits, pos) };
        return;
    }
    kernel.run_writing_bits_with(cpu_path::portable(), x, bits, pos);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn run_writing_bits_avx2<T: Float>(kernel: &Kernel, x: &mut [T], bits: &mut [u8], pos: usize) {
    kernel.run_writing_bits_with(avx2_path(), x, bits, pos);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn run_bytes_avx2(kernel: &Kernel, x: &mut [u8], pos: usize) {
    kernel.run_bytes_with(avx2_path(), x, pos);
}

/// The AVX2 inner loops: Philox tiles from `ops::philox_avx2`, bit-mask
/// loops from `ops::bits_avx2`. The closures inherit this function's AVX2
/// feature, so the kernels that call them compile it in.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
fn avx2_path() -> CpuPath<impl TileFn, impl ApplyBitsFn, impl KeepBitsFn> {
    use crate::ops::bits_avx2;
    use crate::ops::philox_avx2::{prepare, tile};
    CpuPath::new(
        #[inline(always)]
        |key| {
            let ks = prepare(key);
            #[inline(always)]
            move |first| tile(&ks, first)
        },
        #[inline(always)]
        |x: &mut [f32], bits: &[u8], scale| bits_avx2::apply_bits_f32(x, bits, scale),
        #[inline(always)]
        |x: &mut [f32], words: &[u32], bits: &mut [u8], t, scale| {
            bits_avx2::keep_bits_f32(x, words, bits, t, scale)
        },
    )
}

/// The same kernels compiled for AVX2, with the AVX2 inner loops. No floating-point op changes (no FMA contraction: the
/// kernels multiply once and never add).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn run_avx2<T: Float>(kernel: &Kernel, x: &mut [T], other: Operand<'_, T>, pos: usize) {
    kernel.run_chunk_with(avx2_path(), x, other, pos);
}

/// Runs `f` compiled for the best code path the CPU supports. `f` must be
/// `#[inline(always)]` (closure attribute) so its body is compiled into the
/// AVX2 entry point; it must not depend on which path runs (no FMA is
/// enabled, so floating-point results are the same on every path).
#[inline(always)]
pub(crate) fn dispatch<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2 (detected just above), the only
        // requirement of calling a function compiled for it.
        return unsafe { with_avx2(f) };
    }
    f()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn with_avx2<R>(f: impl FnOnce() -> R) -> R {
    f()
}
