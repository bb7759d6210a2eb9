//! CUDA's virtual memory management through the driver API (`libcuda`),
//! loaded at run time: address space reserved with `cuMemAddressReserve`,
//! physical memory made with `cuMemCreate`, mapped with `cuMemMap` and
//! opened to the device with `cuMemSetAccess`; `cuMemUnmap` +
//! `cuMemRelease` give it back, `cuMemAddressFree` the addresses.
//!
//! Every struct layout, enum value and signature below is the one of the
//! driver's header `cuda.h` (CUDA 13.2, `CUDA_VERSION 13020`, as shipped in
//! the `nvidia-cu13` wheel's `include/cuda.h`); the line numbers cited are
//! that file's. The VMM entry points have kept their names and layouts
//! since CUDA 10.2.
//!
//! The driver cannot unmap part of a mapping (`cuMemUnmap`: "The range
//! must be the entire contiguous address range that was mapped to",
//! cuda.h:13352), so each [`CudaRanges::map`] is one physical allocation
//! (a chunk) and [`CudaRanges::unmap`] takes whole chunks, any number of
//! them at once.

use std::collections::BTreeMap;
use std::ffi::{CStr, c_char, c_int, c_uint, c_ulonglong, c_void};

use libloading::Library;

use crate::error::{Error, Result};

/// Names tried in order: the driver's soname on Linux (what the runtime
/// itself loads), then the unversioned development link, then Windows'.
pub const DRIVER_NAMES: [&str; 3] = ["libcuda.so.1", "libcuda.so", "nvcuda.dll"];

/// `CUresult` (cuda.h:2663, an enum: a C int).
type CuResult = c_int;
/// `CUdeviceptr` = `CUdeviceptr_v2` = `unsigned long long` (cuda.h:281, 285).
type CuDevicePtr = c_ulonglong;
/// `CUmemGenericAllocationHandle` = `unsigned long long` (cuda.h:4258).
type CuMemHandle = c_ulonglong;
/// `CUdevice` = `CUdevice_v1` = `int` (cuda.h:287).
type CuDevice = c_int;
/// `CUcontext` = `struct CUctx_st *` (cuda.h:289).
type CuContext = *mut c_void;

/// `CU_MEM_ALLOCATION_TYPE_PINNED` (cuda.h:4306, `CUmemAllocationType`).
const ALLOCATION_TYPE_PINNED: c_int = 0x1;
/// `CU_MEM_HANDLE_TYPE_NONE` (cuda.h:4265, `CUmemAllocationHandleType`):
/// no export, the cheapest handle.
const HANDLE_TYPE_NONE: c_int = 0x0;
/// `CU_MEM_LOCATION_TYPE_DEVICE` (cuda.h:4289, `CUmemLocationType`).
const LOCATION_TYPE_DEVICE: c_int = 0x1;
/// `CU_MEM_ACCESS_FLAGS_PROT_READWRITE` (cuda.h:4279, `CUmemAccess_flags`).
const ACCESS_PROT_READWRITE: c_int = 0x3;
/// `CU_MEM_ALLOC_GRANULARITY_MINIMUM` (cuda.h:4317,
/// `CUmemAllocationGranularity_flags`).
const GRANULARITY_MINIMUM: c_int = 0x0;

/// `CUmemLocation` (cuda.h:4408): the location type, then a union whose
/// one member is `int id`: two ints, 8 bytes.
#[repr(C)]
#[derive(Clone, Copy)]
struct MemLocation {
    kind: c_int,
    id: c_int,
}

/// `CUmemAllocationProp::allocFlags` (cuda.h:4454): compressionType,
/// gpuDirectRDMACapable (unsigned char each), usage (unsigned short),
/// reserved[4] (unsigned char): 8 bytes, all zero here.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct AllocFlags {
    compression_type: u8,
    gpu_direct_rdma_capable: u8,
    usage: u16,
    reserved: [u8; 4],
}

/// `CUmemAllocationProp` = `CUmemAllocationProp_v1` (cuda.h:4439): type,
/// requestedHandleTypes (enums, ints), location, `void
/// *win32HandleMetaData` (zero off Windows), allocFlags: 32 bytes on a
/// 64-bit target.
#[repr(C)]
#[derive(Clone, Copy)]
struct AllocationProp {
    kind: c_int,
    requested_handle_types: c_int,
    location: MemLocation,
    win32_handle_meta_data: *mut c_void,
    alloc_flags: AllocFlags,
}

/// `CUmemAccessDesc` = `CUmemAccessDesc_v1` (cuda.h:4511): a location and
/// `CUmemAccess_flags` (an enum): 12 bytes.
#[repr(C)]
#[derive(Clone, Copy)]
struct AccessDesc {
    location: MemLocation,
    flags: c_int,
}

// The signatures, as declared in cuda.h (each symbol is exported under
// this plain name: none of them is renamed by a `#define ... _v2`).
/// `cuInit(unsigned int Flags)` (cuda.h:5387).
type Init = unsafe extern "C" fn(c_uint) -> CuResult;
/// `cuGetErrorString(CUresult error, const char **pStr)` (cuda.h:5329).
type GetErrorString = unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult;
/// `cuDeviceGet(CUdevice *device, int ordinal)` (cuda.h:5468).
type DeviceGet = unsafe extern "C" fn(*mut CuDevice, c_int) -> CuResult;
/// `cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)` (cuda.h:6077).
type PrimaryCtxRetain = unsafe extern "C" fn(*mut CuContext, CuDevice) -> CuResult;
/// `cuDevicePrimaryCtxRelease_v2(CUdevice dev)` (cuda.h:6118; line 151 maps
/// `cuDevicePrimaryCtxRelease` to it).
type PrimaryCtxRelease = unsafe extern "C" fn(CuDevice) -> CuResult;
/// `cuCtxGetCurrent(CUcontext *pctx)` (cuda.h:6633).
type CtxGetCurrent = unsafe extern "C" fn(*mut CuContext) -> CuResult;
/// `cuCtxSetCurrent(CUcontext ctx)` (cuda.h:6610).
type CtxSetCurrent = unsafe extern "C" fn(CuContext) -> CuResult;
/// `cuMemGetAllocationGranularity(size_t *granularity, const
/// CUmemAllocationProp *prop, CUmemAllocationGranularity_flags option)`
/// (cuda.h:13516).
type GetGranularity = unsafe extern "C" fn(*mut usize, *const AllocationProp, c_int) -> CuResult;
/// `cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
/// CUdeviceptr addr, unsigned long long flags)` (cuda.h:13042).
type AddressReserve =
    unsafe extern "C" fn(*mut CuDevicePtr, usize, usize, CuDevicePtr, c_ulonglong) -> CuResult;
/// `cuMemAddressFree(CUdeviceptr ptr, size_t size)` (cuda.h:13063).
type AddressFree = unsafe extern "C" fn(CuDevicePtr, usize) -> CuResult;
/// `cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const
/// CUmemAllocationProp *prop, unsigned long long flags)` (cuda.h:13129).
type MemCreate =
    unsafe extern "C" fn(*mut CuMemHandle, usize, *const AllocationProp, c_ulonglong) -> CuResult;
/// `cuMemRelease(CUmemGenericAllocationHandle handle)` (cuda.h:13156).
type MemRelease = unsafe extern "C" fn(CuMemHandle) -> CuResult;
/// `cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
/// CUmemGenericAllocationHandle handle, unsigned long long flags)`
/// (cuda.h:13213).
type MemMap = unsafe extern "C" fn(CuDevicePtr, usize, usize, CuMemHandle, c_ulonglong) -> CuResult;
/// `cuMemUnmap(CUdeviceptr ptr, size_t size)` (cuda.h:13377).
type MemUnmap = unsafe extern "C" fn(CuDevicePtr, usize) -> CuResult;
/// `cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc
/// *desc, size_t count)` (cuda.h:13411).
type MemSetAccess = unsafe extern "C" fn(CuDevicePtr, usize, *const AccessDesc, usize) -> CuResult;

struct DriverFns {
    init: Init,
    error_string: GetErrorString,
    device_get: DeviceGet,
    primary_ctx_retain: PrimaryCtxRetain,
    primary_ctx_release: PrimaryCtxRelease,
    ctx_get_current: CtxGetCurrent,
    ctx_set_current: CtxSetCurrent,
    granularity: GetGranularity,
    address_reserve: AddressReserve,
    address_free: AddressFree,
    create: MemCreate,
    release: MemRelease,
    map: MemMap,
    unmap: MemUnmap,
    set_access: MemSetAccess,
}

/// The CUDA driver, loaded.
pub struct Driver {
    fns: DriverFns,
    // Keeps the functions above loaded; dropped last.
    _lib: Library,
}

fn driver_error(reason: String) -> Error {
    Error::Backing {
        backend: "cuda".to_owned(),
        reason,
    }
}

impl Driver {
    /// Loads the first of `names` that opens and resolves every VMM entry
    /// point; the error names each one tried and why it failed.
    pub fn load(names: &[&str]) -> Result<Driver> {
        let mut tried = Vec::new();
        for name in names {
            // SAFETY: loading the CUDA driver runs its initialisers, which
            // have no preconditions on the caller.
            match unsafe { Library::new(name) } {
                Ok(lib) => match Driver::resolve(lib) {
                    Ok(d) => return Ok(d),
                    Err(e) => tried.push(format!("{name}: {e}")),
                },
                Err(e) => tried.push(format!("{name}: {e}")),
            }
        }
        Err(driver_error(format!(
            "no CUDA driver could be loaded for mapped ranges (tried {}); the driver's libcuda comes with the NVIDIA driver, not with torch",
            tried.join("; ")
        )))
    }

    fn resolve(lib: Library) -> std::result::Result<Driver, String> {
        let sym = |name: &str| -> std::result::Result<*const c_void, String> {
            // SAFETY: the symbol is only read as an address here and cast
            // below to the signature cuda.h declares.
            unsafe { lib.get::<*const c_void>(name.as_bytes()) }
                .map(|s| *s)
                .map_err(|e| format!("lacks {name}: {e}"))
        };
        // SAFETY: each pointer is the named driver function, whose C
        // signature (cuda.h, cited at each type) is the type it is cast to.
        let fns = unsafe {
            use std::mem::transmute as t;
            DriverFns {
                init: t::<*const c_void, Init>(sym("cuInit")?),
                error_string: t::<*const c_void, GetErrorString>(sym("cuGetErrorString")?),
                device_get: t::<*const c_void, DeviceGet>(sym("cuDeviceGet")?),
                primary_ctx_retain: t::<*const c_void, PrimaryCtxRetain>(sym(
                    "cuDevicePrimaryCtxRetain",
                )?),
                primary_ctx_release: t::<*const c_void, PrimaryCtxRelease>(sym(
                    "cuDevicePrimaryCtxRelease_v2",
                )?),
                ctx_get_current: t::<*const c_void, CtxGetCurrent>(sym("cuCtxGetCurrent")?),
                ctx_set_current: t::<*const c_void, CtxSetCurrent>(sym("cuCtxSetCurrent")?),
                granularity: t::<*const c_void, GetGranularity>(sym(
                    "cuMemGetAllocationGranularity",
                )?),
                address_reserve: t::<*const c_void, AddressReserve>(sym("cuMemAddressReserve")?),
                address_free: t::<*const c_void, AddressFree>(sym("cuMemAddressFree")?),
                create: t::<*const c_void, MemCreate>(sym("cuMemCreate")?),
                release: t::<*const c_void, MemRelease>(sym("cuMemRelease")?),
                map: t::<*const c_void, MemMap>(sym("cuMemMap")?),
                unmap: t::<*const c_void, MemUnmap>(sym("cuMemUnmap")?),
                set_access: t::<*const c_void, MemSetAccess>(sym("cuMemSetAccess")?),
            }
        };
        Ok(Driver { fns, _lib: lib })
    }

    /// `Ok` for `CUDA_SUCCESS`, else an error with the driver's own text.
    fn check(&self, device: c_int, call: &str, code: CuResult) -> Result<()> {
        if code == 0 {
            return Ok(());
        }
        let mut text: *const c_char = std::ptr::null();
        // SAFETY: a valid out-pointer; the driver writes a static
        // NUL-terminated string, or NULL for a code it does not know.
        let rc = unsafe { (self.fns.error_string)(code, &mut text) };
        let text = if rc == 0 && !text.is_null() {
            // SAFETY: non-NULL and NUL-terminated, static (checked above).
            unsafe { CStr::from_ptr(text) }
                .to_string_lossy()
                .into_owned()
        } else {
            "unknown error".to_owned()
        };
        Err(Error::Backing {
            backend: format!("cuda:{device}"),
            reason: format!("{call} failed with CUresult {code} ({text})"),
        })
    }
}

/// One mapped chunk: its bytes and the physical allocation behind them.
struct Chunk {
    len: usize,
    handle: CuMemHandle,
}

/// One reserved range: its bytes of address space and its mapped chunks
/// by address.
struct Range {
    size: usize,
    chunks: BTreeMap<usize, Chunk>,
}

/// The mapped ranges of one device, through the driver's VMM.
pub struct CudaRanges {
    driver: Driver,
    device: c_int,
    /// The device's primary context (the runtime's, which torch uses),
    /// retained once and made current around each driver call.
    context: CuContext,
    granularity: usize,
    ranges: BTreeMap<usize, Range>,
    mapped: usize,
}

impl CudaRanges {
    /// Opens the VMM of runtime device `device` (the same ordinal for the
    /// driver: both honour `CUDA_VISIBLE_DEVICES`): initialises the
    /// driver, retains the device's primary context and reads the minimum
    /// granularity of pinned device memory.
    pub fn open(driver: Driver, device: i32) -> Result<CudaRanges> {
        // SAFETY: plain call; flags must be 0 (cuda.h, cuInit).
        driver.check(device, "cuInit", unsafe { (driver.fns.init)(0) })?;
        let mut dev: CuDevice = 0;
        // SAFETY: a valid out-pointer and an ordinal.
        driver.check(device, "cuDeviceGet", unsafe {
            (driver.fns.device_get)(&mut dev, device)
        })?;
        let mut context: CuContext = std::ptr::null_mut();
        // SAFETY: a valid out-pointer and a device handle cuDeviceGet gave;
        // released once, in Drop.
        driver.check(device, "cuDevicePrimaryCtxRetain", unsafe {
            (driver.fns.primary_ctx_retain)(&mut context, dev)
        })?;
        let mut ranges = CudaRanges {
            driver,
            device,
            context,
            granularity: 0,
            ranges: BTreeMap::new(),
            mapped: 0,
        };
        let prop = ranges.prop();
        let mut granularity = 0usize;
        ranges.in_context(|d| {
            // SAFETY: a valid out-pointer and a fully initialised prop.
            d.check(device, "cuMemGetAllocationGranularity", unsafe {
                (d.fns.granularity)(&mut granularity, &prop, GRANULARITY_MINIMUM)
            })
        })?;
        if granularity == 0 {
            return Err(driver_error(format!(
                "cuMemGetAllocationGranularity gave 0 for device {device}"
            )));
        }
        ranges.granularity = granularity;
        Ok(ranges)
    }

    /// Pinned memory on this device, no export handle (cuda.h:4439).
    fn prop(&self) -> AllocationProp {
        AllocationProp {
            kind: ALLOCATION_TYPE_PINNED,
            requested_handle_types: HANDLE_TYPE_NONE,
            location: MemLocation {
                kind: LOCATION_TYPE_DEVICE,
                id: self.device,
            },
            win32_handle_meta_data: std::ptr::null_mut(),
            alloc_flags: AllocFlags::default(),
        }
    }

    /// Runs `f` with the primary context current on this thread, restoring
    /// the caller's context.
    fn in_context<T>(&self, f: impl FnOnce(&Driver) -> Result<T>) -> Result<T> {
        let d = &self.driver;
        let mut previous: CuContext = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        d.check(self.device, "cuCtxGetCurrent", unsafe {
            (d.fns.ctx_get_current)(&mut previous)
        })?;
        let switch = previous != self.context;
        if switch {
            // SAFETY: the primary context retained in `open`, alive until Drop.
            d.check(self.device, "cuCtxSetCurrent", unsafe {
                (d.fns.ctx_set_current)(self.context)
            })?;
        }
        let out = f(d);
        if switch {
            // SAFETY: the caller's context (or NULL), current before.
            let _ = unsafe { (d.fns.ctx_set_current)(previous) };
        }
        out
    }

    /// The unit of map and unmap (2 MiB on current NVIDIA GPUs).
    pub fn granularity(&self) -> usize {
        self.granularity
    }

    /// Bytes mapped in all ranges.
    pub fn mapped_bytes(&self) -> usize {
        self.mapped
    }

    fn fail(&self, call: &str, bytes: usize, addr: usize, why: impl std::fmt::Display) -> Error {
        Error::Backing {
            backend: format!("cuda:{}", self.device),
            reason: format!("{call} of {bytes} bytes at {addr:#x}: {why}"),
        }
    }

    fn whole(&self, call: &str, addr: usize, len: usize) -> Result<()> {
        let g = self.granularity;
        if len == 0 || !addr.is_multiple_of(g) || !len.is_multiple_of(g) {
            return Err(self.fail(
                call,
                len,
                addr,
                format!("not whole units of the granularity ({g} bytes)"),
            ));
        }
        Ok(())
    }

    /// The base of the range holding `[addr, addr + len)` whole.
    fn range_of(&self, call: &str, addr: usize, len: usize) -> Result<usize> {
        let (&base, range) = self
            .ranges
            .range(..=addr)
            .next_back()
            .ok_or_else(|| self.fail(call, len, addr, "outside every reserved range"))?;
        if addr
            .checked_add(len)
            .is_none_or(|end| end > base + range.size)
        {
            return Err(self.fail(call, len, addr, "past the end of its range"));
        }
        Ok(base)
    }

    /// Reserves `bytes` of device address space, nothing mapped.
    pub fn reserve(&mut self, bytes: usize) -> Result<usize> {
        self.whole("reserve_address", 0, bytes)?;
        let mut ptr: CuDevicePtr = 0;
        let device = self.device;
        let g = self.granularity;
        self.in_context(|d| {
            // SAFETY: a valid out-pointer; size a multiple of the
            // granularity, alignment the granularity (a power of two), no
            // fixed address, flags 0 (cuda.h:13042).
            d.check(device, "cuMemAddressReserve", unsafe {
                (d.fns.address_reserve)(&mut ptr, bytes, g, 0, 0)
            })
        })?;
        let base = ptr as usize;
        self.ranges.insert(
            base,
            Range {
                size: bytes,
                chunks: BTreeMap::new(),
            },
        );
        Ok(base)
    }

    /// Backs `[addr, addr + len)` (unmapped now) with new physical memory,
    /// readable and writable by the device: **one allocation per granule**,
    /// each mapped on its own, so that any granule can later be unmapped
    /// alone (the driver unmaps whole mappings only: with one allocation
    /// for the whole call, idle pages inside a slab could never go back,
    /// allocator/lending.rs). As torch's expandable segments do (a handle
    /// per segment page) and the Ascend backing (a handle per granule).
    /// A failure half-way unmaps and releases what this call mapped.
    pub fn map(&mut self, addr: usize, len: usize) -> Result<()> {
        self.whole("map", addr, len)?;
        let base = self.range_of("map", addr, len)?;
        let overlaps = self.ranges[&base]
            .chunks
            .range(..addr + len)
            .next_back()
            .is_some_and(|(&a, c)| a + c.len > addr);
        if overlaps {
            return Err(self.fail("map", len, addr, "part of it is mapped already"));
        }
        let prop = self.prop();
        let access = AccessDesc {
            location: prop.location,
            flags: ACCESS_PROT_READWRITE,
        };
        let device = self.device;
        let g = self.granularity.max(1);
        let made = self.in_context(|d| {
            let mut made: Vec<(usize, CuMemHandle)> = Vec::with_capacity(len / g);
            let undo = |made: &[(usize, CuMemHandle)]| {
                for &(a, handle) in made {
                    // SAFETY: a granule this call mapped with `handle`,
                    // used by nobody yet; unmapped, then released once.
                    unsafe {
                        let _ = (d.fns.unmap)(a as CuDevicePtr, g);
                        let _ = (d.fns.release)(handle);
                    }
                }
            };
            let mut at = addr;
            while at < addr + len {
                let mut handle: CuMemHandle = 0;
                // SAFETY: a valid out-pointer, one granule (a multiple of
                // the granularity), a fully initialised prop, flags 0
                // (cuda.h:13129).
                let created = d.check(device, "cuMemCreate", unsafe {
                    (d.fns.create)(&mut handle, g, &prop, 0)
                });
                if let Err(e) = created {
                    undo(&made);
                    return Err(e);
                }
                // SAFETY: [at, at + g) lies in a range this value reserved
                // and nothing is mapped there (checked above); offset 0 and
                // flags 0 as cuda.h:13213 requires; `handle` is `g` bytes.
                let mapped = d.check(device, "cuMemMap", unsafe {
                    (d.fns.map)(at as CuDevicePtr, g, 0, handle, 0)
                });
                if let Err(e) = mapped {
                    // SAFETY: the handle made just above, mapped nowhere.
                    let _ = unsafe { (d.fns.release)(handle) };
                    undo(&made);
                    return Err(e);
                }
                made.push((at, handle));
                at += g;
            }
            // SAFETY: [addr, addr + len) is fully mapped now (the granules
            // above, back to back); one descriptor.
            let opened = d.check(device, "cuMemSetAccess", unsafe {
                (d.fns.set_access)(addr as CuDevicePtr, len, &access, 1)
            });
            if let Err(e) = opened {
                undo(&made);
                return Err(e);
            }
            Ok(made)
        })?;
        if let Some(range) = self.ranges.get_mut(&base) {
            for (a, handle) in made {
                range.chunks.insert(a, Chunk { len: g, handle });
            }
        }
        self.mapped += len;
        Ok(())
    }

    /// Unmaps `[addr, addr + len)`, which must be whole chunks that
    /// [`CudaRanges::map`] mapped (the driver unmaps no part of a mapping;
    /// a chunk is one granule, so any whole granules of mapped pages
    /// qualify), and releases their physical memory.
    ///
    /// Neither `cuMemUnmap` nor `cuMemRelease` waits for kernels still
    /// queued on the device (measured on an H200: 46 + 26 µs with a 20 ms
    /// kernel queued, docs/device-costs.md), unlike `cudaFree`: the caller
    /// unmaps only bytes whose last users' events have completed.
    pub fn unmap(&mut self, addr: usize, len: usize) -> Result<()> {
        self.whole("unmap", addr, len)?;
        let base = self.range_of("unmap", addr, len)?;
        // The chunks must tile [addr, addr + len) exactly.
        let mut at = addr;
        let mut tiles = Vec::new();
        for (&a, c) in self.ranges[&base].chunks.range(addr..addr + len) {
            if a != at {
                break;
            }
            tiles.push((a, c.len, c.handle));
            at = a + c.len;
        }
        if at != addr + len {
            let why = match self.ranges[&base].chunks.range(..addr + len).next_back() {
                Some((&a, c)) if a + c.len > addr && (a < addr || a + c.len > addr + len) => {
                    format!(
                        "it cuts the mapping of {} bytes at {a:#x} (the driver unmaps whole mappings only)",
                        c.len
                    )
                }
                _ => "part of it is not mapped".to_owned(),
            };
            return Err(self.fail("unmap", len, addr, why));
        }
        let device = self.device;
        let mut first_error = None;
        let mut done = Vec::new();
        self.in_context(|d| {
            for &(a, l, handle) in &tiles {
                // SAFETY: [a, a + l) is exactly one mapping made by `map`;
                // the allocator unmaps only bytes no live block uses.
                let r = d.check(device, "cuMemUnmap", unsafe {
                    (d.fns.unmap)(a as CuDevicePtr, l)
                });
                match r {
                    Ok(()) => {
                        // SAFETY: the handle of that mapping, mapped
                        // nowhere now; released once (its chunk is removed
                        // below).
                        let r = d.check(device, "cuMemRelease", unsafe { (d.fns.release)(handle) });
                        if let Err(e) = r {
                            first_error.get_or_insert(e);
                        }
                        done.push((a, l));
                    }
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
            Ok(())
        })?;
        if let Some(range) = self.ranges.get_mut(&base) {
            for &(a, l) in &done {
                range.chunks.remove(&a);
                self.mapped -= l;
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Gives the range at `base` back, unmapping what is still mapped in
    /// it; its mapped bytes then, if it was one.
    pub fn release(&mut self, base: usize) -> Option<usize> {
        let range = self.ranges.remove(&base)?;
        let mapped: usize = range.chunks.values().map(|c| c.len).sum();
        let device = self.device;
        let _ = self.in_context(|d| {
            for (&a, c) in &range.chunks {
                // SAFETY: one mapping made by `map`, with its handle; the
                // range is gone from the map, so neither is used again.
                unsafe {
                    let _ = (d.fns.unmap)(a as CuDevicePtr, c.len);
                    let _ = (d.fns.release)(c.handle);
                }
            }
            // SAFETY: the whole reservation made at `base`, nothing mapped
            // in it now (cuda.h:13063: size must match the reservation).
            d.check(device, "cuMemAddressFree", unsafe {
                (d.fns.address_free)(base as CuDevicePtr, range.size)
            })
        });
        self.mapped -= mapped;
        Some(mapped)
    }

    /// Whether `addr` lies in a reserved range (mapped or not).
    pub fn holds(&self, addr: usize) -> bool {
        self.ranges
            .range(..=addr)
            .next_back()
            .is_some_and(|(&b, r)| addr < b + r.size)
    }

    /// Whether `[addr, addr + len)` lies in mapped chunks of one range
    /// (adjacent chunks count as one run).
    pub fn is_mapped(&self, addr: usize, len: usize) -> bool {
        let Some((_, range)) = self.ranges.range(..=addr).next_back() else {
            return false;
        };
        let Some(end) = addr.checked_add(len.max(1)) else {
            return false;
        };
        let mut at = addr;
        // The chunk holding `addr`, then the ones after it back to back.
        let Some((&a, c)) = range.chunks.range(..=addr).next_back() else {
            return false;
        };
        if a + c.len <= addr {
            return false;
        }
        at = at.max(a + c.len);
        for (&a, c) in range.chunks.range(at..) {
            if at >= end || a != at {
                break;
            }
            at = a + c.len;
        }
        at >= end
    }
}

impl Drop for CudaRanges {
    fn drop(&mut self) {
        let bases: Vec<usize> = self.ranges.keys().copied().collect();
        for b in bases {
            self.release(b);
        }
        let mut dev: CuDevice = 0;
        // SAFETY: a valid out-pointer; then the release that matches the
        // retain of `open` (same device).
        unsafe {
            if (self.driver.fns.device_get)(&mut dev, self.device) == 0 {
                let _ = (self.driver.fns.primary_ctx_release)(dev);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_match_cuda_h() {
        // cuda.h:4408, 4439, 4511 on a 64-bit target.
        assert_eq!(std::mem::size_of::<MemLocation>(), 8);
        assert_eq!(std::mem::size_of::<AllocFlags>(), 8);
        assert_eq!(std::mem::size_of::<AccessDesc>(), 12);
        if cfg!(target_pointer_width = "64") {
            assert_eq!(std::mem::size_of::<AllocationProp>(), 32);
            assert_eq!(std::mem::offset_of!(AllocationProp, location), 8);
            assert_eq!(
                std::mem::offset_of!(AllocationProp, win32_handle_meta_data),
                16
            );
            assert_eq!(std::mem::offset_of!(AllocationProp, alloc_flags), 24);
        }
    }

    #[test]
    fn a_missing_driver_is_a_clear_error() {
        let err = Driver::load(&["libcuda-not-here.so.1", "/nonexistent/libcuda.so"])
            .err()
            .expect("no such library")
            .to_string();
        assert!(err.contains("no CUDA driver could be loaded"), "{err}");
        assert!(
            err.contains("libcuda-not-here.so.1") && err.contains("/nonexistent/libcuda.so"),
            "{err}"
        );
    }

    #[test]
    fn a_library_without_the_vmm_entry_points_is_refused() {
        // libc opens but has none of cuMem*: the error names the first
        // symbol missing.
        let err = Driver::load(&["libc.so.6"])
            .err()
            .expect("not a driver")
            .to_string();
        assert!(err.contains("libc.so.6: lacks cuInit"), "{err}");
    }
}
