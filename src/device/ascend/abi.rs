//! The interface of the AscendC kernel library in `kernels/ascend/`: entry
//! point names, launch arguments, tiling and Unified Buffer footprints.
//!
//! The library (built with CANN's `ascendc_library`, or against the CPU shim
//! for tests) exports one C function per kernel and element type:
//!
//! ```text
//! uint32_t aclrtlaunch_<entry>(uint32_t numBlocks, void *stream, <args>)
//! ```
//!
//! with `<args>`, by kernel:
//!
//! | kernel | args after `stream` |
//! |---|---|
//! | bernoulli, dropout, dropout backward | `void *x, float p, uint64_t seed, uint64_t offset, uint64_t totalLength, uint64_t blockLength, uint32_t tileLength` |
//! | bit-mask dropout forward (`ta_dropout_bitmask_*`) | `void *x, void *bits, float p, uint64_t seed, uint64_t offset, uint64_t totalLength, uint64_t blockLength, uint32_t tileLength` |
//! | apply_mask (a mask of `x`'s type, or a u8 mask: `ta_apply_mask_u8_*`; a bit mask: `ta_apply_bitmask_*`) | `void *x, void *mask, float scale, uint64_t totalLength, uint64_t blockLength, uint32_t tileLength` |
//! | mul | `void *x, void *y, uint64_t totalLength, uint64_t blockLength, uint32_t tileLength` |
//! | mul_scalar | `void *x, float s, uint64_t totalLength, uint64_t blockLength, uint32_t tileLength` |
//!
//! The last three arguments and `numBlocks` come from [`Tiling`]. This
//! module is pure data: loading the library and calling it is the Ascend
//! backend's job.
//!
//! ```
//! use tensor_arena::device::ascend::abi::{entry_point, Tiling, LAUNCH_PREFIX};
//! use tensor_arena::ops::{Kernel, RngState};
//! use tensor_arena::DType;
//!
//! let k = Kernel::Dropout { p: 0.1, rng: RngState::new(7) };
//! assert_eq!(entry_point(&k, DType::F16)?, "ta_dropout_f16");
//! let symbol = format!("{LAUNCH_PREFIX}{}", entry_point(&k, DType::F16)?);
//! assert_eq!(symbol, "aclrtlaunch_ta_dropout_f16");
//!
//! let t = Tiling::new(1_000_003, 20)?;
//! assert_eq!(t.num_blocks, 20);
//! assert_eq!(t.block_range(19).end, 1_000_003);
//! # Ok::<(), tensor_arena::Error>(())
//! ```

use std::ops::Range;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::Kernel;

/// Prefix CANN's `ascendc_library` gives every launch function.
pub const LAUNCH_PREFIX: &str = "aclrtlaunch_";

/// Elements per vector repeat of f32 (256 bytes): core ranges and tiles are
/// multiples of it, so every vector compare covers whole repeats.
pub const ALIGN_ELEMENTS: u64 = 64;

/// Tile length the kernels are sized for: every kernel and element type
/// fits the 910B's Unified Buffer with double buffering at this length.
pub const DEFAULT_TILE_LENGTH: u32 = 4096;

/// Unified Buffer bytes a kernel may reserve on an Atlas A2 (910B) vector
/// core: `TOTAL_VEC_LOCAL_SIZE` of arch 2201 (cannmirror/asc-devkit), 184
/// KiB of the core's 192 KiB; the rest is the framework's.
pub const UB_BYTES_910B: u64 = 184 * 1024;

/// Name of the kernel's entry point for `dtype`, the element type of `x`
/// (without [`LAUNCH_PREFIX`]); for [`Kernel::Dropout`] the forward pass.
/// The u8 masks: [`Kernel::Bernoulli`] on `u8` is `ta_bernoulli_u8`, and
/// [`Kernel::ApplyMaskU8`] on a float type `ta_apply_mask_u8_<type>`; the
/// bit masks: [`Kernel::DropoutBits`] is `ta_dropout_bitmask_<type>`,
/// [`Kernel::ApplyBits`] `ta_apply_bitmask_<type>`.
///
/// ```
/// use tensor_arena::device::ascend::abi::entry_point;
/// use tensor_arena::ops::{Kernel, RngState};
/// use tensor_arena::DType;
/// let bern = Kernel::Bernoulli { p: 0.9, rng: RngState::new(1) };
/// assert_eq!(entry_point(&bern, DType::U8)?, "ta_bernoulli_u8");
/// let apply = Kernel::ApplyMaskU8 { scale: 2.0 };
/// assert_eq!(entry_point(&apply, DType::BF16)?, "ta_apply_mask_u8_bf16");
/// # Ok::<(), tensor_arena::Error>(())
/// ```
pub fn entry_point(kernel: &Kernel, dtype: DType) -> Result<&'static str> {
    if let (Kernel::Bernoulli { .. }, DType::U8) = (kernel, dtype) {
        return Ok(BERNOULLI_U8);
    }
    let names = match kernel {
        Kernel::Bernoulli { .. } => ["ta_bernoulli_f32", "ta_bernoulli_f16", "ta_bernoulli_bf16"],
        Kernel::Dropout { .. } => ["ta_dropout_f32", "ta_dropout_f16", "ta_dropout_bf16"],
        Kernel::ApplyMask { .. } => [
            "ta_apply_mask_f32",
            "ta_apply_mask_f16",
            "ta_apply_mask_bf16",
        ],
        Kernel::Mul => ["ta_mul_f32", "ta_mul_f16", "ta_mul_bf16"],
        Kernel::MulScalar { .. } => [
            "ta_mul_scalar_f32",
            "ta_mul_scalar_f16",
            "ta_mul_scalar_bf16",
        ],
        Kernel::ApplyMaskU8 { .. } => APPLY_MASK_U8,
        Kernel::DropoutBits { .. } => DROPOUT_BITMASK,
        Kernel::ApplyBits { .. } => APPLY_BITMASK,
    };
    Ok(names[dtype_index(kernel.name(), dtype)?])
}

/// Entry point of bernoulli into a u8 mask (1 where `u < p`, else 0: the
/// decisions of `ta_bernoulli_f32` for the same seed and offset).
pub const BERNOULLI_U8: &str = "ta_bernoulli_u8";

/// Entry points of `apply_mask_` with a u8 mask, for f32, f16 and bf16
/// values (`x = mask != 0 ? x * scale : 0`).
pub const APPLY_MASK_U8: [&str; 3] = [
    "ta_apply_mask_u8_f32",
    "ta_apply_mask_u8_f16",
    "ta_apply_mask_u8_bf16",
];

/// Entry points of the bit-mask dropout forward for f32, f16 and bf16: `x`
/// as `ta_dropout_<type>` leaves it, and bit `e % 8` of byte `e / 8` of
/// `bits` set where element `e` was kept (`ceil(totalLength / 8)` bytes;
/// the bits past the last element unspecified).
pub const DROPOUT_BITMASK: [&str; 3] = [
    "ta_dropout_bitmask_f32",
    "ta_dropout_bitmask_f16",
    "ta_dropout_bitmask_bf16",
];

/// Entry points of the bit-mask apply for f32, f16 and bf16 (`x = bit ? x *
/// scale : 0`), the bit-mask dropout's backward.
pub const APPLY_BITMASK: [&str; 3] = [
    "ta_apply_bitmask_f32",
    "ta_apply_bitmask_f16",
    "ta_apply_bitmask_bf16",
];

/// Name of the dropout backward entry point for `dtype`: the forward kernel
/// applied to the gradient, called with the forward's seed and offset.
///
/// ```
/// use tensor_arena::device::ascend::abi::dropout_backward_entry_point;
/// assert_eq!(dropout_backward_entry_point(tensor_arena::DType::BF16)?, "ta_dropout_backward_bf16");
/// # Ok::<(), tensor_arena::Error>(())
/// ```
pub fn dropout_backward_entry_point(dtype: DType) -> Result<&'static str> {
    let names = [
        "ta_dropout_backward_f32",
        "ta_dropout_backward_f16",
        "ta_dropout_backward_bf16",
    ];
    Ok(names[dtype_index("dropout_backward_", dtype)?])
}

fn dtype_index(op: &'static str, dtype: DType) -> Result<usize> {
    match dtype {
        DType::F32 => Ok(0),
        DType::F16 => Ok(1),
        DType::BF16 => Ok(2),
        DType::I32 | DType::U8 => Err(Error::UnsupportedDType {
            op,
            dtype: dtype.name(),
        }),
    }
}

/// How a kernel call is split: core `b` of `num_blocks` owns elements
/// `b * block_length ..` (clipped to `total_length`) and walks them in tiles
/// of `tile_length`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tiling {
    /// Cores to launch (`numBlocks`); 0 when there is nothing to do.
    pub num_blocks: u32,
    /// Elements of the call.
    pub total_length: u64,
    /// Elements per core, a multiple of [`ALIGN_ELEMENTS`].
    pub block_length: u64,
    /// Elements per tile, a multiple of [`ALIGN_ELEMENTS`].
    pub tile_length: u32,
}

impl Tiling {
    /// Splits `total_length` elements evenly over at most `max_blocks`
    /// cores, in whole multiples of [`ALIGN_ELEMENTS`], with the default
    /// tile length. Uses fewer cores when there is too little work.
    ///
    /// ```
    /// use tensor_arena::device::ascend::abi::Tiling;
    /// let t = Tiling::new(100, 8)?;
    /// assert_eq!((t.num_blocks, t.block_length), (2, 64));
    /// # Ok::<(), tensor_arena::Error>(())
    /// ```
    pub fn new(total_length: u64, max_blocks: u32) -> Result<Tiling> {
        if max_blocks == 0 || max_blocks > 65_535 {
            return Err(Error::InvalidTiling {
                what: "max_blocks",
                value: max_blocks.into(),
                rule: "a launch uses 1 to 65535 cores",
            });
        }
        let per_core = total_length.div_ceil(u64::from(max_blocks));
        let block_length = per_core
            .div_ceil(ALIGN_ELEMENTS)
            .max(1)
            .saturating_mul(ALIGN_ELEMENTS);
        // At most max_blocks, which fits in u32.
        let num_blocks = total_length.div_ceil(block_length) as u32;
        Ok(Tiling {
            num_blocks,
            total_length,
            block_length,
            tile_length: DEFAULT_TILE_LENGTH,
        })
    }

    /// The same split with another tile length, a positive multiple of
    /// [`ALIGN_ELEMENTS`].
    ///
    /// ```
    /// use tensor_arena::device::ascend::abi::Tiling;
    /// assert!(Tiling::new(1000, 2)?.with_tile_length(128).is_ok());
    /// assert!(Tiling::new(1000, 2)?.with_tile_length(100).is_err());
    /// # Ok::<(), tensor_arena::Error>(())
    /// ```
    pub fn with_tile_length(self, tile_length: u32) -> Result<Tiling> {
        if tile_length == 0 || u64::from(tile_length) % ALIGN_ELEMENTS != 0 {
            return Err(Error::InvalidTiling {
                what: "tile_length",
                value: tile_length.into(),
                rule: "tiles are a positive multiple of 64 elements",
            });
        }
        Ok(Tiling {
            tile_length,
            ..self
        })
    }

    /// The elements core `block` owns (empty past the last busy core).
    pub fn block_range(&self, block: u32) -> Range<u64> {
        let start = (u64::from(block) * self.block_length).min(self.total_length);
        let end = start
            .saturating_add(self.block_length)
            .min(self.total_length);
        start..end
    }
}

/// Unified Buffer bytes one core of `kernel` on `dtype` reserves at
/// `tile_length` (a multiple of [`ALIGN_ELEMENTS`]): its double-buffered
/// queues and scratch buffers, each rounded up to 32 bytes as `TPipe` does.
/// Must not exceed the core's UB ([`UB_BYTES_910B`] on the 910B).
///
/// ```
/// use tensor_arena::device::ascend::abi::{ub_footprint, DEFAULT_TILE_LENGTH, UB_BYTES_910B};
/// use tensor_arena::ops::Kernel;
/// let bytes = ub_footprint(&Kernel::Mul, tensor_arena::DType::F32, DEFAULT_TILE_LENGTH)?;
/// assert!(bytes <= UB_BYTES_910B);
/// # Ok::<(), tensor_arena::Error>(())
/// ```
pub fn ub_footprint(kernel: &Kernel, dtype: DType, tile_length: u32) -> Result<u64> {
    if !(matches!(kernel, Kernel::Bernoulli { .. }) && dtype == DType::U8) {
        dtype_index(kernel.name(), dtype)?;
    }
    let t = u64::from(tile_length);
    let elem = dtype.size() as u64;
    let tile = t * elem;
    let f32_tile = t * 4;
    let mask = (t / 8).div_ceil(32) * 32;
    // Half types get float copies of their operands.
    let widened = |operands: u64| if elem == 4 { 0 } else { operands * f32_tile };
    // The vector Philox generator (kernels/ascend/ta_philox.h): 21 lane
    // arrays of 9 sub-arrays of one lane per 32 elements (whole 32-byte
    // blocks), each padded to whole 512-byte bank periods, 256 bytes
    // between the two bank classes, and the tile's bit mask.
    let lanes = (t / 32).div_ceil(8) * 8;
    let philox = 21 * (9 * lanes * 4).div_ceil(512) * 512 + 256 + lanes * 4;
    // Bytes that move a buffer half a bank period (256 of 512) away from
    // one whose start lies `gap` bytes before it (ta_common.h BankShiftPad).
    let bank_pad = |gap: u64| (256 + 512 - gap % 512) % 512;
    let tile32 = tile.div_ceil(32) * 32;
    let bytes = match kernel {
        // u8 out queue, the f32 ones and decisions it is narrowed from, Philox
        Kernel::Bernoulli { .. } if dtype == DType::U8 => 6 * t + philox,
        // out queue, ones, Philox
        Kernel::Bernoulli { .. } => 3 * tile + philox,
        // in and out queues, Philox, widened x
        Kernel::Dropout { .. } => 4 * tile + philox + widened(1),
        // x, mask and out queues, mask bits, widened x and mask
        Kernel::ApplyMask { .. } => 6 * tile + mask + widened(2),
        // x, y and out queues, widened x and y, and the pad that puts y in
        // other bank groups than x (after x and out for float, after
        // widened x for halves)
        Kernel::Mul => {
            let pad = if elem == 4 {
                bank_pad(4 * tile32)
            } else {
                bank_pad(f32_tile)
            };
            6 * tile + widened(2) + pad
        }
        // x and out queues, widened x
        Kernel::MulScalar { .. } => 4 * tile + widened(1),
        // x and out queues, the u8 mask queue and its half widening (bytes
        // are compared as half, 128 at a time), mask bits, widened x
        Kernel::ApplyMaskU8 { .. } => {
            let m = t.div_ceil(128) * 128;
            4 * tile + 4 * m + (m / 8).div_ceil(32) * 32 + widened(1)
        }
        // in and out queues, the bit queue (one uint32 word per 32
        // elements, as the generator makes them), Philox, widened x
        Kernel::DropoutBits { .. } => 4 * tile + 2 * lanes * 4 + philox + widened(1),
        // x, bit and out queues, widened x
        Kernel::ApplyBits { .. } => 4 * tile + 2 * mask + widened(1),
    };
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::RngState;

    fn all_kernels() -> [Kernel; 5] {
        let rng = RngState::new(1);
        [
            Kernel::Bernoulli { p: 0.5, rng },
            Kernel::Dropout { p: 0.5, rng },
            Kernel::ApplyMask { scale: 2.0 },
            Kernel::Mul,
            Kernel::MulScalar { s: 2.0 },
        ]
    }

    #[test]
    fn bit_mask_entry_points_and_footprints() {
        let kernels = [
            Kernel::DropoutBits {
                p: 0.5,
                rng: RngState::new(1),
            },
            Kernel::ApplyBits { scale: 2.0 },
        ];
        for (k, names) in kernels.iter().zip([DROPOUT_BITMASK, APPLY_BITMASK]) {
            for (d, name) in [DType::F32, DType::F16, DType::BF16].into_iter().zip(names) {
                assert_eq!(entry_point(k, d).unwrap(), name);
                let bytes = ub_footprint(k, d, DEFAULT_TILE_LENGTH).unwrap();
                assert!(bytes <= UB_BYTES_910B, "{name}: {bytes}");
            }
            assert!(entry_point(k, DType::U8).is_err());
            assert!(ub_footprint(k, DType::U8, 64).is_err());
        }
    }

    #[test]
    fn every_kernel_fits_the_910b_ub_at_the_default_tile() {
        for k in all_kernels() {
            for d in [DType::F32, DType::F16, DType::BF16] {
                let bytes = ub_footprint(&k, d, DEFAULT_TILE_LENGTH).unwrap();
                assert!(bytes <= UB_BYTES_910B, "{} {d}: {bytes}", k.name());
            }
        }
    }

    #[test]
    fn integer_types_have_no_entry_point() {
        for k in all_kernels() {
            let e = entry_point(&k, DType::I32).unwrap_err();
            assert!(matches!(e, Error::UnsupportedDType { .. }), "{e}");
            if !matches!(k, Kernel::Bernoulli { .. }) {
                assert!(ub_footprint(&k, DType::U8, 64).is_err());
                assert!(entry_point(&k, DType::U8).is_err(), "{}", k.name());
            }
        }
        assert!(dropout_backward_entry_point(DType::U8).is_err());
    }

    #[test]
    fn u8_mask_entry_points() {
        let bern = Kernel::Bernoulli {
            p: 0.5,
            rng: RngState::new(1),
        };
        assert_eq!(entry_point(&bern, DType::U8).unwrap(), "ta_bernoulli_u8");
        let k = Kernel::ApplyMaskU8 { scale: 2.0 };
        for (d, name) in [DType::F32, DType::F16, DType::BF16]
            .into_iter()
            .zip(APPLY_MASK_U8)
        {
            assert_eq!(entry_point(&k, d).unwrap(), name);
        }
        assert!(entry_point(&k, DType::U8).is_err());
    }

    #[test]
    fn entry_points_name_kernel_and_type() {
        for k in all_kernels() {
            for d in [DType::F32, DType::F16, DType::BF16] {
                let name = entry_point(&k, d).unwrap();
                assert!(name.ends_with(&format!("_{}", d.name())), "{name}");
                assert!(name.starts_with(&format!("ta_{}", k.name().trim_end_matches('_'))));
            }
        }
    }

    #[test]
    fn bad_tilings_are_errors() {
        assert!(Tiling::new(10, 0).is_err());
        assert!(Tiling::new(10, 65_536).is_err());
        let t = Tiling::new(10, 4).unwrap();
        assert!(t.with_tile_length(0).is_err());
        assert!(t.with_tile_length(96).is_err());
        assert_eq!(t.with_tile_length(192).unwrap().tile_length, 192);
    }

    proptest::proptest! {
        #[test]
        fn tilings_give_each_element_to_exactly_one_core(
            total in 0u64..5_000_000,
            max_blocks in 1u32..200,
        ) {
            let t = Tiling::new(total, max_blocks).unwrap();
            proptest::prop_assert!(t.num_blocks <= max_blocks);
            proptest::prop_assert_eq!(t.block_length % ALIGN_ELEMENTS, 0);
            let mut next = 0;
            for b in 0..t.num_blocks {
                let r = t.block_range(b);
                proptest::prop_assert_eq!(r.start, next);
                proptest::prop_assert!(!r.is_empty(), "core {} of {} idle", b, t.num_blocks);
                next = r.end;
            }
            proptest::prop_assert_eq!(next, total);
            proptest::prop_assert!(t.block_range(t.num_blocks).is_empty());
        }
    }

    #[test]
    fn empty_calls_launch_nothing() {
        let t = Tiling::new(0, 8).unwrap();
        assert_eq!(t.num_blocks, 0);
        assert!(t.block_range(0).is_empty());
    }
}
