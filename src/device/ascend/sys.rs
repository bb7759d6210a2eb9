//! Layer 1: the raw C interface of the ACL runtime and the aclnn operator
//! libraries, resolved at run time into tables of function pointers.
//!
//! Signatures follow the CANN headers: `acl/acl_rt.h`, `acl/acl_base_rt.h`
//! and `acl/error_codes/rt_error_codes.h` (hicann/runtime), `aclnn/acl_meta.h`
//! and the `op_api/aclnn_*.h` operator headers (hicann/ops-math, ops-nn).
//! C enums are `int`; `aclError` is `int`, `aclnnStatus` is `int32_t`.
//! Nothing here checks anything: see `result` for the error mapping and the
//! safe layer for ownership.

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
/// `aclrtEvent` (`typedef void *aclrtEvent`, `acl/acl_base_rt.h`).
pub type AclrtEvent = *mut c_void;

/// `aclrtEventRecordedStatus::ACL_EVENT_RECORDED_STATUS_NOT_READY`
/// (`acl/acl_rt.h`): the work recorded before the event has not completed.
pub const ACL_EVENT_RECORDED_STATUS_NOT_READY: c_int = 0;
/// `aclrtEventRecordedStatus::ACL_EVENT_RECORDED_STATUS_COMPLETE`
/// (`acl/acl_rt.h`).
pub const ACL_EVENT_RECORDED_STATUS_COMPLETE: c_int = 1;

/// `aclrtDrvMemHandle` (`typedef void *aclrtDrvMemHandle`, `acl/acl_rt.h`):
/// physical memory from `aclrtMallocPhysical`.
pub type AclrtDrvMemHandle = *mut c_void;

/// `aclrtMemHandleType::ACL_MEM_HANDLE_TYPE_NONE`, the only value
/// `aclrtMallocPhysical` supports (hicann/runtime
/// `docs/zh/api_ref/25-04_Structs.md`, `aclrtPhysicalMemProp`).
pub const ACL_MEM_HANDLE_TYPE_NONE: c_int = 0;
/// `aclrtMemAllocationType::ACL_MEM_ALLOCATION_TYPE_PINNED`, the only value
/// supported (same page).
pub const ACL_MEM_ALLOCATION_TYPE_PINNED: c_int = 0;
/// `aclrtMemLocationType::ACL_MEM_LOCATION_TYPE_DEVICE` (`HOST` is 0).
pub const ACL_MEM_LOCATION_TYPE_DEVICE: c_int = 1;
/// `aclrtMemAttr::ACL_HBM_MEM_HUGE`: HBM in 2 MiB pages, what torch_npu's
/// expandable segments map.
pub const ACL_HBM_MEM_HUGE: c_int = 4;
/// `aclrtMemGranularityOptions::ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM`.
pub const ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM: c_int = 0;

/// `aclrtMemLocation` (`acl/acl_rt.h`): `{ uint32_t id; aclrtMemLocationType type; }`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AclrtMemLocation {
    /// The device id (ignored for host memory).
    pub id: u32,
    /// `aclrtMemLocationType` (a C enum, an `int`).
    pub kind: c_int,
}

/// `aclrtPhysicalMemProp` (`acl/acl_rt.h`): `{ aclrtMemHandleType
/// handleType; aclrtMemAllocationType allocationType; aclrtMemAttr memAttr;
/// aclrtMemLocation location; uint64_t reserve; }`, 32 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AclrtPhysicalMemProp {
    /// `aclrtMemHandleType`.
    pub handle_type: c_int,
    /// `aclrtMemAllocationType`.
    pub allocation_type: c_int,
    /// `aclrtMemAttr`.
    pub mem_attr: c_int,
    /// Where the memory is.
    pub location: AclrtMemLocation,
    /// Reserved.
    pub reserve: u64,
}

/// The virtual-memory entry points (`acl/acl_rt.h`; hicann/runtime
/// `docs/zh/api_ref/11-04_virtual_memory_management.md`), resolved all
/// together: a runtime lacking any of them has no mapped ranges.
#[derive(Clone, Copy)]
pub struct VmmFns {
    /// `aclError aclrtMemGetAllocationGranularity(aclrtPhysicalMemProp *prop,
    /// aclrtMemGranularityOptions option, size_t *granularity)`
    pub granularity: unsafe extern "C" fn(*mut AclrtPhysicalMemProp, c_int, *mut usize) -> AclError,
    /// `aclError aclrtReserveMemAddress(void **virPtr, size_t size, size_t
    /// alignment, void *expectPtr, uint64_t flags)`
    pub reserve_address:
        unsafe extern "C" fn(*mut *mut c_void, usize, usize, *mut c_void, u64) -> AclError,
    /// `aclError aclrtReleaseMemAddress(void *virPtr)`
    pub release_address: unsafe extern "C" fn(*mut c_void) -> AclError,
    /// `aclError aclrtMallocPhysical(aclrtDrvMemHandle *handle, size_t size,
    /// const aclrtPhysicalMemProp *prop, uint64_t flags)`
    pub malloc_physical: unsafe extern "C" fn(
        *mut AclrtDrvMemHandle,
        usize,
        *const AclrtPhysicalMemProp,
        u64,
    ) -> AclError,
    /// `aclError aclrtFreePhysical(aclrtDrvMemHandle handle)`
    pub free_physical: unsafe extern "C" fn(AclrtDrvMemHandle) -> AclError,
    /// `aclError aclrtMapMem(void *virPtr, size_t size, size_t offset,
    /// aclrtDrvMemHandle handle, uint64_t flags)`
    pub map_mem:
        unsafe extern "C" fn(*mut c_void, usize, usize, AclrtDrvMemHandle, u64) -> AclError,
    /// `aclError aclrtUnmapMem(void *virPtr)`
    pub unmap_mem: unsafe extern "C" fn(*mut c_void) -> AclError,
}

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
    /// `aclError aclFinalizeReference(uint64_t *refCount)`: takes back one
    /// `aclInit` (absent from older toolkits).
    pub finalize_reference: Option<unsafe extern "C" fn(*mut u64) -> AclError>,
    /// `const char *aclrtGetSocName()` (`acl_base_rt.h`; absent from older
    /// toolkits).
    pub get_soc_name: Option<unsafe extern "C" fn() -> *const c_char>,
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
    /// `aclError aclrtCreateEvent(aclrtEvent *event)` (`acl/acl_rt.h`,
    /// hicann/runtime `include/external/acl/acl_rt.h`). Optional only so
    /// that a runtime without it still loads for everything else; every
    /// CANN runtime this crate knows exports it.
    pub create_event: Option<unsafe extern "C" fn(*mut AclrtEvent) -> AclError>,
    /// `aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream)`
    /// (`acl/acl_rt.h`).
    pub record_event: Option<unsafe extern "C" fn(AclrtEvent, AclrtStream) -> AclError>,
    /// `aclError aclrtQueryEventStatus(aclrtEvent event, aclrtEventRecordedStatus *status)`
    /// (`acl/acl_rt.h`; the C enum is written as an `int`).
    pub query_event_status: Option<unsafe extern "C" fn(AclrtEvent, *mut c_int) -> AclError>,
    /// `aclError aclrtDestroyEvent(aclrtEvent event)` (`acl/acl_rt.h`).
    pub destroy_event: Option<unsafe extern "C" fn(AclrtEvent) -> AclError>,
    /// The virtual-memory calls, or the first of them the runtime does not
    /// export (mapped ranges are then unsupported; everything else works).
    pub vmm: std::result::Result<VmmFns, &'static str>,
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

/// The CANN operator repository an operator belongs to, which names the
/// per-repository library that exports it (`libopapi_math.so`,
/// `libopapi_nn.so`; hicann/ops-math and hicann/ops-nn
/// `docs/zh/op_api_list.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpRepo {
    /// hicann/ops-math.
    Math,
    /// hicann/ops-nn.
    Nn,
}

impl OpRepo {
    /// The repository's name (`ops-math`, `ops-nn`).
    pub fn name(self) -> &'static str {
        match self {
            OpRepo::Math => "ops-math",
            OpRepo::Nn => "ops-nn",
        }
    }
}

/// Every operator the crate calls and its repository: Mm, Relu, Softmax and
/// ApplyAdamWV2 are ops-nn's; Add, Sub, Mul, GtScalar and ReduceSum
/// ops-math's (where their `op_api/aclnn_*.h` headers live).
pub const OPERATORS: [(&str, OpRepo); 10] = [
    ("aclnnMm", OpRepo::Nn),
    ("aclnnInplaceAdd", OpRepo::Math),
    ("aclnnInplaceSub", OpRepo::Math),
    ("aclnnInplaceMul", OpRepo::Math),
    ("aclnnMul", OpRepo::Math),
    ("aclnnInplaceRelu", OpRepo::Nn),
    ("aclnnGtScalar", OpRepo::Math),
    ("aclnnReduceSum", OpRepo::Math),
    ("aclnnSoftmax", OpRepo::Nn),
    ("aclnnApplyAdamWV2", OpRepo::Nn),
];

/// The repository of operator `name` (`aclnnMm`, ...), if the crate calls it.
pub fn repo_of(name: &str) -> Option<OpRepo> {
    OPERATORS.iter().find(|(n, _)| *n == name).map(|&(_, r)| r)
}

/// One operator's two phases, both from one library (never mixed).
#[derive(Clone, Copy)]
pub struct OpEntry<W> {
    /// `aclnnXxxGetWorkspaceSize`.
    pub ws: W,
    /// `aclnnXxx`.
    pub run: RunFn,
    /// Index into [`NnFns::libraries`] of the library both came from.
    pub library: usize,
}

/// One operator; `None` when no library searched exports both phases.
pub type OpPair<W> = Option<OpEntry<W>>;

/// `aclnnStatus f(aclOpExecutor *executor)`:
/// `aclSetAclOpExecutorRepeatable`, `aclDestroyAclOpExecutor`.
pub type ExecutorFn = unsafe extern "C" fn(*mut AclOpExecutor) -> AclnnStatus;

/// The aclnn entry points the crate uses: the base objects from
/// `libnnopbase.so`, each operator from its repository's library
/// (`libopapi_nn.so`, `libopapi_math.so`) or, where that is absent or lacks
/// it, the combined `libopapi.so`.
#[derive(Clone)]
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
    /// `aclnnStatus aclSetAclOpExecutorRepeatable(aclOpExecutor *executor)`:
    /// hands an executor, right after its first phase, to the caller, who
    /// may run it again and must destroy it.
    pub set_repeatable: Option<ExecutorFn>,
    /// `aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor *executor)`:
    /// documented for repeatable executors only.
    pub destroy_executor: Option<ExecutorFn>,
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
    /// Where each operator library came from (indices of
    /// [`OpEntry::library`]).
    pub libraries: Vec<PathBuf>,
    /// Every operator library searched and what came of it, for the error
    /// a missing operator reports.
    pub searched: Vec<String>,
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
                finalize_reference: symbol(lib, "aclFinalizeReference").ok(),
                get_soc_name: symbol(lib, "aclrtGetSocName").ok(),
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
                create_event: symbol(lib, "aclrtCreateEvent").ok(),
                record_event: symbol(lib, "aclrtRecordEvent").ok(),
                query_event_status: symbol(lib, "aclrtQueryEventStatus").ok(),
                destroy_event: symbol(lib, "aclrtDestroyEvent").ok(),
                vmm: VmmFns::resolve(lib),
            })
        }
    }
}

impl VmmFns {
    /// Resolves every virtual-memory entry point of `lib`, or names the
    /// first one missing.
    ///
    /// # Safety
    /// As for [`RuntimeFns::resolve`].
    pub unsafe fn resolve(lib: &Loaded) -> std::result::Result<VmmFns, &'static str> {
        /// # Safety
        /// `F` is the header type of `name`.
        unsafe fn get<F: Copy>(
            lib: &Loaded,
            name: &'static str,
        ) -> std::result::Result<F, &'static str> {
            // SAFETY: forwarded to the caller.
            unsafe { symbol(lib, name) }.map_err(|_| name)
        }
        // SAFETY: the field types are the header types of these symbols;
        // the caller keeps `lib` loaded.
        unsafe {
            Ok(VmmFns {
                granularity: get(lib, "aclrtMemGetAllocationGranularity")?,
                reserve_address: get(lib, "aclrtReserveMemAddress")?,
                release_address: get(lib, "aclrtReleaseMemAddress")?,
                malloc_physical: get(lib, "aclrtMallocPhysical")?,
                free_physical: get(lib, "aclrtFreePhysical")?,
                map_mem: get(lib, "aclrtMapMem")?,
                unmap_mem: get(lib, "aclrtUnmapMem")?,
            })
        }
    }
}

/// Both phases of one operator from the first of `candidates` (indices
/// into `libs`) that exports both, or `None`.
///
/// # Safety
/// `W` must be the C type of the workspace function `ws`; the libraries
/// stay loaded while the pointers are used.
unsafe fn pair<W: Copy>(libs: &[&Loaded], candidates: &[usize], ws: &str, run: &str) -> OpPair<W> {
    candidates.iter().find_map(|&i| {
        let lib = libs.get(i)?;
        // SAFETY: forwarded to the caller; `RunFn` is the type every second
        // phase has.
        let (w, r) = unsafe { (symbol::<W>(lib, ws).ok()?, symbol::<RunFn>(lib, run).ok()?) };
        Some(OpEntry {
            ws: w,
            run: r,
            library: i,
        })
    })
}

impl NnFns {
    /// Resolves the base objects from `nnopbase` (index 0 of
    /// [`NnFns::libraries`]); no operator is resolved yet.
    ///
    /// # Safety
    /// As for [`RuntimeFns::resolve`], for libnnopbase.
    pub unsafe fn resolve_base(nnopbase: &Loaded) -> Result<NnFns> {
        let lib = nnopbase;
        // SAFETY: for every call below, the field types are the header
        // types of these symbols; the caller keeps the library loaded.
        unsafe {
            Ok(NnFns {
                create_tensor: symbol(lib, "aclCreateTensor")?,
                destroy_tensor: symbol(lib, "aclDestroyTensor")?,
                create_scalar: symbol(lib, "aclCreateScalar")?,
                destroy_scalar: symbol(lib, "aclDestroyScalar")?,
                create_int_array: symbol(lib, "aclCreateIntArray")?,
                destroy_int_array: symbol(lib, "aclDestroyIntArray")?,
                set_repeatable: symbol(lib, "aclSetAclOpExecutorRepeatable").ok(),
                destroy_executor: symbol(lib, "aclDestroyAclOpExecutor").ok(),
                mm: None,
                inplace_add: None,
                inplace_sub: None,
                inplace_mul: None,
                mul: None,
                inplace_relu: None,
                gt_scalar: None,
                reduce_sum: None,
                softmax: None,
                apply_adam_w: None,
                libraries: vec![nnopbase.path.clone()],
                searched: Vec::new(),
            })
        }
    }

    /// Resolves every operator still missing from the libraries
    /// `candidates` names for its repository (indices into `libs`, which
    /// matches [`NnFns::libraries`]); both phases of one operator always
    /// come from one library.
    ///
    /// # Safety
    /// As for [`RuntimeFns::resolve`], for the aclnn libraries.
    pub unsafe fn resolve_missing(
        &mut self,
        libs: &[&Loaded],
        candidates: &dyn Fn(OpRepo) -> Vec<usize>,
    ) {
        let (nn, math) = (candidates(OpRepo::Nn), candidates(OpRepo::Math));
        // SAFETY: for every call below, the alias types are the header
        // types of these symbols; the caller keeps `libs` loaded.
        unsafe {
            if self.mm.is_none() {
                self.mm = pair(libs, &nn, "aclnnMmGetWorkspaceSize", "aclnnMm");
            }
            if self.inplace_add.is_none() {
                self.inplace_add = pair(
                    libs,
                    &math,
                    "aclnnInplaceAddGetWorkspaceSize",
                    "aclnnInplaceAdd",
                );
            }
            if self.inplace_sub.is_none() {
                self.inplace_sub = pair(
                    libs,
                    &math,
                    "aclnnInplaceSubGetWorkspaceSize",
                    "aclnnInplaceSub",
                );
            }
            if self.inplace_mul.is_none() {
                self.inplace_mul = pair(
                    libs,
                    &math,
                    "aclnnInplaceMulGetWorkspaceSize",
                    "aclnnInplaceMul",
                );
            }
            if self.mul.is_none() {
                self.mul = pair(libs, &math, "aclnnMulGetWorkspaceSize", "aclnnMul");
            }
            if self.inplace_relu.is_none() {
                self.inplace_relu = pair(
                    libs,
                    &nn,
                    "aclnnInplaceReluGetWorkspaceSize",
                    "aclnnInplaceRelu",
                );
            }
            if self.gt_scalar.is_none() {
                self.gt_scalar = pair(
                    libs,
                    &math,
                    "aclnnGtScalarGetWorkspaceSize",
                    "aclnnGtScalar",
                );
            }
            if self.reduce_sum.is_none() {
                self.reduce_sum = pair(
                    libs,
                    &math,
                    "aclnnReduceSumGetWorkspaceSize",
                    "aclnnReduceSum",
                );
            }
            if self.softmax.is_none() {
                self.softmax = pair(libs, &nn, "aclnnSoftmaxGetWorkspaceSize", "aclnnSoftmax");
            }
            if self.apply_adam_w.is_none() {
                self.apply_adam_w = pair(
                    libs,
                    &nn,
                    "aclnnApplyAdamWV2GetWorkspaceSize",
                    "aclnnApplyAdamWV2",
                );
            }
        }
    }

    /// The index into [`NnFns::libraries`] operator `name` was resolved
    /// from, if it was.
    pub fn library_index(&self, name: &str) -> Option<usize> {
        match name {
            "aclnnMm" => self.mm.map(|e| e.library),
            "aclnnInplaceAdd" => self.inplace_add.map(|e| e.library),
            "aclnnInplaceSub" => self.inplace_sub.map(|e| e.library),
            "aclnnInplaceMul" => self.inplace_mul.map(|e| e.library),
            "aclnnMul" => self.mul.map(|e| e.library),
            "aclnnInplaceRelu" => self.inplace_relu.map(|e| e.library),
            "aclnnGtScalar" => self.gt_scalar.map(|e| e.library),
            "aclnnReduceSum" => self.reduce_sum.map(|e| e.library),
            "aclnnSoftmax" => self.softmax.map(|e| e.library),
            "aclnnApplyAdamWV2" => self.apply_adam_w.map(|e| e.library),
            _ => None,
        }
    }

    /// Whether some operator is still unresolved.
    pub fn any_missing(&self) -> bool {
        OPERATORS
            .iter()
            .any(|(name, _)| self.library_index(name).is_none())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn the_physical_memory_properties_have_the_c_layout() {
        // Four 4-byte enums and ids, then the 8-byte-aligned reserve.
        assert_eq!(size_of::<AclrtMemLocation>(), 8);
        assert_eq!(size_of::<AclrtPhysicalMemProp>(), 32);
        assert_eq!(offset_of!(AclrtPhysicalMemProp, mem_attr), 8);
        assert_eq!(offset_of!(AclrtPhysicalMemProp, location), 12);
        assert_eq!(offset_of!(AclrtPhysicalMemProp, reserve), 24);
    }
}
