//! The AscendC kernels of `kernels/ascend/`, compiled unmodified against the
//! CPU shim, against the host reference (`tensor_arena::ops`) bit for bit:
//! every kernel, every element type, lengths 1 to 1,000,003, 1 to 48 cores,
//! several tile lengths, seeds, offsets (straddling a 2^32-block boundary
//! and the 2^64 wrap) and probabilities; the u8-mask kernels against the
//! host's f32 decisions.
//!
//! Needs a C++ compiler at build time (see build.rs); nothing here has run
//! on an NPU.

mod support;

use support::elem::Elem;

use half::{bf16, f16};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use support::shim::{self, Shim};
use tensor_arena::device::ascend::abi::{
    DEFAULT_TILE_LENGTH, Tiling, dropout_backward_entry_point, entry_point,
};
use tensor_arena::ops::{self, Kernel, RngState};

const LENGTHS: [usize; 7] = [1, 31, 32, 255, 256, 4097, 1_000_003];
const BLOCKS: [u32; 5] = [1, 2, 8, 20, 48];
/// Tile lengths for the shorter calls: the default (one tile per core) and
/// small ones that give every core several tiles and a ragged last one.
const SMALL_TILES: [u32; 3] = [DEFAULT_TILE_LENGTH, 64, 192];
const LONG: usize = 1_000_003;

const RNGS: [RngState; 6] = [
    RngState { seed: 0, offset: 0 },
    RngState {
        seed: 1234,
        offset: 0,
    },
    RngState {
        seed: u64::MAX,
        offset: 5,
    },
    RngState {
        seed: 0xdead_beef_0123,
        offset: (1 << 34) + 3,
    },
    // The stream position wraps past 2^64 inside the call.
    RngState {
        seed: 7,
        offset: u64::MAX - 100,
    },
    // Block indices cross 2^32 (counter word 1 carries) inside the call.
    RngState {
        seed: 0x1234_5678_9abc,
        offset: (1 << 34) - 37,
    },
];

fn assert_same_bits<T: Elem>(got: &[T], want: &[T], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = (0..got.len()).find(|&i| got[i].bits() != want[i].bits()) {
        panic!(
            "{what}: element {i} of {} is {:?} ({:#x}), the host reference gives {:?} ({:#x})",
            got.len(),
            got[i],
            got[i].bits(),
            want[i],
            want[i].bits()
        );
    }
}

/// Launch result and violations must both be clean.
fn assert_clean(lib: &Shim, rc: u32, what: &str) {
    assert_eq!(lib.violations(), 0, "{what}: {}", lib.report());
    assert_eq!(rc, 0, "{what}: launch returned {rc}");
}

/// Values that exercise rounding, signs, zeros, infinities, NaN and
/// subnormals of every element type.
fn data<T: Elem>(len: usize, seed: u64, with_nan: bool) -> Vec<T> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..len)
        .map(|i| {
            let v = match i % 23 {
                0 => 0.0,
                1 => -0.0,
                2 if with_nan => f32::NAN,
                3 => f32::INFINITY,
                4 => -f32::INFINITY,
                5 => 1e-40,   // f32 subnormal
                6 => 3e-6,    // f16 subnormal
                7 => 60000.0, // near f16's largest finite
                8 => -1.0e30,
                _ => rng.random_range(-100.0f32..100.0) * rng.random_range(0.0f32..2.0),
            };
            T::from_f32(v)
        })
        .collect()
}

/// The tilings a call of `len` elements runs with: every block count, and
/// for shorter calls every small tile length.
fn tilings(len: usize) -> Vec<(u32, Tiling)> {
    let tiles: &[u32] = if len >= LONG {
        &[DEFAULT_TILE_LENGTH]
    } else {
        &SMALL_TILES
    };
    let mut out = Vec::new();
    for &blocks in &BLOCKS {
        for &tile in tiles {
            let t = Tiling::new(len as u64, blocks)
                .and_then(|t| t.with_tile_length(tile))
                .unwrap();
            // Launch all requested cores: the ones past the data must idle.
            out.push((blocks, t));
        }
    }
    out
}

/// (p, rng) pairs for a call of `len` elements: edge probabilities and
/// every stream position for short calls, one pair for the long one.
fn random_cases(len: usize, ps: &[f32]) -> Vec<(f32, RngState)> {
    if len >= LONG {
        return vec![(0.3, RNGS[3]), (0.6, RNGS[5])];
    }
    let mut cases: Vec<(f32, RngState)> = ps
        .iter()
        .enumerate()
        .map(|(i, &p)| (p, RNGS[i % RNGS.len()]))
        .collect();
    cases.extend(RNGS.iter().map(|&r| (0.5, r)));
    cases
}

const BERNOULLI_PS: [f32; 8] = [
    0.0,
    1.0,
    0.5,
    1.0 / 16_777_216.0,       // 2^-24: only u = 0 draws a one
    1.0 - 1.0 / 16_777_216.0, // largest f32 below 1
    0.3,
    1e-30,
    0.7,
];

fn bernoulli_matches_host<T: Elem>() {
    let lib = shim::kernels();
    for len in LENGTHS {
        for (p, rng) in random_cases(len, &BERNOULLI_PS) {
            let kernel = Kernel::Bernoulli { p, rng };
            let entry = entry_point(&kernel, T::DTYPE).unwrap();
            let mut want = vec![T::from_f32(0.0); len];
            ops::bernoulli(&mut want, p, rng).unwrap();
            for (blocks, t) in tilings(len) {
                // Stale contents must all be overwritten.
                let mut got = vec![T::from_f32(7.0); len];
                lib.reset();
                let rc = lib.random(entry, blocks, &mut got, p, rng, &t);
                let what = format!(
                    "{entry} len {len} blocks {blocks} tile {} p {p} {rng:?}",
                    t.tile_length
                );
                assert_clean(lib, rc, &what);
                assert_same_bits(&got, &want, &what);
            }
        }
    }
}

#[test]
fn bernoulli_f32_matches_host() {
    bernoulli_matches_host::<f32>();
}

#[test]
fn bernoulli_f16_matches_host() {
    bernoulli_matches_host::<f16>();
}

#[test]
fn bernoulli_bf16_matches_host() {
    bernoulli_matches_host::<bf16>();
}

#[test]
fn bernoulli_reproduces_the_rng_md_check_value() {
    // docs/rng.md: seed 1234, offset 0, p = 0.5, first 16 elements.
    let lib = shim::kernels();
    let mut got = vec![0f32; 16];
    let t = Tiling::new(16, 2).unwrap();
    lib.reset();
    let rc = lib.random(
        "ta_bernoulli_f32",
        2,
        &mut got,
        0.5,
        RngState::new(1234),
        &t,
    );
    assert_clean(lib, rc, "check value");
    let ones: Vec<u8> = got.iter().map(|&v| v as u8).collect();
    assert_eq!(ones, [1, 0, 1, 0, 0, 1, 0, 1, 1, 0, 0, 0, 0, 1, 1, 0]);
}

const DROPOUT_PS: [f32; 7] = [
    0.0,
    1.0,
    0.5,
    0.1,
    1.0 / 16_777_216.0,
    1.0 - 1.0 / 16_777_216.0,
    0.9,
];

fn dropout_matches_host<T: Elem>() {
    let lib = shim::kernels();
    for len in LENGTHS {
        let x: Vec<T> = data(len, len as u64, true);
        let grad: Vec<T> = data(len, len as u64 + 1, true);
        for (p, rng) in random_cases(len, &DROPOUT_PS) {
            let kernel = Kernel::Dropout { p, rng };
            let forward = entry_point(&kernel, T::DTYPE).unwrap();
            let backward = dropout_backward_entry_point(T::DTYPE).unwrap();
            let mut want_x = x.clone();
            ops::dropout(&mut want_x, p, rng).unwrap();
            let mut want_grad = grad.clone();
            ops::dropout(&mut want_grad, p, rng).unwrap();
            for (blocks, t) in tilings(len) {
                let what = format!(
                    "len {len} blocks {blocks} tile {} p {p} {rng:?}",
                    t.tile_length
                );
                let mut got = x.clone();
                lib.reset();
                let rc = lib.random(forward, blocks, &mut got, p, rng, &t);
                assert_clean(lib, rc, &format!("{forward} {what}"));
                assert_same_bits(&got, &want_x, &format!("{forward} {what}"));
                // The backward pass regenerates the forward's mask from the
                // saved (seed, offset).
                let mut got = grad.clone();
                let rc = lib.random(backward, blocks, &mut got, p, rng, &t);
                assert_clean(lib, rc, &format!("{backward} {what}"));
                assert_same_bits(&got, &want_grad, &format!("{backward} {what}"));
            }
        }
    }
}

#[test]
fn dropout_f32_forward_and_backward_match_host() {
    dropout_matches_host::<f32>();
}

#[test]
fn dropout_f16_forward_and_backward_match_host() {
    dropout_matches_host::<f16>();
}

#[test]
fn dropout_bf16_forward_and_backward_match_host() {
    dropout_matches_host::<bf16>();
}

/// Masks with every kind of value: zeros of both signs count as zero, NaN
/// and everything else as set.
fn mask_data<T: Elem>(len: usize, seed: u64) -> Vec<T> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let kinds = [0.0, -0.0, 1.0, 0.5, f32::NAN, -2.0, f32::INFINITY, 1e-40];
    (0..len)
        .map(|_| T::from_f32(kinds[rng.random_range(0..kinds.len())]))
        .collect()
}

fn elementwise_matches_host<T: Elem>() {
    let lib = shim::kernels();
    let scales = [2.0f32, 0.5, 1.0 / 0.9, -3.0, 0.0, f32::INFINITY, 3.0e38];
    for len in LENGTHS {
        let x: Vec<T> = data(len, 11 * len as u64, true);
        // NaN in one operand only: which NaN a product of two NaNs keeps is
        // not part of the contract.
        let y: Vec<T> = data(len, 13 * len as u64 + 1, false);
        let mask: Vec<T> = mask_data(len, 17 * len as u64);
        let scale_set: &[f32] = if len >= LONG { &scales[..2] } else { &scales };
        let mul_entry = entry_point(&Kernel::Mul, T::DTYPE).unwrap();
        let mut want_mul = x.clone();
        ops::mul(&mut want_mul, &y).unwrap();
        for (blocks, t) in tilings(len) {
            let what = format!(
                "{mul_entry} len {len} blocks {blocks} tile {}",
                t.tile_length
            );
            let mut got = x.clone();
            lib.reset();
            let rc = lib.mul(mul_entry, blocks, &mut got, &y, &t);
            assert_clean(lib, rc, &what);
            assert_same_bits(&got, &want_mul, &what);
        }
        for &s in scale_set {
            let mask_entry = entry_point(&Kernel::ApplyMask { scale: s }, T::DTYPE).unwrap();
            let scalar_entry = entry_point(&Kernel::MulScalar { s }, T::DTYPE).unwrap();
            let mut want_mask = x.clone();
            ops::apply_mask(&mut want_mask, &mask, s).unwrap();
            let mut want_scalar = x.clone();
            ops::mul_scalar(&mut want_scalar, s);
            for (blocks, t) in tilings(len) {
                let what = format!("len {len} blocks {blocks} tile {} scale {s}", t.tile_length);
                let mut got = x.clone();
                lib.reset();
                let rc = lib.apply_mask(mask_entry, blocks, &mut got, &mask, s, &t);
                assert_clean(lib, rc, &format!("{mask_entry} {what}"));
                assert_same_bits(&got, &want_mask, &format!("{mask_entry} {what}"));
                let mut got = x.clone();
                let rc = lib.mul_scalar(scalar_entry, blocks, &mut got, s, &t);
                assert_clean(lib, rc, &format!("{scalar_entry} {what}"));
                assert_same_bits(&got, &want_scalar, &format!("{scalar_entry} {what}"));
            }
        }
    }
}

#[test]
fn elementwise_f32_kernels_match_host() {
    elementwise_matches_host::<f32>();
}

#[test]
fn elementwise_f16_kernels_match_host() {
    elementwise_matches_host::<f16>();
}

#[test]
fn elementwise_bf16_kernels_match_host() {
    elementwise_matches_host::<bf16>();
}

#[test]
fn a_call_split_in_two_launches_equals_one_launch() {
    // Element i reads stream element offset + i only, so two launches at
    // offsets o and o + k give the bits of one launch of the whole range.
    let lib = shim::kernels();
    let rng = RngState {
        seed: 99,
        offset: 6,
    };
    let (len, k) = (5000usize, 1237usize);
    let whole_t = Tiling::new(len as u64, 8).unwrap();
    let mut whole = vec![0f32; len];
    lib.reset();
    let rc = lib.random("ta_bernoulli_f32", 8, &mut whole, 0.4, rng, &whole_t);
    assert_clean(lib, rc, "whole");
    let mut parts = vec![0f32; len];
    let (a, b) = parts.split_at_mut(k);
    let rc = lib.random(
        "ta_bernoulli_f32",
        3,
        a,
        0.4,
        rng,
        &Tiling::new(k as u64, 3).unwrap(),
    );
    assert_clean(lib, rc, "first part");
    let second = RngState {
        seed: rng.seed,
        offset: rng.offset + k as u64,
    };
    let t = Tiling::new((len - k) as u64, 5).unwrap();
    let rc = lib.random("ta_bernoulli_f32", 5, b, 0.4, second, &t);
    assert_clean(lib, rc, "second part");
    assert_same_bits(&parts, &whole, "split launches");
}

/// The u8-mask entry point of apply_mask for `T`: not wired into the
/// Ascend backend yet, so named here.
fn apply_mask_u8_entry<T: Elem>() -> &'static str {
    match T::DTYPE {
        tensor_arena::DType::F32 => "ta_apply_mask_u8_f32",
        tensor_arena::DType::F16 => "ta_apply_mask_u8_f16",
        _ => "ta_apply_mask_u8_bf16",
    }
}

#[test]
fn bernoulli_u8_makes_the_f32_decisions() {
    // byte = 1 exactly where the f32 kernel writes 1.0, for the same
    // (seed, offset).
    let lib = shim::kernels();
    for len in LENGTHS {
        for (p, rng) in random_cases(len, &BERNOULLI_PS) {
            let mut host = vec![0f32; len];
            ops::bernoulli(&mut host, p, rng).unwrap();
            let want: Vec<u8> = host.iter().map(|&v| u8::from(v != 0.0)).collect();
            // The host's own u8 path decides the same.
            let mut host_u8 = vec![0u8; len];
            ops::bernoulli(&mut host_u8, p, rng).unwrap();
            assert_eq!(host_u8, want, "host u8 vs f32 decisions, len {len} p {p}");
            for (blocks, t) in tilings(len) {
                let mut got = vec![7u8; len];
                lib.reset();
                let rc = lib.random("ta_bernoulli_u8", blocks, &mut got, p, rng, &t);
                let what = format!(
                    "ta_bernoulli_u8 len {len} blocks {blocks} tile {} p {p} {rng:?}",
                    t.tile_length
                );
                assert_clean(lib, rc, &what);
                if let Some(i) = (0..len).find(|&i| got[i] != want[i]) {
                    panic!(
                        "{what}: byte {i} is {}, the f32 path decides {}",
                        got[i], want[i]
                    );
                }
            }
        }
    }
}

/// Bytes with zeros, ones and every other kind of value.
fn byte_mask(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..len)
        .map(|_| match rng.random_range(0..4) {
            0 | 1 => 0,
            2 => 1,
            _ => rng.random(),
        })
        .collect()
}

fn apply_mask_u8_matches_host<T: Elem>() {
    let lib = shim::kernels();
    let entry = apply_mask_u8_entry::<T>();
    for len in LENGTHS {
        let x: Vec<T> = data(len, 19 * len as u64, true);
        let mask = byte_mask(len, 23 * len as u64);
        // The host's path: a mask in x's type, 1 where the byte is set.
        let as_t: Vec<T> = mask
            .iter()
            .map(|&b| T::from_f32(if b != 0 { 1.0 } else { 0.0 }))
            .collect();
        let scales: &[f32] = if len >= LONG {
            &[2.0]
        } else {
            &[2.0, 1.0 / 0.9, -3.0, 0.0]
        };
        for &s in scales {
            let mut want = x.clone();
            ops::apply_mask(&mut want, &as_t, s).unwrap();
            // The host's own u8-mask path gives the same bits.
            let mut want_u8 = x.clone();
            ops::apply_mask(&mut want_u8, &mask, s).unwrap();
            assert_same_bits(
                &want_u8,
                &want,
                &format!("host u8 mask len {len} scale {s}"),
            );
            for (blocks, t) in tilings(len) {
                let what = format!(
                    "{entry} len {len} blocks {blocks} tile {} scale {s}",
                    t.tile_length
                );
                let mut got = x.clone();
                lib.reset();
                let rc = lib.apply_byte_mask(entry, blocks, &mut got, &mask, s, &t);
                assert_clean(lib, rc, &what);
                assert_same_bits(&got, &want, &what);
            }
        }
    }
}

#[test]
fn apply_mask_u8_f32_matches_host() {
    apply_mask_u8_matches_host::<f32>();
}

#[test]
fn apply_mask_u8_f16_matches_host() {
    apply_mask_u8_matches_host::<f16>();
}

#[test]
fn apply_mask_u8_bf16_matches_host() {
    apply_mask_u8_matches_host::<bf16>();
}

#[test]
fn a_u8_mask_round_trip_equals_fused_dropout() {
    // bernoulli_u8(q) then apply_mask_u8(1 / q) is the fused dropout, bit
    // for bit: the split CANN uses (DropoutGenMask, DropoutDoMask).
    let lib = shim::kernels();
    let (len, p) = (100_003usize, 0.25f32);
    let rng = RNGS[5];
    let q = 1.0 - p;
    let t = Tiling::new(len as u64, 48).unwrap();
    let x: Vec<f32> = data(len, 29, true);
    let mut fused = x.clone();
    lib.reset();
    let rc = lib.random("ta_dropout_f32", t.num_blocks, &mut fused, p, rng, &t);
    assert_clean(lib, rc, "fused");
    let mut mask = vec![0u8; len];
    let rc = lib.random("ta_bernoulli_u8", t.num_blocks, &mut mask, q, rng, &t);
    assert_clean(lib, rc, "mask");
    let mut split = x.clone();
    let rc = lib.apply_byte_mask(
        "ta_apply_mask_u8_f32",
        t.num_blocks,
        &mut split,
        &mask,
        1.0 / q,
        &t,
    );
    assert_clean(lib, rc, "apply");
    assert_same_bits(&split, &fused, "u8 mask round trip");
}

/// The bit-mask dropout entry points for `T` (forward, apply).
fn bitmask_entries<T: Elem>() -> (&'static str, &'static str) {
    match T::DTYPE {
        tensor_arena::DType::F32 => ("ta_dropout_bitmask_f32", "ta_apply_bitmask_f32"),
        tensor_arena::DType::F16 => ("ta_dropout_bitmask_f16", "ta_apply_bitmask_f16"),
        _ => ("ta_dropout_bitmask_bf16", "ta_apply_bitmask_bf16"),
    }
}

fn bitmask_dropout_matches_the_fused_kernel<T: Elem>() {
    // Forward: x as the fused dropout leaves it, and bit i set exactly where
    // element i is kept; backward: the gradient as the fused kernel leaves
    // it with the forward's (seed, offset).
    let lib = shim::kernels();
    let (forward, apply) = bitmask_entries::<T>();
    for len in LENGTHS {
        let x: Vec<T> = data(len, 31 * len as u64, true);
        let grad: Vec<T> = data(len, 37 * len as u64, true);
        for (p, rng) in random_cases(len, &DROPOUT_PS) {
            let mut want_x = x.clone();
            ops::dropout(&mut want_x, p, rng).unwrap();
            let mut want_grad = grad.clone();
            ops::dropout(&mut want_grad, p, rng).unwrap();
            let mut kept = vec![0f32; len];
            ops::bernoulli(&mut kept, 1.0 - p, rng).unwrap();
            let scale = 1.0 / (1.0 - p);
            for (blocks, t) in tilings(len) {
                let what = format!(
                    "len {len} blocks {blocks} tile {} p {p} {rng:?}",
                    t.tile_length
                );
                let mut got = x.clone();
                let mut bits = vec![0xA5u8; len.div_ceil(8)];
                lib.reset();
                let rc = lib.random_bits(forward, blocks, &mut got, &mut bits, p, rng, &t);
                assert_clean(lib, rc, &format!("{forward} {what}"));
                assert_same_bits(&got, &want_x, &format!("{forward} {what}"));
                if let Some(i) =
                    (0..len).find(|&i| ((bits[i / 8] >> (i % 8)) & 1 == 1) != (kept[i] != 0.0))
                {
                    panic!(
                        "{forward} {what}: mask bit {i} disagrees with the host's keep decision"
                    );
                }
                let mut got = grad.clone();
                let rc = lib.apply_byte_mask(apply, blocks, &mut got, &bits, scale, &t);
                assert_clean(lib, rc, &format!("{apply} {what}"));
                assert_same_bits(&got, &want_grad, &format!("{apply} {what}"));
            }
        }
    }
}

#[test]
fn bitmask_dropout_f32_matches_the_fused_kernel() {
    bitmask_dropout_matches_the_fused_kernel::<f32>();
}

#[test]
fn bitmask_dropout_f16_matches_the_fused_kernel() {
    bitmask_dropout_matches_the_fused_kernel::<f16>();
}

#[test]
fn bitmask_dropout_bf16_matches_the_fused_kernel() {
    bitmask_dropout_matches_the_fused_kernel::<bf16>();
}
