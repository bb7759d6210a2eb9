//! The kernel library: the `aclrtlaunch_ta_*` functions that
//! `kernels/ascend/` compiles to (with CANN, or against the CPU shim),
//! loaded at run time and called with tiling from `abi`.

use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::abi::{LAUNCH_PREFIX, Tiling, entry_point};
use super::config::AscendConfig;
use super::library_search;
use super::sys::{self, AclrtStream, Loaded};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::Kernel;

/// `(numBlocks, stream, x, p, seed, offset, totalLength, blockLength, tileLength)`
type RandomFn =
    unsafe extern "C" fn(u32, AclrtStream, *mut c_void, f32, u64, u64, u64, u64, u32) -> u32;
/// `(numBlocks, stream, x, bits, p, seed, offset, totalLength, blockLength, tileLength)`
type RandomBitsFn = unsafe extern "C" fn(
    u32,
    AclrtStream,
    *mut c_void,
    *mut c_void,
    f32,
    u64,
    u64,
    u64,
    u64,
    u32,
) -> u32;
/// `(numBlocks, stream, x, mask, scale, totalLength, blockLength, tileLength)`
type MaskFn =
    unsafe extern "C" fn(u32, AclrtStream, *mut c_void, *mut c_void, f32, u64, u64, u32) -> u32;
/// `(numBlocks, stream, x, y, totalLength, blockLength, tileLength)`
type MulFn = unsafe extern "C" fn(u32, AclrtStream, *mut c_void, *mut c_void, u64, u64, u32) -> u32;
/// `(numBlocks, stream, x, s, totalLength, blockLength, tileLength)`
type ScalarFn = unsafe extern "C" fn(u32, AclrtStream, *mut c_void, f32, u64, u64, u32) -> u32;

/// Element types with kernels, in the order the tables hold them.
const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

/// The resolved launch functions of one kernel library, leaked like the
/// runtime (kernel code must stay mapped while launches may run).
pub(crate) struct KernelLib {
    pub path: PathBuf,
    bernoulli: [RandomFn; 3],
    dropout: [RandomFn; 3],
    apply_mask: [MaskFn; 3],
    mul: [MulFn; 3],
    mul_scalar: [ScalarFn; 3],
    /// The u8 mask kernels, resolved when the library has them (older
    /// builds do not): launching one that is missing fails with the
    /// lookup's error (see `require`).
    bernoulli_u8: Result<RandomFn>,
    apply_mask_u8: [Result<MaskFn>; 3],
    /// The bit-mask dropout pair, optional in the same way.
    dropout_bits: [Result<RandomBitsFn>; 3],
    apply_bits: [Result<MaskFn>; 3],
    _lib: Loaded,
}

static LOADED: Mutex<Vec<&'static KernelLib>> = Mutex::new(Vec::new());

impl KernelLib {
    /// Finds the kernel library for `config` (next to `runtime` by
    /// default) and resolves its launch functions: the fifteen every build
    /// has, and the u8 and bit mask ones where it has them.
    pub fn load(config: &AscendConfig, runtime: &Path) -> Result<&'static KernelLib> {
        let candidates = library_search::kernel_candidates(config, runtime);
        // SAFETY: the kernel library built from kernels/ (by CANN or
        // against the shim), whose initialisers only register kernels.
        let loaded = unsafe {
            library_search::open_first(
                "the kernel library (libtensor_arena_kernels.so)",
                &candidates,
                false,
                library_search::kernel_hint(),
            )
        }?;
        let mut all = LOADED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&k) = all.iter().find(|k| k.path == loaded.path) {
            return Ok(k);
        }
        let rng = crate::ops::RngState::new(0);
        // SAFETY: every lookup's function type is one of the signatures in
        // kernels/ascend/README.md that the library exports; it stays
        // loaded (leaked below).
        let k = unsafe {
            KernelLib {
                path: loaded.path.clone(),
                bernoulli: table(&loaded, &Kernel::Bernoulli { p: 0.5, rng })?,
                dropout: table(&loaded, &Kernel::Dropout { p: 0.5, rng })?,
                apply_mask: table(&loaded, &Kernel::ApplyMask { scale: 1.0 })?,
                mul: table(&loaded, &Kernel::Mul)?,
                mul_scalar: table(&loaded, &Kernel::MulScalar { s: 1.0 })?,
                bernoulli_u8: optional(&loaded, &Kernel::Bernoulli { p: 0.5, rng }, DType::U8),
                apply_mask_u8: DTYPES
                    .map(|d| optional(&loaded, &Kernel::ApplyMaskU8 { scale: 1.0 }, d)),
                dropout_bits: DTYPES
                    .map(|d| optional(&loaded, &Kernel::DropoutBits { p: 0.5, rng }, d)),
                apply_bits: DTYPES.map(|d| optional(&loaded, &Kernel::ApplyBits { scale: 1.0 }, d)),
                _lib: loaded,
            }
        };
        let k: &'static KernelLib = Box::leak(Box::new(k));
        all.push(k);
        Ok(k)
    }

    /// Fails, naming the symbol and the library, when the library lacks
    /// the launch function of `kernel` on `dtype` (the u8 and bit mask
    /// kernels are optional; every other one was resolved at load).
    pub fn require(&self, kernel: &Kernel, dtype: DType) -> Result<()> {
        let i = DTYPES.iter().position(|&d| d == dtype).unwrap_or(0);
        match (kernel, dtype) {
            (Kernel::Bernoulli { .. }, DType::U8) => self.bernoulli_u8.as_ref().map(|_| ()),
            (Kernel::ApplyMaskU8 { .. }, _) => self.apply_mask_u8[i].as_ref().map(|_| ()),
            (Kernel::DropoutBits { .. }, _) => self.dropout_bits[i].as_ref().map(|_| ()),
            (Kernel::ApplyBits { .. }, _) => self.apply_bits[i].as_ref().map(|_| ()),
            _ => Ok(()),
        }
        .map_err(Clone::clone)
    }

    /// Launches `kernel` on `x` (and `other`) with tiling `t`; returns the
    /// launch function's status and its symbol name.
    ///
    /// # Safety
    /// `x` points to `t.total_length` elements of `dtype` and `other` (for
    /// two-operand kernels) to `kernel.operand_len(t.total_length)` of
    /// `kernel.operand_dtype(dtype)`, in live device memory, not
    /// overlapping (`other` writable for a kernel that writes it); `stream`
    /// is a live stream of the runtime the library launches on; the
    /// kernel's parameters are valid, `dtype` has kernels, and
    /// [`require`](KernelLib::require) accepted the kernel.
    pub unsafe fn launch(
        &self,
        stream: AclrtStream,
        kernel: &Kernel,
        dtype: DType,
        x: *mut c_void,
        other: *mut c_void,
        t: &Tiling,
    ) -> u32 {
        let i = DTYPES.iter().position(|&d| d == dtype).unwrap_or(0);
        let (blocks, total, block, tile) =
            (t.num_blocks, t.total_length, t.block_length, t.tile_length);
        // SAFETY: forwarded to the caller; each function pointer has the
        // exported signature for this kernel and type.
        unsafe {
            match *kernel {
                Kernel::Bernoulli { p, rng } if dtype == DType::U8 => match self.bernoulli_u8 {
                    Ok(f) => f(
                        blocks, stream, x, p, rng.seed, rng.offset, total, block, tile,
                    ),
                    Err(_) => MISSING,
                },
                Kernel::ApplyMaskU8 { scale } => match self.apply_mask_u8[i] {
                    Ok(f) => f(blocks, stream, x, other, scale, total, block, tile),
                    Err(_) => MISSING,
                },
                Kernel::DropoutBits { p, rng } => match self.dropout_bits[i] {
                    Ok(f) => f(
                        blocks, stream, x, other, p, rng.seed, rng.offset, total, block, tile,
                    ),
                    Err(_) => MISSING,
                },
                Kernel::ApplyBits { scale } => match self.apply_bits[i] {
                    Ok(f) => f(blocks, stream, x, other, scale, total, block, tile),
                    Err(_) => MISSING,
                },
                Kernel::Bernoulli { p, rng } => (self.bernoulli[i])(
                    blocks, stream, x, p, rng.seed, rng.offset, total, block, tile,
                ),
                Kernel::Dropout { p, rng } => (self.dropout[i])(
                    blocks, stream, x, p, rng.seed, rng.offset, total, block, tile,
                ),
                Kernel::ApplyMask { scale } => {
                    (self.apply_mask[i])(blocks, stream, x, other, scale, total, block, tile)
                }
                Kernel::Mul => (self.mul[i])(blocks, stream, x, other, total, block, tile),
                Kernel::MulScalar { s } => {
                    (self.mul_scalar[i])(blocks, stream, x, s, total, block, tile)
                }
            }
        }
    }

    /// The launch function's symbol, for error messages.
    pub fn symbol(kernel: &Kernel, dtype: DType) -> String {
        match entry_point(kernel, dtype) {
            Ok(e) => format!("{LAUNCH_PREFIX}{e}"),
            Err(_) => format!("{LAUNCH_PREFIX}{}", kernel.name()),
        }
    }
}

/// The status returned for a launch function the library lacks (never
/// reached: `require` refuses the launch first).
const MISSING: u32 = u32::MAX;

/// The launch function of `kernel` on `dtype` if the library exports it,
/// else the lookup's error with what it means.
///
/// # Safety
/// As for [`table`].
unsafe fn optional<F: Copy>(lib: &Loaded, kernel: &Kernel, dtype: DType) -> Result<F> {
    let name = format!("{LAUNCH_PREFIX}{}", entry_point(kernel, dtype)?);
    // SAFETY: forwarded to the caller.
    unsafe { sys::symbol::<F>(lib, &name) }.map_err(|e| match e {
        Error::MissingSymbol {
            library,
            symbol,
            message,
            ..
        } => Error::MissingSymbol {
            library,
            symbol,
            message,
            hint: match kernel {
                Kernel::DropoutBits { .. } | Kernel::ApplyBits { .. } => "this kernel library was built without the bit-mask dropout kernels (dropout_bitmask.cpp); rebuild it from kernels/ascend with them, or use the regenerating dropout_ / dropout_backward_",
                _ => "this kernel library was built without the u8 mask kernels; rebuild it from kernels/ascend with them, or use a mask of the values' element type",
            }
            .to_owned(),
        },
        other => other,
    })
}

/// The three launch functions (f32, f16, bf16) of `kernel`.
///
/// # Safety
/// `F` is the C type of this kernel's launch functions; `lib` stays loaded.
unsafe fn table<F: Copy>(lib: &Loaded, kernel: &Kernel) -> Result<[F; 3]> {
    let one = |d: DType| -> Result<F> {
        let name = format!("{LAUNCH_PREFIX}{}", entry_point(kernel, d)?);
        // SAFETY: forwarded to the caller.
        unsafe { sys::symbol::<F>(lib, &name) }
    };
    Ok([one(DTYPES[0])?, one(DTYPES[1])?, one(DTYPES[2])?])
}
