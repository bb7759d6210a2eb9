//! Random kernels on f32 tiles: bernoulli fill and fused dropout, both
//! reading the Philox stream through the same tile walker.

use super::cpu_path::KeepBitsFn;
use super::philox::{TILE_WORDS, key_of};

/// Makes a tile generator for a key: `tiles(key)` returns a function that
/// maps a block index `b` to stream words `4 * b ..` in stream order
/// ([`super::philox::tile`], or a faster equivalent for the running CPU,
/// which can prepare per-key state such as the round keys once per call).
pub trait TileFn: Fn([u32; 2]) -> Self::Gen + Copy {
    /// The generator for one key.
    type Gen: FnMut(u64) -> [u32; TILE_WORDS];
}
impl<F, G> TileFn for F
where
    F: Fn([u32; 2]) -> G + Copy,
    G: FnMut(u64) -> [u32; TILE_WORDS],
{
    type Gen = G;
}

/// The portable generator: [`super::philox::tile`].
#[inline(always)]
pub(crate) fn portable(key: [u32; 2]) -> impl FnMut(u64) -> [u32; TILE_WORDS] {
    #[inline(always)]
    move |first| super::philox::tile(key, first)
}

/// Calls `f(pos, words)` for consecutive pieces of `[0, n)`, where
/// `words[k]` is stream word `start + pos + k`. Pieces are at most one tile
/// long and, after the first, start on a block boundary.
#[inline(always)]
fn for_each_tile(
    tile: impl TileFn,
    seed: u64,
    start: u64,
    n: usize,
    mut f: impl FnMut(usize, &[u32]),
) {
    let mut generate = tile(key_of(seed));
    let mut pos = 0;
    while pos < n {
        let g = start.wrapping_add(pos as u64);
        let skip = (g % 4) as usize;
        let words = generate(g / 4);
        // Positions wrap at 2^64 (back to block 0), so a tile must not run
        // past u64::MAX into blocks no position maps to.
        let to_wrap = usize::try_from(u64::MAX - g).map_or(usize::MAX, |w| w.saturating_add(1));
        let take = (TILE_WORDS - skip).min(n - pos).min(to_wrap);
        f(pos, &words[skip..skip + take]);
        pos += take;
    }
}

/// The integer form of `u < q` for `u = (word >> 8) * 2^-24`: `q * 2^24` is
/// exact in f32 (a power-of-two scaling), and for an integer `x`,
/// `x < q * 2^24` exactly when `x < ceil(q * 2^24)`.
#[inline(always)]
pub(crate) fn threshold(q: f32) -> u32 {
    (q * 16_777_216.0).ceil() as u32
}

/// `out[i] = 1.0` where stream element `start + i` falls below `t`, else `0.0`.
#[inline(always)]
pub(crate) fn bernoulli_f32(tile: impl TileFn, out: &mut [f32], t: u32, seed: u64, start: u64) {
    for_each_tile(
        tile,
        seed,
        start,
        out.len(),
        #[inline(always)]
        |pos, words| {
            for (o, &w) in out[pos..pos + words.len()].iter_mut().zip(words) {
                *o = if (w >> 8) < t { 1.0 } else { 0.0 };
            }
        },
    );
}

/// `out[i] = 1` where stream element `start + i` falls below `t`, else `0`:
/// [`bernoulli_f32`]'s decisions, one byte each.
#[inline(always)]
pub(crate) fn bernoulli_u8(tile: impl TileFn, out: &mut [u8], t: u32, seed: u64, start: u64) {
    for_each_tile(
        tile,
        seed,
        start,
        out.len(),
        #[inline(always)]
        |pos, words| {
            for (o, &w) in out[pos..pos + words.len()].iter_mut().zip(words) {
                *o = u8::from((w >> 8) < t);
            }
        },
    );
}

/// `x[i] = x[i] * scale` where stream element `start + i` falls below `t`
/// (kept), else `0.0`.
#[inline(always)]
pub(crate) fn dropout_f32(
    tile: impl TileFn,
    x: &mut [f32],
    t: u32,
    scale: f32,
    seed: u64,
    start: u64,
) {
    for_each_tile(
        tile,
        seed,
        start,
        x.len(),
        #[inline(always)]
        |pos, words| {
            for (v, &w) in x[pos..pos + words.len()].iter_mut().zip(words) {
                *v = if (w >> 8) < t { *v * scale } else { 0.0 };
            }
        },
    );
}

/// Elements the bit-mask dropout draws from the stream at a time: whole
/// mask bytes, a few Philox tiles.
const BIT_GROUP: usize = 256;

/// [`dropout_f32`], also writing the keep decisions into `bits`, one bit
/// per element (bit `i % 8` of byte `i / 8`; bits past `x`'s last element
/// 0). `bits` holds `ceil(x.len() / 8)` bytes; a shorter one stops the work
/// where it ends. `keep` applies and packs each group's decisions
/// ([`keep_bits_f32`] or an equivalent for the running CPU).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) fn dropout_bits_f32(
    tile: impl TileFn,
    keep: impl KeepBitsFn,
    x: &mut [f32],
    bits: &mut [u8],
    t: u32,
    scale: f32,
    seed: u64,
    start: u64,
) {
    let mut words = [0u32; BIT_GROUP];
    let groups = x.chunks_mut(BIT_GROUP).zip(bits.chunks_mut(BIT_GROUP / 8));
    for (k, (xs, bs)) in groups.enumerate() {
        let first = start.wrapping_add((k * BIT_GROUP) as u64);
        for_each_tile(
            tile,
            seed,
            first,
            xs.len(),
            #[inline(always)]
            |pos, w| words[pos..pos + w.len()].copy_from_slice(w),
        );
        keep(xs, &words[..xs.len()], bs, t, scale);
    }
}

/// `x[i] = x[i] * scale` where word `words[i]` falls below `t` (kept), else
/// `0.0`, and the decisions packed into `bits` (bit `i % 8` of byte
/// `i / 8`, bits past the last element 0); stops where the shortest of the
/// three ends.
#[inline(always)]
pub(crate) fn keep_bits_f32(x: &mut [f32], words: &[u32], bits: &mut [u8], t: u32, scale: f32) {
    for ((xe, we), b) in x.chunks_mut(8).zip(words.chunks(8)).zip(bits) {
        let mut byte = 0u8;
        for (j, (v, &w)) in xe.iter_mut().zip(we).enumerate() {
            let keep = (w >> 8) < t;
            *v = if keep { *v * scale } else { 0.0 };
            byte |= u8::from(keep) << j;
        }
        *b = byte;
    }
}

#[cfg(test)]
mod tests {
    use super::super::philox::stream_word;
    use super::*;

    #[test]
    fn threshold_matches_the_float_comparison() {
        for q in [0.0f32, 1e-30, 0.1, 0.3, 0.5, 0.7, 0.999_999_94, 1.0] {
            let t = threshold(q);
            for x in [0u32, 1, t.saturating_sub(1), t, t + 1, (1 << 24) - 1] {
                let u = x as f32 * (1.0 / 16_777_216.0);
                assert_eq!(x < t, u < q, "q {q} x {x}");
            }
        }
    }

    #[test]
    fn tiles_cover_every_element_once_in_order() {
        for start in [
            0u64,
            1,
            3,
            4,
            63,
            64,
            65,
            u64::MAX - 270,
            u64::MAX - 100,
            u64::MAX,
        ] {
            for n in [0usize, 1, 3, 63, 64, 65, 200] {
                let mut seen = Vec::new();
                for_each_tile(portable, 99, start, n, |pos, words| {
                    assert_eq!(pos, seen.len());
                    seen.extend_from_slice(words);
                });
                let expected: Vec<u32> = (0..n)
                    .map(|i| stream_word(99, start.wrapping_add(i as u64)))
                    .collect();
                assert_eq!(seen, expected, "start {start} n {n}");
            }
        }
    }
}
