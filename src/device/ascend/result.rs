//! Layer 2: ACL calls that check their status. Each wrapper calls one entry
//! point and turns a non-zero `aclError` into a [`Failure`] carrying the
//! code and the runtime's recent error messages, read right after the
//! failing call: `aclGetRecentErrMsg` returns every message since it was
//! last called, newest first, and clears them; its pointer is valid only
//! until the next call (hicann/runtime
//! `docs/zh/api_ref/13_exception_handling.md`).

use std::ffi::{CStr, c_int, c_void};

use super::sys::{
    ACL_DEVICE_INFO_VECTOR_CORE_NUM, ACL_ERROR_REPEAT_INITIALIZE,
    ACL_EVENT_RECORDED_STATUS_NOT_READY, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM, ACL_SUCCESS,
    AclError, AclnnStatus, AclrtDrvMemHandle, AclrtEvent, AclrtPhysicalMemProp, AclrtStream,
    RuntimeFns, VmmFns,
};
use crate::error::Error;

/// A failed call: which, its code and the runtime's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The entry point.
    pub op: String,
    /// Its status code.
    pub code: i32,
    /// `aclGetRecentErrMsg` right after the failure ("" if none).
    pub message: String,
}

impl Failure {
    /// The crate error for this failure on `device`; codes with a known fix
    /// carry it after the runtime's message.
    pub fn into_error(self, device: &str) -> Error {
        let message = match (code_fix(self.code), self.message.is_empty()) {
            (Some(fix), true) => fix.to_owned(),
            (Some(fix), false) => format!("{}; {fix}", self.message),
            (None, _) => self.message,
        };
        Error::Acl {
            device: device.to_owned(),
            op: self.op,
            code: self.code,
            name: code_name(self.code),
            message,
        }
    }
}

/// How to fix the status codes whose cause is the installation, per the
/// aclnn return-code table (hicann/opbase
/// `docs/en/api/nnopbase/opdev/aclnn_return_code/aclnn_return_codes.md`).
///
/// ```
/// use tensor_arena::device::ascend::code_fix;
/// assert!(code_fix(561107).unwrap().contains("ASCEND_OPP_PATH"));
/// assert!(code_fix(207001).is_none());
/// ```
pub fn code_fix(code: i32) -> Option<&'static str> {
    match code {
        561_003 | 561_112 => Some(
            "the operator's kernel package is not installed or not loaded: install the CANN ops (operator) package for this SoC and load set_env.sh",
        ),
        561_107 => Some(
            "ASCEND_OPP_PATH is not set: load the toolkit's environment (`source /usr/local/Ascend/cann/set_env.sh`) before starting the process",
        ),
        _ => None,
    }
}

/// The name the CANN headers give an `aclError` or `aclnnStatus` code:
/// `acl/acl_base_rt.h` and `acl/error_codes/rt_error_codes.h` (hicann/runtime)
/// for ACL, the aclnn return-code table (hicann/opbase
/// `docs/en/api/nnopbase/opdev/aclnn_return_code/aclnn_return_codes.md`) for
/// aclnn.
///
/// ```
/// use tensor_arena::device::ascend::code_name;
/// assert_eq!(code_name(207001), "ACL_ERROR_RT_MEMORY_ALLOCATION");
/// assert_eq!(code_name(161002), "ACLNN_ERR_PARAM_INVALID");
/// assert_eq!(code_name(-5), "unknown");
/// ```
pub fn code_name(code: i32) -> &'static str {
    match code {
        0 => "ACL_SUCCESS",
        100_000 => "ACL_ERROR_INVALID_PARAM",
        100_001 => "ACL_ERROR_UNINITIALIZE",
        100_002 => "ACL_ERROR_REPEAT_INITIALIZE",
        100_037 => "ACL_ERROR_REPEAT_FINALIZE",
        107_000 => "ACL_ERROR_RT_PARAM_INVALID",
        107_001 => "ACL_ERROR_RT_INVALID_DEVICEID",
        107_002 => "ACL_ERROR_RT_CONTEXT_NULL",
        107_003 => "ACL_ERROR_RT_STREAM_CONTEXT",
        107_008 => "ACL_ERROR_RT_ADDR_UNALIGNED",
        107_018 => "ACL_ERROR_RT_INVALID_MALLOC_TYPE",
        107_020 => "ACL_ERROR_RT_TASK_TIMEOUT",
        161_001 => "ACLNN_ERR_PARAM_NULLPTR",
        161_002 => "ACLNN_ERR_PARAM_INVALID",
        200_000 => "ACL_ERROR_BAD_ALLOC",
        200_001 => "ACL_ERROR_API_NOT_SUPPORT",
        200_002 => "ACL_ERROR_INVALID_DEVICE",
        200_003 => "ACL_ERROR_MEMORY_ADDRESS_UNALIGNED",
        207_000 => "ACL_ERROR_RT_FEATURE_NOT_SUPPORT",
        207_001 => "ACL_ERROR_RT_MEMORY_ALLOCATION",
        207_002 => "ACL_ERROR_RT_MEMORY_FREE",
        207_004 => "ACL_ERROR_RT_NO_DEVICE",
        207_008 => "ACL_ERROR_RT_NO_STREAM_RESOURCE",
        207_018 => "ACL_ERROR_RT_DEVICE_OOM",
        361_001 => "ACLNN_ERR_RUNTIME_ERROR",
        500_000 => "ACL_ERROR_INTERNAL_ERROR",
        500_001 => "ACL_ERROR_FAILURE",
        500_003 => "ACL_ERROR_RT_FAILURE",
        500_002 => "ACL_ERROR_GE_FAILURE",
        500_004 => "ACL_ERROR_DRV_FAILURE",
        207_005 => "ACL_ERROR_RT_RESOURCE_ALLOC_FAIL",
        207_012 => "ACL_ERROR_RT_OVER_LIMIT",
        507_000 => "ACL_ERROR_RT_INTERNAL_ERROR",
        507_008 => "ACL_ERROR_RT_SOC_VERSION",
        507_024 => "ACL_ERROR_RT_KERNEL_UNREGISTERING",
        507_027 => "ACL_ERROR_RT_KERNEL_LOOKUP",
        507_011 => "ACL_ERROR_RT_MODEL_EXECUTE",
        507_013 => "ACL_ERROR_RT_SYS_DMA",
        507_014 => "ACL_ERROR_RT_AICORE_TIMEOUT",
        507_015 => "ACL_ERROR_RT_AICORE_EXCEPTION",
        507_034 => "ACL_ERROR_RT_VECTOR_CORE_TIMEOUT",
        507_035 => "ACL_ERROR_RT_VECTOR_CORE_EXCEPTION",
        507_046 => "ACL_ERROR_RT_STREAM_SYNC_TIMEOUT",
        507_052 => "ACL_ERROR_RT_COPY_DATA",
        507_053 => "ACL_ERROR_RT_DEVICE_MEM_ERROR",
        507_899 => "ACL_ERROR_RT_DRV_INTERNAL_ERROR",
        561_000 => "ACLNN_ERR_INNER",
        561_001 => "ACLNN_ERR_INNER_INFERSHAPE_ERROR",
        561_002 => "ACLNN_ERR_INNER_TILING_ERROR",
        561_003 => "ACLNN_ERR_INNER_FIND_KERNEL_ERROR",
        561_101 => "ACLNN_ERR_INNER_CREATE_EXECUTOR",
        561_102 => "ACLNN_ERR_INNER_NOT_TRANS_EXECUTOR",
        561_103 => "ACLNN_ERR_INNER_NULLPTR",
        561_104 => "ACLNN_ERR_INNER_WRONG_ATTR_INFO_SIZE",
        561_105 => "ACLNN_ERR_INNER_KEY_CONFLICT",
        561_106 => "ACLNN_ERR_INNER_INVALID_IMPL_MODE",
        561_107 => "ACLNN_ERR_INNER_OPP_PATH_NOT_FOUND",
        561_108 => "ACLNN_ERR_INNER_LOAD_JSON_FAILED",
        561_109 => "ACLNN_ERR_INNER_JSON_VALUE_NOT_FOUND",
        561_110 => "ACLNN_ERR_INNER_JSON_FORMAT_INVALID",
        561_111 => "ACLNN_ERR_INNER_JSON_DTYPE_INVALID",
        561_112 => "ACLNN_ERR_INNER_OPP_KERNEL_PKG_NOT_FOUND",
        561_113 => "ACLNN_ERR_INNER_OP_FILE_INVALID",
        561_114 => "ACLNN_ERR_INNER_ATTR_NUM_OUT_OF_BOUND",
        561_115 => "ACLNN_ERR_INNER_ATTR_LEN_NOT_ENOUGH",
        561_116 => "ACLNN_ERR_INNER_INPUT_NUM_IN_JSON_TOO_LARGE",
        561_117 => "ACLNN_ERR_INNER_INPUT_JSON_IS_NULL",
        561_118 => "ACLNN_ERR_INNER_STATIC_WORKSPACE_INVALID",
        561_119 => "ACLNN_ERR_INNER_STATIC_BLOCK_DIM_INVALID",
        _ => "unknown",
    }
}

/// The runtime's recent error messages, newest first, copied out ("" when
/// there are none).
pub fn recent_message(rt: &RuntimeFns) -> String {
    // SAFETY: `aclGetRecentErrMsg` takes no arguments and returns null or
    // a NUL-terminated string valid until the next call on this thread,
    // which is after the copy below.
    unsafe {
        let p = (rt.recent_err_msg)();
        if p.is_null() {
            String::new()
        } else {
            CStr::from_ptr(p).to_string_lossy().trim().to_owned()
        }
    }
}

/// `Ok` for `ACL_SUCCESS`, else a [`Failure`] of `op` with the message.
pub fn check(rt: &RuntimeFns, op: &str, code: i32) -> Result<(), Failure> {
    if code == ACL_SUCCESS {
        Ok(())
    } else {
        Err(Failure {
            op: op.to_owned(),
            code,
            message: recent_message(rt),
        })
    }
}

/// `Ok` for `ACLNN_SUCCESS` (0), else a [`Failure`] of `{op}{phase}`
/// (`aclnnMm` + `GetWorkspaceSize` for a first phase, `""` for the second),
/// with the runtime's recent message, where aclnn reports its details.
pub fn check_nn(
    rt: &RuntimeFns,
    op: &str,
    phase: &str,
    status: AclnnStatus,
) -> Result<(), Failure> {
    if status == 0 {
        Ok(())
    } else {
        Err(Failure {
            op: format!("{op}{phase}"),
            code: status,
            message: recent_message(rt),
        })
    }
}

/// `aclInit(NULL)`; `Ok(false)` when the process had already initialised
/// ACL (`ACL_ERROR_REPEAT_INITIALIZE`), which is harmless.
///
/// # Safety
/// `rt` was resolved from a runtime library that is still loaded.
pub unsafe fn init(rt: &RuntimeFns) -> Result<bool, Failure> {
    // SAFETY: a null config path is allowed (the header says so).
    let code: AclError = unsafe { (rt.init)(std::ptr::null()) };
    if code == ACL_ERROR_REPEAT_INITIALIZE {
        // Consume the message so it does not surface on a later failure.
        let _ = recent_message(rt);
        return Ok(false);
    }
    check(rt, "aclInit", code).map(|()| true)
}

/// `aclFinalizeReference(NULL)` (one `aclInit` taken back), or
/// `aclFinalize()` where the toolkit lacks it.
///
/// # Safety
/// `rt` is loaded; nothing of the caller's `aclInit` is used afterwards (the
/// last reference tears the runtime down, and `aclFinalize` always does).
pub unsafe fn finalize(rt: &RuntimeFns) -> Result<(), Failure> {
    match rt.finalize_reference {
        // SAFETY: a null count is allowed (the header says so); the caller
        // guarantees nothing of its reference is used after.
        Some(f) => check(rt, "aclFinalizeReference", unsafe {
            f(std::ptr::null_mut())
        }),
        // SAFETY: no arguments; the caller guarantees nothing uses ACL after.
        None => check(rt, "aclFinalize", unsafe { (rt.finalize)() }),
    }
}

/// `aclrtGetSocName()`, copied out; `None` when the runtime lacks it or
/// answers null.
///
/// # Safety
/// `rt` is loaded.
pub unsafe fn soc_name(rt: &RuntimeFns) -> Option<String> {
    let f = rt.get_soc_name?;
    // SAFETY: no arguments; the result is null or a NUL-terminated string
    // the runtime owns, copied right away.
    unsafe {
        let p = f();
        (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
    }
}

/// `aclrtSetDevice(id)`.
///
/// # Safety
/// `rt` is loaded and initialised.
pub unsafe fn set_device(rt: &RuntimeFns, id: i32) -> Result<(), Failure> {
    // SAFETY: plain value argument.
    check(rt, "aclrtSetDevice", unsafe { (rt.set_device)(id) })
}

/// `aclrtResetDevice(id)`.
///
/// # Safety
/// `rt` is loaded; every stream and allocation this reference to the device
/// made is gone (reset releases them).
pub unsafe fn reset_device(rt: &RuntimeFns, id: i32) -> Result<(), Failure> {
    // SAFETY: plain value argument; the caller released what it owned.
    check(rt, "aclrtResetDevice", unsafe { (rt.reset_device)(id) })
}

/// `aclrtGetDeviceCount`.
///
/// # Safety
/// `rt` is loaded and initialised.
pub unsafe fn device_count(rt: &RuntimeFns) -> Result<u32, Failure> {
    let mut n = 0u32;
    // SAFETY: `n` is a valid out pointer for the call.
    check(rt, "aclrtGetDeviceCount", unsafe {
        (rt.get_device_count)(&mut n)
    })?;
    Ok(n)
}

/// The device's vector core count, if the runtime can tell.
///
/// # Safety
/// `rt` is loaded and initialised.
pub unsafe fn vector_cores(rt: &RuntimeFns, device: i32) -> Option<u32> {
    let f = rt.get_device_capability?;
    let mut v = 0i64;
    let id = u32::try_from(device).ok()?;
    // SAFETY: `v` is a valid out pointer; the info value is one of the
    // header's `aclDeviceInfo` constants.
    let code = unsafe { f(id, ACL_DEVICE_INFO_VECTOR_CORE_NUM, &mut v) };
    if code != ACL_SUCCESS {
        let _ = recent_message(rt);
        return None;
    }
    u32::try_from(v).ok().filter(|&n| n > 0)
}

/// `aclrtCreateStream`.
///
/// # Safety
/// `rt` is loaded and a device is set on this thread.
pub unsafe fn create_stream(rt: &RuntimeFns) -> Result<AclrtStream, Failure> {
    let mut s: AclrtStream = std::ptr::null_mut();
    // SAFETY: `s` is a valid out pointer.
    check(rt, "aclrtCreateStream", unsafe {
        (rt.create_stream)(&mut s)
    })?;
    Ok(s)
}

/// `aclrtSynchronizeStream(stream)`: waits for all work queued on it and
/// reports the first asynchronous failure (a kernel fault, say).
///
/// # Safety
/// `stream` is a live stream of this runtime.
pub unsafe fn synchronize(rt: &RuntimeFns, stream: AclrtStream) -> Result<(), Failure> {
    // SAFETY: the caller guarantees the stream is live.
    check(rt, "aclrtSynchronizeStream", unsafe {
        (rt.synchronize_stream)(stream)
    })
}

/// `aclrtDestroyStream(stream)`.
///
/// # Safety
/// `stream` is a live stream with no queued work, not used afterwards.
pub unsafe fn destroy_stream(rt: &RuntimeFns, stream: AclrtStream) -> Result<(), Failure> {
    // SAFETY: the caller guarantees the stream is live, idle and dropped.
    check(rt, "aclrtDestroyStream", unsafe {
        (rt.destroy_stream)(stream)
    })
}

/// `aclrtMalloc(size, policy)`.
///
/// # Safety
/// `rt` is loaded and a device is set on this thread; `policy` is an
/// `aclrtMemMallocPolicy` value.
pub unsafe fn malloc(rt: &RuntimeFns, size: usize, policy: c_int) -> Result<*mut c_void, Failure> {
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: `p` is a valid out pointer.
    check(rt, "aclrtMalloc", unsafe {
        (rt.malloc)(&mut p, size, policy)
    })?;
    Ok(p)
}

/// `aclrtFree(ptr)` (immediate: no stream is waited for).
///
/// # Safety
/// `ptr` came from `aclrtMalloc` of this runtime, is not freed yet, and no
/// queued work uses it (synchronize first).
pub unsafe fn free(rt: &RuntimeFns, ptr: *mut c_void) -> Result<(), Failure> {
    // SAFETY: the caller guarantees a live, idle allocation.
    check(rt, "aclrtFree", unsafe { (rt.free)(ptr) })
}

/// `aclrtMemset(ptr, max, value, count)` on device memory.
///
/// # Safety
/// `ptr..ptr + max` lies in one live device allocation; `count <= max`.
pub unsafe fn memset(
    rt: &RuntimeFns,
    ptr: *mut c_void,
    max: usize,
    value: i32,
    count: usize,
) -> Result<(), Failure> {
    // SAFETY: the caller guarantees the range.
    check(rt, "aclrtMemset", unsafe {
        (rt.memset)(ptr, max, value, count)
    })
}

/// `aclrtMemcpy` (synchronous, and not ordered with any stream:
/// synchronize the stream first when kernels may touch the bytes).
///
/// # Safety
/// For `kind` host-to-device: `dst..dst + dest_max` lies in a live device
/// allocation, `src` is valid host memory for `count` bytes, and
/// `count <= dest_max`; device-to-host: the reverse. No queued work
/// touches the device bytes.
pub unsafe fn memcpy(
    rt: &RuntimeFns,
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: c_int,
) -> Result<(), Failure> {
    // SAFETY: the caller guarantees both ranges.
    check(rt, "aclrtMemcpy", unsafe {
        (rt.memcpy)(dst, dest_max, src, count, kind)
    })
}

/// `aclrtGetMemInfo(attr)`: `(free, total)` bytes.
///
/// # Safety
/// `rt` is loaded and a device is set on this thread.
pub unsafe fn mem_info(rt: &RuntimeFns, attr: c_int) -> Result<(usize, usize), Failure> {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: both are valid out pointers.
    check(rt, "aclrtGetMemInfo", unsafe {
        (rt.get_mem_info)(attr, &mut free, &mut total)
    })?;
    Ok((free, total))
}

/// The failure of an event entry point the loaded runtime does not export.
fn missing(op: &str) -> Failure {
    Failure {
        op: op.to_owned(),
        code: -1,
        message: format!("the loaded ACL runtime does not export {op}"),
    }
}

/// `aclrtCreateEvent` then `aclrtRecordEvent(event, stream)`: an event that
/// completes when the work queued on `stream` so far has. The event is
/// destroyed again when recording fails.
///
/// # Safety
/// `rt` is loaded, a device is set on this thread and `stream` is null (the
/// default stream) or a live stream of this runtime.
pub unsafe fn record_event(rt: &RuntimeFns, stream: AclrtStream) -> Result<AclrtEvent, Failure> {
    let create = rt.create_event.ok_or_else(|| missing("aclrtCreateEvent"))?;
    let record = rt.record_event.ok_or_else(|| missing("aclrtRecordEvent"))?;
    let mut event: AclrtEvent = std::ptr::null_mut();
    // SAFETY: `event` is a valid out pointer.
    check(rt, "aclrtCreateEvent", unsafe { create(&mut event) })?;
    // SAFETY: the event was just created; the caller vouches for the stream.
    let recorded = check(rt, "aclrtRecordEvent", unsafe { record(event, stream) });
    if let Err(f) = recorded {
        // SAFETY: created above, not used again.
        let _ = unsafe { destroy_event(rt, event) };
        return Err(f);
    }
    Ok(event)
}

/// `aclrtQueryEventStatus`: whether the work before the event completed.
///
/// # Safety
/// `event` is a live event of this runtime.
pub unsafe fn event_done(rt: &RuntimeFns, event: AclrtEvent) -> Result<bool, Failure> {
    let query = rt
        .query_event_status
        .ok_or_else(|| missing("aclrtQueryEventStatus"))?;
    let mut status: c_int = ACL_EVENT_RECORDED_STATUS_NOT_READY;
    // SAFETY: a live event (the caller's promise) and a valid out pointer.
    check(rt, "aclrtQueryEventStatus", unsafe {
        query(event, &mut status)
    })?;
    Ok(status != ACL_EVENT_RECORDED_STATUS_NOT_READY)
}

/// `aclrtDestroyEvent`.
///
/// # Safety
/// `event` is a live event of this runtime, not used afterwards.
pub unsafe fn destroy_event(rt: &RuntimeFns, event: AclrtEvent) -> Result<(), Failure> {
    let destroy = rt
        .destroy_event
        .ok_or_else(|| missing("aclrtDestroyEvent"))?;
    // SAFETY: the caller's promise.
    check(rt, "aclrtDestroyEvent", unsafe { destroy(event) })
}

// ---- Virtual memory (hicann/runtime docs/zh/api_ref/11-04_virtual_memory_management.md).
// Each takes the resolved table (`RuntimeFns::vmm`); `rt` only for the
// error message.

/// `aclrtMemGetAllocationGranularity(prop, MINIMUM)`.
///
/// # Safety
/// `rt` is loaded and a device is set on this thread; `vmm` is its table.
pub unsafe fn mem_granularity(
    rt: &RuntimeFns,
    vmm: &VmmFns,
    prop: &AclrtPhysicalMemProp,
) -> Result<usize, Failure> {
    let mut prop = *prop;
    let mut g = 0usize;
    // SAFETY: valid in and out pointers for the call.
    check(rt, "aclrtMemGetAllocationGranularity", unsafe {
        (vmm.granularity)(&mut prop, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM, &mut g)
    })?;
    Ok(g)
}

/// `aclrtReserveMemAddress(size, 0, nullptr, 0)`: address space, nothing
/// mapped.
///
/// # Safety
/// As [`mem_granularity`].
pub unsafe fn reserve_address(
    rt: &RuntimeFns,
    vmm: &VmmFns,
    size: usize,
) -> Result<*mut c_void, Failure> {
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: a valid out pointer; alignment 0 and a null expectPtr as
    // the page requires.
    check(rt, "aclrtReserveMemAddress", unsafe {
        (vmm.reserve_address)(&mut p, size, 0, std::ptr::null_mut(), 0)
    })?;
    Ok(p)
}

/// `aclrtReleaseMemAddress(base)`.
///
/// # Safety
/// `base` came from [`reserve_address`], nothing is mapped in it, and it is
/// not used afterwards.
pub unsafe fn release_address(
    rt: &RuntimeFns,
    vmm: &VmmFns,
    base: *mut c_void,
) -> Result<(), Failure> {
    // SAFETY: the caller's promise.
    check(rt, "aclrtReleaseMemAddress", unsafe {
        (vmm.release_address)(base)
    })
}

/// `aclrtMallocPhysical(size, prop, 0)`.
///
/// # Safety
/// As [`mem_granularity`].
pub unsafe fn malloc_physical(
    rt: &RuntimeFns,
    vmm: &VmmFns,
    size: usize,
    prop: &AclrtPhysicalMemProp,
) -> Result<AclrtDrvMemHandle, Failure> {
    let mut h: AclrtDrvMemHandle = std::ptr::null_mut();
    // SAFETY: a valid out pointer and properties that outlive the call.
    check(rt, "aclrtMallocPhysical", unsafe {
        (vmm.malloc_physical)(&mut h, size, prop, 0)
    })?;
    Ok(h)
}

/// `aclrtFreePhysical(handle)`.
///
/// # Safety
/// `handle` came from [`malloc_physical`], is unmapped and not used
/// afterwards.
pub unsafe fn free_physical(
    rt: &RuntimeFns,
    vmm: &VmmFns,
    handle: AclrtDrvMemHandle,
) -> Result<(), Failure> {
    // SAFETY: the caller's promise.
    check(rt, "aclrtFreePhysical", unsafe {
        (vmm.free_physical)(handle)
    })
}

/// `aclrtMapMem(addr, size, 0, handle, 0)`.
///
/// # Safety
/// `addr..addr + size` lies in a reserved range with nothing mapped there;
/// `handle` is a live, unmapped handle of `size` bytes.
pub unsafe fn map_mem(
    rt: &RuntimeFns,
    vmm: &VmmFns,
    addr: *mut c_void,
    size: usize,
    handle: AclrtDrvMemHandle,
) -> Result<(), Failure> {
    // SAFETY: the caller's promise.
    check(rt, "aclrtMapMem", unsafe {
        (vmm.map_mem)(addr, size, 0, handle, 0)
    })
}

/// `aclrtUnmapMem(addr)`.
///
/// # Safety
/// `addr` is where [`map_mem`] mapped a handle, and no queued work uses
/// those bytes (synchronize first).
pub unsafe fn unmap_mem(rt: &RuntimeFns, vmm: &VmmFns, addr: *mut c_void) -> Result<(), Failure> {
    // SAFETY: the caller's promise.
    check(rt, "aclrtUnmapMem", unsafe { (vmm.unmap_mem)(addr) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_become_typed_errors() {
        let f = Failure {
            op: "aclrtMalloc".into(),
            code: 207_001,
            message: "out of memory".into(),
        };
        let e = f.into_error("ascend:0");
        assert!(matches!(
            &e,
            Error::Acl {
                code: 207_001,
                name: "ACL_ERROR_RT_MEMORY_ALLOCATION",
                ..
            }
        ));
        let text = e.to_string();
        assert!(
            text.contains("aclrtMalloc")
                && text.contains("207001")
                && text.contains("out of memory"),
            "{text}"
        );
    }

    #[test]
    fn every_named_code_is_distinct() {
        let codes = [
            100_000, 100_002, 107_000, 161_001, 161_002, 207_001, 207_018, 507_015, 561_000,
            561_107, 561_112, 507_899,
        ];
        let names: std::collections::HashSet<_> = codes.iter().map(|&c| code_name(c)).collect();
        assert_eq!(names.len(), codes.len());
        assert!(!names.contains("unknown"));
    }

    #[test]
    fn installation_codes_carry_their_fix() {
        for (code, word) in [(561_107, "ASCEND_OPP_PATH"), (561_112, "kernel package")] {
            let e = Failure {
                op: "aclnnMmGetWorkspaceSize".into(),
                code,
                message: "inner error".into(),
            }
            .into_error("ascend:0");
            let text = e.to_string();
            assert!(
                text.contains(word) && text.contains("inner error") && !text.contains("unknown"),
                "{text}"
            );
        }
    }
}
