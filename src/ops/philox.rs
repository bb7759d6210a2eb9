//! Philox4x32-10 (Salmon et al., SC'11), the counter-based generator every
//! backend shares, and the stream layout of `docs/rng.md`.
//!
//! Element `g` of a stream keyed by `seed` is word `g % 4` of the Philox
//! block whose counter is `(b as u32, (b >> 32) as u32, 0, 0)`, `b = g / 4`,
//! under the key `(seed as u32, (seed >> 32) as u32)`. Because element `g`
//! depends on nothing but `(seed, g)`, any split of the work into chunks or
//! threads produces the same bits.

/// Multiplier of the first lane pair.
pub const M0: u32 = 0xD251_1F53;
/// Multiplier of the second lane pair.
pub const M1: u32 = 0xCD9E_8D57;
/// Key increment of the first key word (golden ratio).
pub const W0: u32 = 0x9E37_79B9;
/// Key increment of the second key word (sqrt(3) - 1).
pub const W1: u32 = 0xBB67_AE85;

/// Philox4x32 with `rounds` rounds on one counter block.
pub fn philox4x32(ctr: [u32; 4], key: [u32; 2], rounds: u32) -> [u32; 4] {
    let [mut c0, mut c1, mut c2, mut c3] = ctr;
    let [mut k0, mut k1] = key;
    for r in 0..rounds {
        if r > 0 {
            k0 = k0.wrapping_add(W0);
            k1 = k1.wrapping_add(W1);
        }
        (c0, c1, c2, c3) = round(c0, c1, c2, c3, k0, k1);
    }
    [c0, c1, c2, c3]
}

/// Philox4x32-10, the generator of the contract.
pub fn philox4x32_10(ctr: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    philox4x32(ctr, key, 10)
}

#[inline(always)]
fn round(c0: u32, c1: u32, c2: u32, c3: u32, k0: u32, k1: u32) -> (u32, u32, u32, u32) {
    let p0 = u64::from(M0) * u64::from(c0);
    let p1 = u64::from(M1) * u64::from(c2);
    (
        (p1 >> 32) as u32 ^ c1 ^ k0,
        p1 as u32,
        (p0 >> 32) as u32 ^ c3 ^ k1,
        p0 as u32,
    )
}

/// The key of a seed.
pub fn key_of(seed: u64) -> [u32; 2] {
    [seed as u32, (seed >> 32) as u32]
}

/// Word `g` of the stream keyed by `seed` (the scalar reference).
pub fn stream_word(seed: u64, g: u64) -> u32 {
    let b = g / 4;
    philox4x32_10([b as u32, (b >> 32) as u32, 0, 0], key_of(seed))[(g % 4) as usize]
}

/// Number of blocks computed together, in structure-of-arrays form, so the
/// rounds vectorise.
pub const LANES: usize = 16;

/// Words of `LANES` consecutive blocks starting at block `first`, as
/// `out[word][lane]`: element `4 * (first + lane) + word` of the stream.
#[inline(always)]
pub fn blocks(key: [u32; 2], first: u64) -> [[u32; LANES]; 4] {
    let mut c0 = [0u32; LANES];
    let mut c1 = [0u32; LANES];
    let mut c2 = [0u32; LANES];
    let mut c3 = [0u32; LANES];
    for (i, (a, b)) in c0.iter_mut().zip(c1.iter_mut()).enumerate() {
        let blk = first.wrapping_add(i as u64);
        *a = blk as u32;
        *b = (blk >> 32) as u32;
    }
    let [mut k0, mut k1] = key;
    for r in 0..10 {
        if r > 0 {
            k0 = k0.wrapping_add(W0);
            k1 = k1.wrapping_add(W1);
        }
        for i in 0..LANES {
            (c0[i], c1[i], c2[i], c3[i]) = round(c0[i], c1[i], c2[i], c3[i], k0, k1);
        }
    }
    [c0, c1, c2, c3]
}

/// Stream words per tile: the words of `LANES` blocks.
pub const TILE_WORDS: usize = 4 * LANES;

/// Stream words `4 * first .. 4 * (first + LANES)` in stream order.
#[inline(always)]
pub fn tile(key: [u32; 2], first: u64) -> [u32; TILE_WORDS] {
    let blk = blocks(key, first);
    let mut words = [0u32; TILE_WORDS];
    for (lane, quad) in words.chunks_exact_mut(4).enumerate() {
        for (w, slot) in quad.iter_mut().enumerate() {
            *slot = blk[w][lane];
        }
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    // Random123 kat_vectors for philox4x32.
    #[test]
    fn known_answer_vectors() {
        assert_eq!(
            philox4x32_10([0; 4], [0; 2]),
            [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]
        );
        assert_eq!(
            philox4x32_10([u32::MAX; 4], [u32::MAX; 2]),
            [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]
        );
        assert_eq!(
            philox4x32_10(
                [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
                [0xa4093822, 0x299f31d0]
            ),
            [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
        );
        assert_eq!(
            philox4x32([0; 4], [0; 2], 7),
            [0x5f6fb709, 0x0d893f64, 0x4f121f81, 0x4f730a48]
        );
    }

    #[test]
    fn batched_blocks_match_the_scalar_reference() {
        for (seed, first) in [(0u64, 0u64), (1234, 7), (u64::MAX, (1u64 << 32) - 3)] {
            let words = blocks(key_of(seed), first);
            for lane in 0..LANES {
                for (w, row) in words.iter().enumerate() {
                    let g = 4 * (first + lane as u64) + w as u64;
                    assert_eq!(row[lane], stream_word(seed, g), "seed {seed} g {g}");
                }
            }
        }
    }
}
