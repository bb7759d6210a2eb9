//! Layer 1: the raw C interface of the ACL runtime and the aclnn operator
//! libraries, resolved at run time into tables of function pointers.
//!
//! Signatures follow the CANN headers: `acl/acl_rt.h`, `acl/acl_base_rt.h`
//! and `acl/error_codes/rt_error_codes.h` (hicann/runtime), `aclnn/acl_meta.h`
//! and the `aclnnop/aclnn_*.h` operator headers (CANN 8.x, hicann/ops-math,
//! ops-nn). C enums are `int`; `aclError` is `int`, `aclnnStatus` is
//! `int32_t`. Nothing here checks anything: see `result` for the error
//! mapping and the safe layer for ownership.

use std::ffi::{c_char, c_int, c_void};
use std::path::{Path, PathBuf};

use libloading::Library;

use crate::error::{Error, Result};

/// `aclError` (`typedef int aclError`).
pub type AclError = c_int;
/// `aclnnStatus` (`typedef int32_t aclnnStatus`).
pub type AclnnStatus = i32;
/// `aclrtStream` (`typedef void *aclrtStream`).
pub type AclrtStream = *mut c_void;

/// Opaque `aclTensor`.
#[repr(C)]
pub struct AclTensor {
    _private: [u8; 0],
}
/// Opaque `aclScalar`.
#[repr(C)]
pub struct AclScalar {
    _private: [u8; 0],
}
/// Opaque `aclIntArray`.
#[repr(C)]
pub struct AclIntArray {
    _private: [u8; 0],
}
/// Opaque `aclOpExecutor`.
#[repr(C)]
pub struct AclOpExecutor {
    _private: [u8; 0],
}

/// `ACL_SUCCESS`.
pub const ACL_SUCCESS: AclError = 0;
/// `ACL_ERROR_REPEAT_INITIALIZE`: `aclInit` was already called; harmless.
pub const ACL_ERROR_REPEAT_INITIALIZE: AclError = 100_002;
/// `ACL_ERROR_BAD_ALLOC`.
pub const ACL_ERROR_BAD_ALLOC: AclError = 200_000;
/// `ACL_ERROR_RT_MEMORY_ALLOCATION`: what `aclrtMalloc` returns when out of
/// memory.
pub const ACL_ERROR_RT_MEMORY_ALLOCATION: AclError = 207_001;
/// `ACL_ERROR_RT_DEVICE_OOM`.
pub const ACL_ERROR_RT_DEVICE_OOM: AclError = 207_018;

/// `aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_DEVICE`.
pub const ACL_MEMCPY_HOST_TO_DEVICE: c_int = 1;
/// `aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_HOST`.
pub const ACL_MEMCPY_DEVICE_TO_HOST: c_int = 2;

/// `aclFormat::ACL_FORMAT_ND`.
pub const ACL_FORMAT_ND: c_int = 2;
/// `aclDataType::ACL_FLOAT`.
pub const ACL_FLOAT: c_int = 0;
/// `aclDataType::ACL_FLOAT16`.
pub const ACL_FLOAT16: c_int = 1;
/// `aclDataType::ACL_INT32`.
pub const ACL_INT32: c_int = 3;
/// `aclDataType::ACL_UINT8`.
pub const ACL_UINT8: c_int = 4;
/// `aclDataType::ACL_BF16`.
pub const ACL_BF16: c_int = 27;
/// `aclDeviceInfo::ACL_DEVICE_INFO_VECTOR_CORE_NUM`.
pub const ACL_DEVICE_INFO_VECTOR_CORE_NUM: c_int = 1;

/// The ACL runtime entry points the crate uses (`libascendcl.so` or
/// `libacl_rt.so`).
#[derive(Clone, Copy)]
pub struct RuntimeFns {
    /// `aclError aclInit(const char *configPath)`
    pub init: unsafe extern "C" fn(*const c_char) -> AclError,
    /// `aclError aclFinalize(void)`
    pub finalize: unsafe extern "C" fn() -> AclError,
    /// `aclError aclrtSetDevice(int32_t deviceId)`
    pub set_device: unsafe extern "C" fn(i32) -> AclError,
    /// `aclError aclrtResetDevice(int32_t deviceId)`
    pub reset_device: unsafe extern "C" fn(i32) -> AclError,
    /// `aclError aclrtGetDeviceCount(uint32_t *count)`
    pub get_device_count: unsafe extern "C" fn(*mut u32) -> AclError,
    /// `aclError aclrtCreateStream(aclrtStream *stream)`
    pub create_stream: unsafe extern "C" fn(*mut AclrtStream) -> AclError,
    /// `aclError aclrtDestroyStream(aclrtStream stream)`
    pub destroy_stream: unsafe extern "C" fn(AclrtStream) -> AclError,
    /// `aclError aclrtSynchronizeStream(aclrtStream stream)`
    pub synchronize_stream: unsafe extern "C" fn(AclrtStream) -> AclError,
    /// `aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy)`
    pub malloc: unsafe extern "C" fn(*mut *mut c_void, usize, c_int) -> AclError,
    /// `aclError aclrtFree(void *devPtr)`
    pub free: unsafe extern "C" fn(*mut c_void) -> AclError,
    /// `aclError aclrtMemset(void *devPtr, size_t maxCount, int32_t value, size_t count)`
    pub memset: unsafe extern "C" fn(*mut c_void, usize, i32, usize) -> AclError,
    /// `aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind)`
    pub memcpy: unsafe extern "C" fn(*mut c_void, usize, *const c_void, usize, c_int) -> AclError,
    /// `aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t *free, size_t *total)`
    pub get_mem_info: unsafe extern "C" fn(c_int, *mut usize, *mut usize) -> AclError,
    /// `const char *aclGetRecentErrMsg(void)`
    pub recent_err_msg: unsafe extern "C" fn() -> *const c_char,
    /// `aclError aclGetDeviceCapability(uint32_t deviceId, aclDeviceInfo deviceInfo, int64_t *value)`
    /// (absent from older toolkits).
    pub get_device_capability: Option<unsafe extern "C" fn(u32, c_int, *mut i64) -> AclError>,
}

/// `aclnnStatus xGetWorkspaceSize(...)` second phase:
/// `aclnnStatus x(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)`.
pub type RunFn =
    unsafe extern "C" fn(*mut c_void, u64, *mut AclOpExecutor, AclrtStream) -> AclnnStatus;

/// `(self, other, out, workspaceSize, executor)`: aclnnMul.
pub type BinaryOutWsFn = unsafe extern "C" fn(
    *const AclTensor,
    *const AclTensor,
    *mut AclTensor,
    *mut u64,
    *mut *mut AclOpExecutor,
) -> AclnnStatus;
/// `(selfRef, other, workspaceSize, executor)`: aclnnInplaceMul.
pub type InplaceBinaryWsFn = unsafe extern "C" fn(
    *mut AclTensor,
    *const AclTensor,
    *mut u64,
    *mut *mut AclOpExecutor,
) -> AclnnStatus;
/// `(selfRef, other, alpha, workspaceSize, executor)`: aclnnInplaceAdd, aclnnInplaceSub.
pub type InplaceAlphaWsFn = unsafe extern "C" fn(
    *mut AclTensor,
    *const AclTensor,
    *const AclScalar,
    *mut u64,
    *mut *mut AclOpExecutor,
) -> AclnnStatus;
/// `(selfRef, workspaceSize, executor)`: aclnnInplaceRelu.
pub type InplaceUnaryWsFn =
    unsafe extern "C" fn(*mut AclTensor, *mut u64, *mut *mut AclOpExecutor) -> AclnnStatus;
/// `(self, other scalar, out, workspaceSize, executor)`: aclnnGtScalar.
pub type ScalarOutWsFn = unsafe extern "C" fn(
    *const AclTensor,
    *const AclScalar,
    *mut AclTensor,
    *mut u64,
    *mut *mut AclOpExecutor,
) -> AclnnStatus;
/// `(self, mat2, out, int8_t cubeMathType, workspaceSize, executor)`: aclnnMm.
pub type MmWsFn = unsafe extern "C" fn(
    *const AclTensor,
    *const AclTensor,
    *mut AclTensor,
    i8,
    *mut u64,
    *mut *mut AclOpExecutor,
) -> AclnnStatus;
/// `(self, dims, keepDims, dtype, out, workspaceSize, executor)`: aclnnReduceSum.
pub type ReduceSumWsFn = unsafe extern "C" fn(
    *const AclTensor,
    *const AclIntArray,
    bool,
    c_int,
    *mut AclTensor,
    *mut u64,
    *mut *mut AclOpExecutor,
) -> AclnnStatus;
/// `(self, int64_t dim, out, workspaceSize, executor)`: aclnnSoftmax.
pub type SoftmaxWsFn = unsafe extern "C" fn(
    *const AclTensor,
    i64,
    *mut AclTensor,
    *mut u64,
    *mut *mut AclOpExecutor,
) -> AclnnStatus;
/// `(varRef, mRef, vRef, maxGradNormOptionalRef, grad, step, lr, beta1,
/// beta2, weightDecay, eps, amsgrad, maximize, workspaceSize, executor)`:
/// aclnnApplyAdamWV2.
pub type AdamWWsFn = unsafe extern "C" fn(
    *mut AclTensor,
    *mut AclTensor,
    *mut AclTensor,
    *mut AclTensor,
    *const AclTensor,
    *const AclTensor,
    f32,
    f32,
    f32,
    f32,
    f32,
    bool,
    bool,
    *mut u64,
    *mut *mut AclOpExecutor,
) -> AclnnStatus;

/// One operator's two phases; `None` when the library does not export it.
pub type OpPair<W> = Option<(W, RunFn)>;

/// The aclnn entry points the crate uses (`libnnopbase.so`, `libopapi.so`).
#[derive(Clone, Copy)]
pub struct NnFns {
    /// `aclTensor *aclCreateTensor(const int64_t *viewDims, uint64_t viewDimsNum, aclDataType dataType,
    /// const int64_t *stride, int64_t offset, aclFormat format, const int64_t *storageDims,
    /// uint64_t storageDimsNum, void *tensorData)`
    pub create_tensor: unsafe extern "C" fn(
        *const i64,
        u64,
        c_int,
        *const i64,
        i64,
        c_int,
        *const i64,
        u64,
        *mut c_void,
    ) -> *mut AclTensor,
    /// `aclnnStatus aclDestroyTensor(const aclTensor *tensor)`
    pub destroy_tensor: unsafe extern "C" fn(*const AclTensor) -> AclnnStatus,
    /// `aclScalar *aclCreateScalar(void *value, aclDataType dataType)`
    pub create_scalar: unsafe extern "C" fn(*mut c_void, c_int) -> *mut AclScalar,
    /// `aclnnStatus aclDestroyScalar(const aclScalar *scalar)`
    pub destroy_scalar: unsafe extern "C" fn(*const AclScalar) -> AclnnStatus,
    /// `aclIntArray *aclCreateIntArray(const int64_t *value, uint64_t size)`
    pub create_int_array: unsafe extern "C" fn(*const i64, u64) -> *mut AclIntArray,
    /// `aclnnStatus aclDestroyIntArray(const aclIntArray *array)`
    pub destroy_int_array: unsafe extern "C" fn(*const AclIntArray) -> AclnnStatus,
    /// `aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor *executor)` (CANN 8+):
    /// frees an executor whose second phase is never run.
    pub destroy_executor: Option<unsafe extern "C" fn(*mut AclOpExecutor) -> AclnnStatus>,
    /// aclnnMm
    pub mm: OpPair<MmWsFn>,
    /// aclnnInplaceAdd
    pub inplace_add: OpPair<InplaceAlphaWsFn>,
    /// aclnnInplaceSub
    pub inplace_sub: OpPair<InplaceAlphaWsFn>,
    /// aclnnInplaceMul
    pub inplace_mul: OpPair<InplaceBinaryWsFn>,
    /// aclnnMul
    pub mul: OpPair<BinaryOutWsFn>,
    /// aclnnInplaceRelu
    pub inplace_relu: OpPair<InplaceUnaryWsFn>,
    /// aclnnGtScalar
    pub gt_scalar: OpPair<ScalarOutWsFn>,
    /// aclnnReduceSum
    pub reduce_sum: OpPair<ReduceSumWsFn>,
    /// aclnnSoftmax
    pub softmax: OpPair<SoftmaxWsFn>,
    /// aclnnApplyAdamWV2
    pub apply_adam_w: OpPair<AdamWWsFn>,
}

/// A loaded library and where it came from.
#[derive(Debug)]
pub struct Loaded {
    /// The library; unloading it would invalidate every pointer taken
    /// from it, so it lives as long as the tables.
    pub lib: Library,
    /// Where it was found.
    pub path: PathBuf,
}

/// Opens a shared library. The ACL runtime is opened with `RTLD_GLOBAL`, as
/// a program linked against it would have it: kernel libraries built by
/// CANN (and the simulated runtime's kernel library) resolve the runtime's
/// launch functions through the global scope.
///
/// # Safety
/// Loading a library runs its initialisers: `path` must name a library
/// whose initialisers are sound to run (the CANN libraries, the kernel
/// library built from `kernels/`, or the simulated runtime).
pub unsafe fn open(path: &Path, global: bool) -> std::result::Result<Library, libloading::Error> {
    #[cfg(unix)]
    {
        use libloading::os::unix::{Library as UnixLibrary, RTLD_GLOBAL, RTLD_LAZY, RTLD_LOCAL};
        // Lazy binding, as torch_npu loads ACL: symbols of the CANN
        // libraries' own dependencies that the crate never calls need not
        // resolve.
        let flags = RTLD_LAZY | if global { RTLD_GLOBAL } else { RTLD_LOCAL };
        // SAFETY: the caller vouches for the library's initialisers.
        unsafe { UnixLibrary::open(Some(path), flags) }.map(Library::from)
    }
    #[cfg(not(unix))]
    {
        let _ = global;
        // SAFETY: the caller vouches for the library's initialisers.
        unsafe { Library::new(path) }
    }
}

/// Looks `name` up in `lib` as a function of type `F`.
///
/// # Safety
/// `F` must be the exact C type of the symbol (an `unsafe extern "C" fn`
/// matching its header), and the returned pointer must not be called after
/// `lib` is unloaded.
pub unsafe fn symbol<F: Copy>(lib: &Loaded, name: &str) -> Result<F> {
    // SAFETY: forwarded to the caller.
    let sym = unsafe { lib.lib.get::<F>(name.as_bytes()) };
    match sym {
        Ok(s) => Ok(*s),
        Err(e) => Err(Error::MissingSymbol {
            library: lib.path.display().to_string(),
            symbol: name.to_owned(),
            message: e.to_string(),
            hint: "the library is older than the crate expects, or not the one meant; check the CANN version (8.x) or the path".to_owned(),
        }),
    }
}

/// Looks `name` up in the first of `libs` that exports it.
///
/// # Safety
/// As for [`symbol`], for every library.
pub unsafe fn symbol_in<F: Copy>(libs: &[&Loaded], name: &str) -> Result<F> {
    let mut last = None;
    for lib in libs {
        // SAFETY: forwarded to the caller.
        match unsafe { symbol::<F>(lib, name) } {
            Ok(f) => return Ok(f),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| Error::MissingSymbol {
        library: "(no library)".to_owned(),
        symbol: name.to_owned(),
        message: "no library to search".to_owned(),
        hint: "the aclnn libraries were not loaded".to_owned(),
    }))
}

impl RuntimeFns {
    /// Resolves every runtime entry point of `lib`.
    ///
    /// # Safety
    /// `lib` must be an ACL runtime library whose symbols have the C
    /// types of the CANN headers (as declared on the fields), and the table
    /// must not be used after `lib` is unloaded.
    pub unsafe fn resolve(lib: &Loaded) -> Result<RuntimeFns> {
        // SAFETY: for every call below, the field types are the header types
        // of these symbols; the caller keeps `lib` loaded.
        unsafe {
            Ok(RuntimeFns {
                init: symbol(lib, "aclInit")?,
                finalize: symbol(lib, "aclFinalize")?,
                set_device: symbol(lib, "aclrtSetDevice")?,
                reset_device: symbol(lib, "aclrtResetDevice")?,
                get_device_count: symbol(lib, "aclrtGetDeviceCount")?,
                create_stream: symbol(lib, "aclrtCreateStream")?,
                destroy_stream: symbol(lib, "aclrtDestroyStream")?,
                synchronize_stream: symbol(lib, "aclrtSynchronizeStream")?,
                malloc: symbol(lib, "aclrtMalloc")?,
                free: symbol(lib, "aclrtFree")?,
                memset: symbol(lib, "aclrtMemset")?,
                memcpy: symbol(lib, "aclrtMemcpy")?,
                get_mem_info: symbol(lib, "aclrtGetMemInfo")?,
                recent_err_msg: symbol(lib, "aclGetRecentErrMsg")?,
                get_device_capability: symbol(lib, "aclGetDeviceCapability").ok(),
            })
        }
    }
}

/// Both phases of one operator, or `None` when either is missing.
///
/// # Safety
/// `W` must be the C type of the workspace function `ws`; the libraries
/// stay loaded while the pointers are used.
unsafe fn pair<W: Copy>(libs: &[&Loaded], ws: &str, run: &str) -> OpPair<W> {
    // SAFETY: forwarded to the caller; `RunFn` is the type every second
    // phase has.
    unsafe {
        let w = symbol_in::<W>(libs, ws).ok()?;
        let r = symbol_in::<RunFn>(libs, run).ok()?;
        Some((w, r))
    }
}

impl NnFns {
    /// Resolves the aclnn entry points from `libs` (libnnopbase, libopapi;
    /// each symbol from the first that has it). Operators a library lacks
    /// are left `None` and reported when used.
    ///
    /// # Safety
    /// As for [`RuntimeFns::resolve`], for the aclnn libraries.
    pub unsafe fn resolve(libs: &[&Loaded]) -> Result<NnFns> {
        // SAFETY: for every call below, the field and alias types are the
        // header types of these symbols; the caller keeps `libs` loaded.
        unsafe {
            Ok(NnFns {
                create_tensor: symbol_in(libs, "aclCreateTensor")?,
                destroy_tensor: symbol_in(libs, "aclDestroyTensor")?,
                create_scalar: symbol_in(libs, "aclCreateScalar")?,
                destroy_scalar: symbol_in(libs, "aclDestroyScalar")?,
                create_int_array: symbol_in(libs, "aclCreateIntArray")?,
                destroy_int_array: symbol_in(libs, "aclDestroyIntArray")?,
                destroy_executor: symbol_in(libs, "aclDestroyAclOpExecutor").ok(),
                mm: pair::<MmWsFn>(libs, "aclnnMmGetWorkspaceSize", "aclnnMm"),
                inplace_add: pair::<InplaceAlphaWsFn>(
                    libs,
                    "aclnnInplaceAddGetWorkspaceSize",
                    "aclnnInplaceAdd",
                ),
                inplace_sub: pair::<InplaceAlphaWsFn>(
                    libs,
                    "aclnnInplaceSubGetWorkspaceSize",
                    "aclnnInplaceSub",
                ),
                inplace_mul: pair::<InplaceBinaryWsFn>(
                    libs,
                    "aclnnInplaceMulGetWorkspaceSize",
                    "aclnnInplaceMul",
                ),
                mul: pair::<BinaryOutWsFn>(libs, "aclnnMulGetWorkspaceSize", "aclnnMul"),
                inplace_relu: pair::<InplaceUnaryWsFn>(
                    libs,
                    "aclnnInplaceReluGetWorkspaceSize",
                    "aclnnInplaceRelu",
                ),
                gt_scalar: pair::<ScalarOutWsFn>(
                    libs,
                    "aclnnGtScalarGetWorkspaceSize",
                    "aclnnGtScalar",
                ),
                reduce_sum: pair::<ReduceSumWsFn>(
                    libs,
                    "aclnnReduceSumGetWorkspaceSize",
                    "aclnnReduceSum",
                ),
                softmax: pair::<SoftmaxWsFn>(libs, "aclnnSoftmaxGetWorkspaceSize", "aclnnSoftmax"),
                apply_adam_w: pair::<AdamWWsFn>(
                    libs,
                    "aclnnApplyAdamWV2GetWorkspaceSize",
                    "aclnnApplyAdamWV2",
                ),
            })
        }
    }
}
