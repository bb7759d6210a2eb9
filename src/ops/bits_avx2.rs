//! The bit-mask loops with AVX2: eight f32 lanes per mask byte, the lane
//! mask from one broadcast, an `and` and a compare (apply), or the keep
//! decisions packed with one `movemask` (dropout). Same results as the
//! portable loops in `elementwise` and `random` (tests compare them); the
//! tails, shorter than a byte's eight elements, run the portable loops.
//!
//! Safe Rust: the intrinsics take no pointers, the vectors are built from
//! and stored into `[f32; 8]` / `[u32; 8]` by value (`bytemuck::cast`).

use std::arch::x86_64::{
    __m256, __m256i, _mm256_and_ps, _mm256_and_si256, _mm256_castsi256_ps, _mm256_cmpeq_epi32,
    _mm256_cmpgt_epi32, _mm256_movemask_ps, _mm256_mul_ps, _mm256_set1_epi32, _mm256_set1_ps,
    _mm256_setr_epi32, _mm256_srli_epi32,
};

use super::{elementwise, random};

/// [`elementwise::apply_bits_f32`] with AVX2.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn apply_bits_f32(x: &mut [f32], bits: &[u8], scale: f32) {
    let lanes = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    let s = _mm256_set1_ps(scale);
    let (groups, _) = x.as_chunks_mut::<8>();
    let full = groups.len().min(bits.len());
    for (g, &b) in groups[..full].iter_mut().zip(bits) {
        let v: __m256 = bytemuck::cast(*g);
        let bit = _mm256_and_si256(_mm256_set1_epi32(i32::from(b)), lanes);
        let keep = _mm256_castsi256_ps(_mm256_cmpeq_epi32(bit, lanes));
        // A dropped lane's bits are all 0: +0.0, as the portable loop.
        *g = bytemuck::cast(_mm256_and_ps(_mm256_mul_ps(v, s), keep));
    }
    elementwise::apply_bits_f32(&mut x[full * 8..], &bits[full..], scale);
}

/// [`random::keep_bits_f32`] with AVX2.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn keep_bits_f32(x: &mut [f32], words: &[u32], bits: &mut [u8], t: u32, scale: f32) {
    // t <= 2^24 and a word's top 24 bits are below 2^24: the signed
    // compare is the unsigned one.
    let tv = _mm256_set1_epi32(t as i32);
    let s = _mm256_set1_ps(scale);
    let (xs, _) = x.as_chunks_mut::<8>();
    let (ws, _) = words.as_chunks::<8>();
    let full = xs.len().min(ws.len()).min(bits.len());
    for ((g, w), b) in xs[..full].iter_mut().zip(ws).zip(bits.iter_mut()) {
        let u = _mm256_srli_epi32::<8>(bytemuck::cast::<[u32; 8], __m256i>(*w));
        let keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(tv, u));
        let v: __m256 = bytemuck::cast(*g);
        *g = bytemuck::cast(_mm256_and_ps(_mm256_mul_ps(v, s), keep));
        // Lane j's sign bit is bit j: element e is bit e % 8.
        *b = _mm256_movemask_ps(keep) as u8;
    }
    random::keep_bits_f32(
        &mut x[full * 8..],
        &words[(full * 8).min(words.len())..],
        &mut bits[full..],
        t,
        scale,
    );
}
