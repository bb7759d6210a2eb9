//! Philox4x32-10 tiles with AVX2.
//!
//! The portable code in `philox.rs` is the definition; this is the same
//! arithmetic spelled with AVX2 intrinsics, because the autovectoriser
//! turns the widening multiplies into shuffles and spills.
//!
//! Layout: each 32-bit Philox word sits in the low half of a 64-bit lane,
//! four blocks per vector. `vpmuludq` multiplies exactly those low halves
//! into full 64-bit products, so a round is two multiplies, two shifts and
//! four xors per four blocks, with no shuffles. The upper halves carry
//! garbage that nothing reads: the multiplies ignore them and the final
//! packing keeps only the low halves. Tests compare every word with the
//! portable code.
//!
//! All of it is safe Rust: the intrinsics take no pointers and are called
//! from functions compiled with AVX2 enabled.

use std::arch::x86_64::{
    __m256i, _mm256_add_epi64, _mm256_blend_epi32, _mm256_mul_epu32, _mm256_permute2x128_si256,
    _mm256_set1_epi32, _mm256_set1_epi64x, _mm256_setr_epi64x, _mm256_slli_epi64,
    _mm256_srli_epi64, _mm256_unpackhi_epi64, _mm256_unpacklo_epi64, _mm256_xor_si256,
};

use super::philox::{M0, M1, TILE_WORDS, W0, W1};

/// Four words (one per Philox lane) of four blocks.
type Quad = [__m256i; 4];

#[inline]
#[target_feature(enable = "avx2")]
fn counters(first: u64) -> Quad {
    let blk = _mm256_add_epi64(
        _mm256_set1_epi64x(first as i64),
        _mm256_setr_epi64x(0, 1, 2, 3),
    );
    let zero = _mm256_set1_epi64x(0);
    [blk, _mm256_srli_epi64::<32>(blk), zero, zero]
}

#[inline]
#[target_feature(enable = "avx2")]
fn round(c: Quad, m0: __m256i, m1: __m256i, k0: __m256i, k1: __m256i) -> Quad {
    let p0 = _mm256_mul_epu32(c[0], m0);
    let p1 = _mm256_mul_epu32(c[2], m1);
    [
        _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64::<32>(p1), c[1]), k0),
        p1,
        _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64::<32>(p0), c[3]), k1),
        p0,
    ]
}

/// Packs the low halves into stream order: two vectors holding blocks
/// 0, 1 and 2, 3, each block's words 0..3 in order.
#[inline]
#[target_feature(enable = "avx2")]
fn pack(c: Quad) -> [__m256i; 2] {
    let w01 = _mm256_blend_epi32::<0b1010_1010>(c[0], _mm256_slli_epi64::<32>(c[1]));
    let w23 = _mm256_blend_epi32::<0b1010_1010>(c[2], _mm256_slli_epi64::<32>(c[3]));
    let even = _mm256_unpacklo_epi64(w01, w23); // block 0 | block 2
    let odd = _mm256_unpackhi_epi64(w01, w23); // block 1 | block 3
    [
        _mm256_permute2x128_si256::<0x20>(even, odd),
        _mm256_permute2x128_si256::<0x31>(even, odd),
    ]
}

/// Eight blocks from `first`: two independent groups of four, interleaved
/// round by round so their multiplies overlap.
#[inline]
#[target_feature(enable = "avx2")]
fn eight_blocks(schedule: &[[__m256i; 2]; 10], first: u64) -> [__m256i; 4] {
    let (m0, m1) = (_mm256_set1_epi32(M0 as i32), _mm256_set1_epi32(M1 as i32));
    let mut a = counters(first);
    let mut b = counters(first.wrapping_add(4));
    // Written out ten times: as a loop, the compiler keeps the loop and
    // spends a third of it on register moves for the word rotation.
    macro_rules! rounds {
        ($($r:literal)*) => {$(
            let [k0, k1] = schedule[$r];
            a = round(a, m0, m1, k0, k1);
            b = round(b, m0, m1, k0, k1);
        )*};
    }
    rounds!(0 1 2 3 4 5 6 7 8 9);
    let [a0, a1] = pack(a);
    let [b0, b1] = pack(b);
    [a0, a1, b0, b1]
}

/// The ten round keys, broadcast.
#[inline]
#[target_feature(enable = "avx2")]
fn schedule(key: [u32; 2]) -> [[__m256i; 2]; 10] {
    let [mut k0, mut k1] = key;
    std::array::from_fn(|r| {
        if r > 0 {
            k0 = k0.wrapping_add(W0);
            k1 = k1.wrapping_add(W1);
        }
        [
            _mm256_set1_epi64x(i64::from(k0)),
            _mm256_set1_epi64x(i64::from(k1)),
        ]
    })
}

/// The round keys of one key, prepared once per kernel call.
#[derive(Clone, Copy)]
pub(crate) struct Schedule([[__m256i; 2]; 10]);

/// Prepares the round keys of `key`.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn prepare(key: [u32; 2]) -> Schedule {
    Schedule(schedule(key))
}

/// [`super::philox::tile`] computed with AVX2.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn tile(ks: &Schedule, first: u64) -> [u32; TILE_WORDS] {
    let ks = &ks.0;
    let lo = eight_blocks(ks, first);
    let hi = eight_blocks(ks, first.wrapping_add(8));
    let vectors: [__m256i; 8] = [lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]];
    bytemuck::cast(vectors)
}
