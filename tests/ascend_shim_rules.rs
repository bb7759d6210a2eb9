//! The AscendC shim enforces the device's rules: each rule broken on purpose
//! by a small kernel (kernels/shim/selftest/) is caught and reported, the
//! shim's own semantics pass its C++ unit tests, its half/bfloat16
//! conversions equal the `half` crate's bit for bit, the Unified Buffer
//! capacity is a working limit for the real kernels, and the shim's
//! declarations refuse what asc-devkit's headers refuse (a call through a
//! const path to an API the headers declare non-const).

mod support;

use half::{bf16, f16};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use support::shim::{self, MTE2, MTE3, PARAM_INVALID, S, V, VIOLATION};
use tensor_arena::DType;
use tensor_arena::device::ascend::abi::{DEFAULT_TILE_LENGTH, Tiling, entry_point, ub_footprint};
use tensor_arena::ops::{Kernel, RngState};

// The self-test kernels, numbered as `enum Rule` in selftest_lib.cpp.
const SHORT_DATACOPY: u32 = 0;
const MISALIGNED_UB: u32 = 1;
const UB_OVERFLOW: u32 = 2;
const FREE_UNALLOCATED: u32 = 3;
const DOUBLE_FREE: u32 = 4;
const DEQUE_EMPTY: u32 = 5;
const ENQUE_OVER_DEPTH: u32 = 6;
const ALLOC_EXHAUSTED: u32 = 7;
const USE_AFTER_FREE: u32 = 8;
const USE_WHILE_QUEUED: u32 = 9;
const LEAK: u32 = 10;
const COMPARE_COUNT: u32 = 11;
const MISSING_S_TO_V: u32 = 12;
const MISSING_V_TO_S: u32 = 13;
const CROSS_CORE: u32 = 14;
const GM_OUT_OF_BOUNDS: u32 = 15;
const WAIT_WITHOUT_SET: u32 = 16;
const WRONG_POSITION: u32 = 17;
const CORRECT: u32 = 18;
const AND_WORD_COUNT: u32 = 19;
const MISSING_BARRIER: u32 = 20;
const MISSING_DEQUE: u32 = 21;
const THROUGH_VECOUT: u32 = 22;
const SHIFT_TOO_FAR: u32 = 23;
const INT32_LESS: u32 = 24;
const SELECT_MODE: u32 = 25;
const AND_HALF_COUNT: u32 = 26;

/// Runs self-test kernel `rule` on `x` and returns (launch result, report).
fn run_rule(rule: u32, blocks: u32, x: &mut [f32]) -> (u32, String) {
    let lib = shim::selftest();
    lib.reset();
    let rc = lib.selftest_rule(blocks, x, rule);
    (rc, lib.report())
}

fn ramp(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32 - 40.0).collect()
}

#[test]
fn shim_unit_tests_pass() {
    let lib = shim::selftest();
    // SAFETY: `uint32_t ta_shim_unit_tests(char *buf, size_t cap)`.
    let f: unsafe extern "C" fn(*mut std::ffi::c_char, usize) -> u32 =
        unsafe { lib.function("ta_shim_unit_tests") };
    let mut buf = vec![0u8; 1 << 16];
    // SAFETY: buf holds buf.len() writable bytes.
    let failures = unsafe { f(buf.as_mut_ptr().cast(), buf.len()) };
    let report =
        String::from_utf8_lossy(&buf[..buf.iter().position(|&b| b == 0).unwrap_or(0)]).into_owned();
    println!("{report}");
    assert_eq!(failures, 0, "{report}");
    assert!(report.contains(" passed, 0 failed"), "{report}");
}

#[test]
fn a_well_formed_kernel_records_nothing() {
    let mut x = ramp(100);
    let (rc, report) = run_rule(CORRECT, 1, &mut x);
    assert_eq!((rc, report.as_str()), (0, ""));
    assert_eq!(x, ramp(100).iter().map(|v| v * 2.0).collect::<Vec<_>>());
}

#[test]
fn a_short_datacopy_rounds_down_and_is_reported() {
    // 100 floats = 400 bytes: DataCopy moves 384, so the last 4 elements are
    // neither read nor written back.
    let mut x = ramp(100);
    let (rc, report) = run_rule(SHORT_DATACOPY, 1, &mut x);
    assert_eq!(rc, VIOLATION, "{report}");
    assert!(report.contains("[datacopy-length]"), "{report}");
    assert!(report.contains("400 bytes"), "{report}");
    assert_eq!(report.matches("[datacopy-length]").count(), 2, "{report}");
    let want: Vec<f32> = ramp(100).iter().map(|v| v * 2.0).collect();
    assert_eq!(x[..96], want[..96]);
    assert_eq!(x[96..], ramp(100)[96..], "the tail stays unscaled");
    assert_ne!(x, want, "the forgotten tail shows as a wrong result");
}

#[test]
fn a_misaligned_ub_operand_is_fatal() {
    let mut x = ramp(64);
    let (rc, report) = run_rule(MISALIGNED_UB, 1, &mut x);
    assert_eq!(rc, VIOLATION, "{report}");
    assert!(report.contains("[ub-alignment]"), "{report}");
    assert!(report.contains("not a multiple of 32"), "{report}");
    assert!(report.contains("fatal"), "{report}");
    assert_eq!(x, ramp(64), "nothing was written");
}

#[test]
fn queues_larger_than_the_ub_are_fatal() {
    let mut x = ramp(64);
    let (rc, report) = run_rule(UB_OVERFLOW, 1, &mut x);
    assert_eq!(rc, VIOLATION, "{report}");
    assert!(report.contains("[ub-capacity]"), "{report}");
    // 184 KiB: what a 910B kernel may reserve (TOTAL_VEC_LOCAL_SIZE).
    assert!(report.contains("188416-byte Unified Buffer"), "{report}");
}

#[test]
fn queue_misuse_is_fatal() {
    let cases = [
        (FREE_UNALLOCATED, "not allocated from this queue"),
        (
            DOUBLE_FREE,
            "FreeTensor on VECIN queue #1: VECIN queue #1 buffer 0 is free",
        ),
        (DEQUE_EMPTY, "the queue is empty"),
        (ENQUE_OVER_DEPTH, "already holds its depth of 1"),
        (ALLOC_EXHAUSTED, "all 2 buffers are in use"),
        (
            USE_AFTER_FREE,
            "DataCopy GM->UB: dst (VECIN queue #1 buffer 0) is free",
        ),
        (
            USE_WHILE_QUEUED,
            "Duplicate: dst (VECIN queue #1 buffer 0) is in its queue",
        ),
    ];
    for (rule, needle) in cases {
        let mut x = ramp(64);
        let (rc, report) = run_rule(rule, 1, &mut x);
        assert_eq!(rc, VIOLATION, "rule {rule}: {report}");
        assert!(report.contains("[queue]"), "rule {rule}: {report}");
        assert!(report.contains(needle), "rule {rule}: {report}");
        assert!(report.contains("fatal"), "rule {rule}: {report}");
    }
}

#[test]
fn a_tensor_never_freed_is_reported_when_the_kernel_ends() {
    let mut x = ramp(64);
    let (rc, report) = run_rule(LEAK, 1, &mut x);
    assert_eq!(rc, VIOLATION, "{report}");
    assert!(
        report.contains("still allocated when the kernel ends"),
        "{report}"
    );
}

#[test]
fn a_compare_not_covering_256_bytes_is_reported_and_truncated() {
    // x = x >= 0 ? x : 0 on 100 floats, with one Compares over 400 bytes:
    // only the first 64 elements are compared. The tail is negative, so
    // selecting on mask bits that were never written keeps it negative.
    let input: Vec<f32> = (0..100).map(|i| 40.0 - i as f32).collect();
    let mut x = input.clone();
    let (rc, report) = run_rule(COMPARE_COUNT, 1, &mut x);
    assert_eq!(rc, VIOLATION, "{report}");
    assert!(report.contains("[compare-count]"), "{report}");
    assert!(report.contains("only the first 64 elements"), "{report}");
    let want: Vec<f32> = input.iter().map(|&v| v.max(0.0)).collect();
    assert_eq!(x[..64], want[..64]);
    assert_ne!(x[64..], want[64..], "the uncompared tail is wrong");
}

#[test]
fn missing_scalar_vector_syncs_are_reported() {
    let mut x = ramp(64);
    let (rc, report) = run_rule(MISSING_S_TO_V, 1, &mut x);
    assert_eq!(rc, VIOLATION, "{report}");
    assert!(
        report.contains("[sync]") && report.contains("S_V"),
        "{report}"
    );
    let (rc, report) = run_rule(MISSING_V_TO_S, 1, &mut x);
    assert_eq!(rc, VIOLATION, "{report}");
    assert!(
        report.contains("[sync]") && report.contains("V_S"),
        "{report}"
    );
    let (rc, report) = run_rule(WAIT_WITHOUT_SET, 1, &mut x);
    assert_eq!(rc, VIOLATION, "{report}");
    assert!(report.contains("no matching SetFlag"), "{report}");
}

#[test]
fn cores_writing_the_same_bytes_are_reported() {
    let mut x = ramp(64);
    let (rc, report) = run_rule(CROSS_CORE, 4, &mut x);
    assert_eq!(rc, VIOLATION, "{report}");
    assert!(report.contains("[cross-core]"), "{report}");
    // One core alone is fine.
    let (rc, report) = run_rule(CROSS_CORE, 1, &mut x);
    assert_eq!((rc, report.as_str()), (0, ""));
}

#[test]
fn global_memory_out_of_bounds_is_fatal() {
    let mut x = ramp(100);
    let (rc, report) = run_rule(GM_OUT_OF_BOUNDS, 1, &mut x);
    assert_eq!(rc, VIOLATION, "{report}");
    assert!(report.contains("[gm-bounds]"), "{report}");
    assert!(report.contains("[96, 160)"), "{report}");
}

#[test]
fn copies_between_gm_and_vec_calc_buffers_are_reported() {
    let mut x = ramp(64);
    let (rc, report) = run_rule(WRONG_POSITION, 1, &mut x);
    assert_eq!(rc, VIOLATION, "{report}");
    assert!(report.contains("[position]"), "{report}");
    assert!(report.contains("VECCALC"), "{report}");
}

#[test]
fn copies_through_a_vecout_buffer_with_a_flag_are_allowed() {
    // GM -> VECOUT -> GM, ordered by SetFlag/WaitFlag<MTE2_MTE3>.
    let mut x = ramp(64);
    let (rc, report) = run_rule(THROUGH_VECOUT, 1, &mut x);
    assert_eq!((rc, report.as_str()), (0, ""));
    assert_eq!(x, ramp(64));
}

/// Words with distinct high and low halves, as f32 bit patterns.
fn words(n: usize) -> Vec<f32> {
    (0..n as u32)
        .map(|i| f32::from_bits(0x1234_0000u32.wrapping_mul(i + 1) | (i * 977 + 5)))
        .collect()
}

#[test]
fn and_on_words_with_the_word_count_processes_half_and_is_reported() {
    // c220: a level-2 And on uint32 runs as int16 with the same count.
    let input = words(64);
    let mut x = input.clone();
    let (rc, report) = run_rule(AND_WORD_COUNT, 1, &mut x);
    assert_eq!(rc, VIOLATION, "{report}");
    assert!(report.contains("[logic-count]"), "{report}");
    assert!(report.contains("only the first 32 words"), "{report}");
    for (i, (got, was)) in x.iter().zip(&input).enumerate() {
        let want = if i < 32 {
            was.to_bits() & 0xFFFF
        } else {
            u32::MAX
        };
        assert_eq!(got.to_bits(), want, "word {i}");
    }
    // As uint16 with twice the count: every word, no report.
    let mut x = input.clone();
    let (rc, report) = run_rule(AND_HALF_COUNT, 1, &mut x);
    assert_eq!((rc, report.as_str()), (0, ""));
    for (got, was) in x.iter().zip(&input) {
        assert_eq!(got.to_bits(), was.to_bits() & 0xFFFF);
    }
}

#[test]
fn dependent_instructions_without_their_sync_are_reported() {
    let mut x = ramp(64);
    let (rc, report) = run_rule(MISSING_BARRIER, 1, &mut x);
    assert_eq!(rc, VIOLATION, "{report}");
    assert!(
        report.contains("[sync]") && report.contains("PipeBarrier<PIPE_V>"),
        "{report}"
    );
    let (rc, report) = run_rule(MISSING_DEQUE, 1, &mut x);
    assert_eq!(rc, VIOLATION, "{report}");
    assert!(
        report.contains("[sync]") && report.contains("MTE2_V"),
        "{report}"
    );
}

#[test]
fn operations_the_a2_vector_unit_lacks_are_fatal() {
    for (rule, needle) in [
        (SHIFT_TOO_FAR, "shift 33 outside [0, 32]"),
        (INT32_LESS, "int32 supports CMPMODE::EQ only"),
        (SELECT_MODE, "VSEL_TENSOR_SCALAR_MODE"),
    ] {
        let mut x = ramp(64);
        let (rc, report) = run_rule(rule, 1, &mut x);
        assert_eq!(rc, VIOLATION, "rule {rule}: {report}");
        assert!(report.contains("[unsupported]"), "rule {rule}: {report}");
        assert!(report.contains(needle), "rule {rule}: {report}");
        assert!(report.contains("fatal"), "rule {rule}: {report}");
    }
}

#[test]
fn the_cost_model_counts_a_small_kernel_as_worked_by_hand() {
    // CORRECT on 100 floats, one core: x *= 2 through a VECIN and a VECOUT
    // queue with DataCopyPad (400 bytes each way) and one Muls over 128
    // lanes. By the model's rules (kernels/shim/ta_shim/cost.h,
    // timeline.h): every queue operation and every dispatch is one scalar
    // cycle; one core alone gets the whole measured read (1.456 TB/s) and
    // write (1.105 TB/s) bandwidth at 1.8 GHz; Muls on float is 64
    // elements per cycle, 2 repeats, plus 22 issue cycles.
    let lib = shim::selftest();
    let (clock, cores, hbm) = lib.cost_params();
    assert_eq!((clock, cores, hbm), (1.8e9, 48, 1.6e12));
    let (read, write, issue) = lib.cost_rates();
    assert_eq!((read, issue), (1.456e12, 22.0));
    assert!(
        (write - 8192.0 * 8192.0 * 2.0 / 121.442e-6).abs() < 1.0,
        "{write}"
    );
    let mut x = ramp(100);
    let (rc, report) = run_rule(CORRECT, 1, &mut x);
    assert_eq!((rc, report.as_str()), (0, ""));
    let c = lib.last_cost();
    let copy_in = 400.0 / (read / clock);
    let copy_out = 400.0 / (write / clock);
    assert_eq!(c.blocks, 1);
    assert_eq!(c.critical_busy[V], 2.0 + issue, "{c:?}");
    assert_eq!(
        (
            c.vector_repeat_cycles,
            c.bank_conflict_cycles,
            c.issue_cycles
        ),
        (2.0, 0.0, issue),
        "{c:?}"
    );
    assert_eq!(c.bank_conflict_factor(), 1.0);
    assert!((c.critical_busy[MTE2] - copy_in).abs() < 1e-9, "{c:?}");
    assert!((c.critical_busy[MTE3] - copy_out).abs() < 1e-9, "{c:?}");
    assert_eq!(c.critical_instructions, [8, 1, 1, 1], "{c:?}");
    // Scalar program, one cycle each: Alloc(in) 1, dispatch copy-in 2,
    // EnQue 3, DeQue 4, Alloc(out) 5, dispatch Muls 6 (it runs 6..30: its
    // input arrived at 2 + 0.49), EnQue 7, Free(in) 8, DeQue 9, dispatch
    // copy-out 10 (it waits for the Muls: 30..30.65), Free(out) 11.
    assert_eq!(c.critical_busy[S], 11.0, "{c:?}");
    assert!(
        (c.critical_cycles - (6.0 + 2.0 + issue + copy_out)).abs() < 1e-9,
        "{c:?}"
    );
    assert_eq!(c.gm_bytes, 800);
}

#[test]
fn launches_need_at_least_one_block() {
    let mut x = ramp(64);
    let (rc, report) = run_rule(CORRECT, 0, &mut x);
    assert_eq!(rc, PARAM_INVALID, "{report}");
    assert!(report.contains("[launch]"), "{report}");
}

#[test]
fn the_ub_capacity_limits_the_real_kernels_exactly() {
    // ub_footprint must equal what the kernels reserve: they run with
    // exactly that much UB and fail with 32 bytes less.
    let lib = shim::kernels();
    let default = lib.ub_capacity();
    let rng = RngState::new(3);
    let kernels = [
        Kernel::Bernoulli { p: 0.5, rng },
        Kernel::Dropout { p: 0.5, rng },
        Kernel::ApplyMask { scale: 2.0 },
        Kernel::Mul,
        Kernel::MulScalar { s: 2.0 },
    ];
    let len = 1000usize;
    let t = Tiling::new(len as u64, 2).unwrap();
    for k in kernels {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let entry = entry_point(&k, dtype).unwrap();
            let need = ub_footprint(&k, dtype, DEFAULT_TILE_LENGTH).unwrap();
            let need = u32::try_from(need).unwrap();
            for (capacity, fits) in [(need, true), (need - 32, false)] {
                lib.set_ub_capacity(capacity);
                lib.reset();
                // 4-byte elements cover every type's storage.
                let mut x = vec![0f32; len];
                let y = vec![1f32; len];
                let rc = match (k, dtype) {
                    (Kernel::Bernoulli { .. } | Kernel::Dropout { .. }, DType::F32) => {
                        lib.random(entry, 2, &mut x, 0.5, rng, &t)
                    }
                    (Kernel::Bernoulli { .. } | Kernel::Dropout { .. }, _) => {
                        let mut h = vec![f16::ZERO; len];
                        lib.random(entry, 2, &mut h, 0.5, rng, &t)
                    }
                    (Kernel::ApplyMask { .. }, DType::F32) => {
                        lib.apply_mask(entry, 2, &mut x, &y, 2.0, &t)
                    }
                    (Kernel::ApplyMask { .. }, _) => {
                        let (mut h, m) = (vec![f16::ONE; len], vec![f16::ONE; len]);
                        lib.apply_mask(entry, 2, &mut h, &m, 2.0, &t)
                    }
                    (Kernel::Mul, DType::F32) => lib.mul(entry, 2, &mut x, &y, &t),
                    (Kernel::Mul, _) => {
                        let (mut h, m) = (vec![f16::ONE; len], vec![f16::ONE; len]);
                        lib.mul(entry, 2, &mut h, &m, &t)
                    }
                    (Kernel::MulScalar { .. }, DType::F32) => {
                        lib.mul_scalar(entry, 2, &mut x, 2.0, &t)
                    }
                    (Kernel::MulScalar { .. }, _) => {
                        let mut h = vec![f16::ONE; len];
                        lib.mul_scalar(entry, 2, &mut h, 2.0, &t)
                    }
                    // Not in the list above (the u8 and bit mask kernels
                    // have their own tests below).
                    (
                        Kernel::ApplyMaskU8 { .. }
                        | Kernel::DropoutBits { .. }
                        | Kernel::ApplyBits { .. },
                        _,
                    ) => continue,
                };
                let report = lib.report();
                if fits {
                    assert_eq!(
                        (rc, report.as_str()),
                        (0, ""),
                        "{entry} at {capacity} bytes"
                    );
                } else {
                    assert_eq!(rc, VIOLATION, "{entry} at {capacity} bytes");
                    assert!(report.contains("[ub-capacity]"), "{entry}: {report}");
                }
            }
        }
    }
    lib.set_ub_capacity(default);
    assert_eq!(lib.ub_capacity(), 188_416);
}

type ToFloat = unsafe extern "C" fn(u16) -> f32;
type FromFloat = unsafe extern "C" fn(f32) -> u16;

/// Every 16-bit pattern to f32, and f32 values at, beside and between all
/// rounding boundaries (plus random ones) back, against the `half` crate.
fn conversions_match(
    to: &str,
    from: &str,
    crate_to: impl Fn(u16) -> f32,
    crate_from: impl Fn(f32) -> u16,
) {
    let lib = shim::selftest();
    // SAFETY: `float ta_shim_*_to_float(uint16_t)`.
    let shim_to: ToFloat = unsafe { lib.function(to) };
    // SAFETY: `uint16_t ta_shim_*_from_float(float)`.
    let shim_from: FromFloat = unsafe { lib.function(from) };
    let mut probes = Vec::new();
    for h in 0..=u16::MAX {
        // SAFETY: plain value in, plain value out.
        let got = unsafe { shim_to(h) };
        assert_eq!(got.to_bits(), crate_to(h).to_bits(), "{to}({h:#06x})");
        let v = crate_to(h);
        let next = crate_to(h.wrapping_add(1));
        probes.push(v);
        if v.is_finite() && next.is_finite() {
            // The midpoint to the next value and its f32 neighbours: the
            // ties and near-ties of round to nearest even.
            let mid = ((f64::from(v) + f64::from(next)) / 2.0) as f32;
            probes.extend([
                mid,
                f32::from_bits(mid.to_bits() + 1),
                f32::from_bits(mid.to_bits() - 1),
            ]);
        }
    }
    let mut rng = SmallRng::seed_from_u64(5);
    probes.extend((0..200_000).map(|_| f32::from_bits(rng.random())));
    for v in probes {
        // SAFETY: plain value in, plain value out.
        let got = unsafe { shim_from(v) };
        assert_eq!(got, crate_from(v), "{from}({v:e} = {:#010x})", v.to_bits());
    }
}

#[test]
fn half_conversions_equal_the_half_crate() {
    conversions_match(
        "ta_shim_half_to_float",
        "ta_shim_half_from_float",
        |h| f16::from_bits(h).to_f32(),
        |v| f16::from_f32(v).to_bits(),
    );
}

#[test]
fn bf16_conversions_equal_the_half_crate() {
    conversions_match(
        "ta_shim_bf16_to_float",
        "ta_shim_bf16_from_float",
        |h| bf16::from_bits(h).to_f32(),
        |v| bf16::from_f32(v).to_bits(),
    );
}

/// Unified Buffer bytes the u8-mask and bit-mask kernels reserve at tile
/// length `t`, counted buffer by buffer (kernels/ascend/README.md), as an
/// independent check of `ub_footprint` and of the kernels. Every buffer is a
/// whole number of 32-byte blocks.
fn unwired_footprint(entry: &str, t: u64) -> u64 {
    let block512 = |b: u64| b.div_ceil(512) * 512;
    let lanes = (t / 32).div_ceil(8) * 8;
    // 21 lane arrays of 9 sub-arrays in whole 512-byte bank periods, 256
    // bytes between the two bank classes, the mask
    let philox = 21 * block512(9 * lanes * 4) + 256 + lanes * 4;
    let block = |b: u64| b.div_ceil(32) * 32;
    let elem: u64 = if entry.ends_with("f32") { 4 } else { 2 };
    let widened = if elem == 4 { 0 } else { 4 * t };
    if entry == "ta_bernoulli_u8" {
        // out queue (bytes), Philox, half ones, half work
        return 2 * t + philox + 2 * t * 2;
    }
    if entry.starts_with("ta_apply_mask_u8") {
        // x, mask and out queues, bits, widened x, the mask as half; masks
        // are compared 128 halves at a time
        let lanes = t.div_ceil(128) * 128;
        return 4 * t * elem + 2 * lanes + block(lanes / 8) + widened + 2 * lanes;
    }
    if entry.starts_with("ta_dropout_bitmask") {
        // in, out and bit queues, Philox, widened x
        return 4 * t * elem + 2 * lanes * 4 + philox + widened;
    }
    // ta_apply_bitmask: x, bit and out queues, widened x
    4 * t * elem + 2 * block(t / 8) + widened
}

#[test]
fn the_u8_and_bitmask_kernels_need_exactly_their_documented_ub() {
    let lib = shim::kernels();
    let default = lib.ub_capacity();
    let rng = RngState::new(3);
    let len = 1000usize;
    let t = Tiling::new(len as u64, 2).unwrap();
    let tile = u64::from(DEFAULT_TILE_LENGTH);
    let mut entries = vec!["ta_bernoulli_u8".to_string()];
    for d in ["f32", "f16", "bf16"] {
        for k in ["ta_apply_mask_u8", "ta_dropout_bitmask", "ta_apply_bitmask"] {
            entries.push(format!("{k}_{d}"));
        }
    }
    for entry in &entries {
        let need = unwired_footprint(entry, tile);
        assert!(need <= u64::from(default), "{entry}: {need} bytes");
        for (capacity, fits) in [(need, true), (need - 32, false)] {
            lib.set_ub_capacity(u32::try_from(capacity).unwrap());
            lib.reset();
            let mut x = vec![0f32; len];
            let mut h = vec![f16::ONE; len];
            let wide = entry.ends_with("f32");
            let rc = if entry == "ta_bernoulli_u8" {
                let mut m = vec![0u8; len];
                lib.random(entry, 2, &mut m, 0.5, rng, &t)
            } else if entry.starts_with("ta_dropout_bitmask") {
                let mut bits = vec![0u8; len.div_ceil(8)];
                if wide {
                    lib.random_bits(entry, 2, &mut x, &mut bits, 0.5, rng, &t)
                } else {
                    lib.random_bits(entry, 2, &mut h, &mut bits, 0.5, rng, &t)
                }
            } else {
                let bytes = if entry.contains("bitmask") {
                    len.div_ceil(8)
                } else {
                    len
                };
                let mask = vec![1u8; bytes];
                if wide {
                    lib.apply_byte_mask(entry, 2, &mut x, &mask, 2.0, &t)
                } else {
                    lib.apply_byte_mask(entry, 2, &mut h, &mask, 2.0, &t)
                }
            };
            let report = lib.report();
            if fits {
                assert_eq!(
                    (rc, report.as_str()),
                    (0, ""),
                    "{entry} at {capacity} bytes"
                );
            } else {
                assert_eq!(rc, VIOLATION, "{entry} at {capacity} bytes");
                assert!(report.contains("[ub-capacity]"), "{entry}: {report}");
            }
        }
    }
    lib.set_ub_capacity(default);
}

#[test]
fn ub_footprint_counts_the_u8_and_bit_mask_kernels_buffer_by_buffer() {
    let rng = tensor_arena::ops::RngState::new(1);
    let bern = Kernel::Bernoulli { p: 0.5, rng };
    let masks = [
        ("ta_apply_mask_u8", Kernel::ApplyMaskU8 { scale: 2.0 }),
        ("ta_dropout_bitmask", Kernel::DropoutBits { p: 0.5, rng }),
        ("ta_apply_bitmask", Kernel::ApplyBits { scale: 2.0 }),
    ];
    for t in [64u32, 1000, 4096] {
        assert_eq!(
            ub_footprint(&bern, DType::U8, t).unwrap(),
            unwired_footprint("ta_bernoulli_u8", u64::from(t)),
            "ta_bernoulli_u8 at {t}"
        );
        for (dtype, name) in [
            (DType::F32, "f32"),
            (DType::F16, "f16"),
            (DType::BF16, "bf16"),
        ] {
            for (prefix, kernel) in &masks {
                let entry = format!("{prefix}_{name}");
                assert_eq!(entry_point(kernel, dtype).unwrap(), entry);
                assert_eq!(
                    ub_footprint(kernel, dtype, t).unwrap(),
                    unwired_footprint(&entry, u64::from(t)),
                    "{entry} at {t}"
                );
            }
        }
    }
}

/// Compiles `source` syntax-only against the shim's `kernel_operator.h`
/// with `defines`; returns whether it compiled and the compiler's output.
fn compile_against_shim(source: &str, defines: &[&str]) -> (bool, String) {
    let Some(cxx) = option_env!("TENSOR_ARENA_SHIM_CXX") else {
        panic!("build.rs found no C++ compiler, so the shim was not built (install g++)");
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("const_path.cpp");
    std::fs::write(&file, source).unwrap();
    let root = env!("CARGO_MANIFEST_DIR");
    let out = std::process::Command::new(cxx)
        .args(["-std=c++17", "-fsyntax-only"])
        .arg(format!("-I{root}/kernels/shim"))
        .arg(format!("-I{root}/kernels/ascend"))
        .args(defines.iter().map(|d| format!("-D{d}")))
        .arg(&file)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Calls of the APIs asc-devkit declares non-const (kernels/shim/HEADERS.md),
/// each through a path that is const when `CONST` is defined as `const`.
const CONST_PATHS: &str = r#"
#include "kernel_operator.h"
using namespace AscendC;
// TBuf::Get<T>(), Get<T>(len), GetWithOffset<T>(size, offset) from a const
// member function (the old ta_philox.h Lane() const).
struct FromMember {
    TBuf<TPosition::VECCALC> buf;
    LocalTensor<float> All() CONST { return buf.Get<float>(); }
    LocalTensor<float> Some() CONST { return buf.Get<float>(8); }
    LocalTensor<float> At() CONST { return buf.GetWithOffset<float>(8, 32); }
};
// The same through a const reference (the old ta_common.h ScaleThroughMask).
LocalTensor<float> FromReference(CONST TBuf<TPosition::VECCALC> &work) { return work.Get<float>(); }
// GlobalTensor::SetValue through a const GlobalTensor.
void Store(CONST GlobalTensor<float> &g) { g.SetValue(0, 1.0f); }
"#;

#[test]
fn the_shim_refuses_non_const_apis_called_through_a_const_path() {
    // The same calls through non-const paths compile: the refusal below is
    // the const-ness, not a typo in the snippet.
    let (ok, log) = compile_against_shim(CONST_PATHS, &["CONST="]);
    assert!(ok, "the non-const paths should compile:\n{log}");
    let (ok, log) = compile_against_shim(CONST_PATHS, &["CONST=const"]);
    assert!(!ok, "calls through const paths compiled");
    // Every one of the five calls is refused (the compiler names each line).
    for (line, api) in [
        (8, "Get"),
        (9, "Get"),
        (10, "GetWithOffset"),
        (13, "Get"),
        (15, "SetValue"),
    ] {
        assert!(
            log.contains(&format!("const_path.cpp:{line}:")) && log.contains(api),
            "line {line} ({api}) not refused:\n{log}"
        );
    }
}

#[test]
fn every_kernel_compiles_against_the_shim_by_itself() {
    // Each kernel source on its own (the build compiles them all in one
    // translation unit): nothing leans on another file's includes.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels/ascend");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "cpp") {
            let source = std::fs::read_to_string(&path).unwrap();
            let (ok, log) = compile_against_shim(&source, &[]);
            assert!(ok, "{}:\n{log}", path.display());
            seen += 1;
        }
    }
    assert_eq!(seen, 5, "kernel sources in {}", dir.display());
}
