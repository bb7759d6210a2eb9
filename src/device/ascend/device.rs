//! Layer 3: the safe Ascend device. RAII owners for the device reference
//! (`aclrtSetDevice` / `aclrtResetDevice`), the stream and the slab
//! (`aclrtMalloc` / `aclrtFree`), and the `Device` and `Kernels`
//! implementations on top.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::path::Path;
use std::rc::Rc;

use super::abi::Tiling;
use super::aclnn::Executors;
use super::config::{AscendConfig, MallocPolicy, MemAttr, footprint};
use super::kernel_soc;
use super::kernels::KernelLib;
use super::result::{self, Failure};
use super::runtime::AscendRuntime;
use super::sys::{
    ACL_ERROR_BAD_ALLOC, ACL_ERROR_RT_DEVICE_OOM, ACL_ERROR_RT_MEMORY_ALLOCATION, ACL_HBM_MEM_HUGE,
    ACL_MEM_ALLOCATION_TYPE_PINNED, ACL_MEM_HANDLE_TYPE_NONE, ACL_MEM_LOCATION_TYPE_DEVICE,
    ACL_MEMCPY_DEVICE_TO_HOST, ACL_MEMCPY_HOST_TO_DEVICE, AclrtDrvMemHandle, AclrtMemLocation,
    AclrtPhysicalMemProp, AclrtStream, VmmFns,
};
use crate::device::launch_checks::check_launch;
use crate::device::{Device, DeviceCounters, Kernels, Region, Slab};
use crate::dtype::DType;
use crate::error::{Available, Error, Result};
use crate::ops::Kernel;

/// Cores a launch uses when the runtime cannot say how many it has.
const FALLBACK_BLOCKS: u32 = 8;

/// Elements of the probe launch: one vector repeat of f32.
const PROBE_ELEMENTS: usize = 64;
/// The smallest allocation a slab makes, so the probe has room.
const PROBE_BYTES: usize = PROBE_ELEMENTS * 4;
/// The launch function the probe calls (`mul_scalar_` on f32).
const PROBE_SYMBOL: &str = "aclrtlaunch_ta_mul_scalar_f32";

/// An Ascend NPU reached through the ACL runtime, loaded at run time.
///
/// Opening it calls `aclInit` (tolerating a process that already did),
/// `aclrtSetDevice` and creates the device's own stream; the arena's slab
/// is one `aclrtMalloc` (huge pages first by default). Before allocating,
/// the slab's footprint (the size as `aclrtMalloc` charges it: 32-byte
/// padding, 2 MiB pages; see [`footprint`](super::footprint)) plus the
/// configured [headroom](AscendConfig::headroom) is checked against
/// `aclrtGetMemInfo`, so a plan that would leave the runtime no memory for
/// its own launch buffers and operator data fails at startup, with needed,
/// free and headroom bytes, instead of mid-run. The first slab also runs a
/// probe kernel on bytes of known content and reads them back: a kernel
/// library whose launches report success but do nothing (CANN's stubs do
/// that when the library's registration failed, for a library built for
/// another SoC) is reported as [`Error::KernelsNotRegistered`] before any
/// step runs.
///
/// Copies synchronise the stream first, so they see every kernel queued
/// before them. Kernels run through the `aclrtlaunch_ta_*` functions of the
/// kernel library; aclnn operators through `Step::aclnn` (see
/// [`aclnn`](super::aclnn)), whose executors are made repeatable and reused
/// for calls seen before ([`AscendConfig::executor_cache`]).
///
/// The device is bound to the thread that opened it (ACL's current device
/// is per thread, though threads that set the same device share its
/// default context and memory), so it is neither `Send` nor `Sync`.
/// Cloning is cheap and shares the stream, executors and counters.
/// Dropping the last clone (after the slab) destroys the cached executors
/// and the stream and resets the device; finalising is left to
/// [`AscendRuntime::finalize`].
///
/// Its slab is device memory, so leases on it have no host slices (it is
/// not [`HostAccessible`](crate::HostAccessible)); copies and kernels are
/// the way in and out:
///
/// ```compile_fail
/// use tensor_arena::Lease;
/// use tensor_arena::device::ascend::AscendDevice;
/// fn first(l: &Lease<'_, f32, AscendDevice>) -> f32 {
///     l.as_slice()[0] // no such method: the bytes are not in host memory
/// }
/// ```
///
/// On a machine without CANN, [`AscendDevice::new`] returns
/// [`Error::LibraryNotFound`] naming every library and directory searched:
///
/// ```
/// use tensor_arena::device::ascend::{AscendConfig, AscendDevice};
/// let empty = std::env::temp_dir().join("no-cann-here");
/// std::fs::create_dir_all(&empty)?;
/// let cfg = AscendConfig::new().search_dir(&empty).system_search(false);
/// let err = AscendDevice::new(cfg).unwrap_err().to_string();
/// assert!(err.contains("libascendcl.so") && err.contains("set_env.sh"), "{err}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct AscendDevice {
    inner: Rc<Inner>,
}

/// Field order is drop order: the executors (destroyed after draining the
/// stream) go before the stream, the stream before the mapped ranges
/// (unmapped once nothing queued can use them), those before the device
/// reference.
struct Inner {
    executors: Executors,
    stream: Stream,
    ranges: Ranges,
    _context: Context,
    runtime: AscendRuntime,
    kernels: Option<&'static KernelLib>,
    name: String,
    id: i32,
    policy: MallocPolicy,
    attr: MemAttr,
    max_blocks: u32,
    headroom: usize,
    /// Whether the probe launch has run (once, at the first reservation).
    probed: Cell<bool>,
    counters: Counters,
}

#[derive(Default)]
struct Counters {
    alloc_calls: Cell<u64>,
    free_calls: Cell<u64>,
    failed_allocs: Cell<u64>,
    bytes_in_use: Cell<u64>,
    peak_bytes: Cell<u64>,
}

/// The device's mapped ranges: address space from `aclrtReserveMemAddress`,
/// into which one `aclrtMallocPhysical` handle per granule is mapped
/// (`aclrtMapMem`), as torch_npu's expandable segments do. Everything still
/// mapped is unmapped, freed and released when dropped.
struct Ranges {
    runtime: AscendRuntime,
    map: RefCell<BTreeMap<usize, MappedRange>>,
    /// The granularity, once the runtime has answered.
    granularity: Cell<Option<usize>>,
}

/// One reserved range: its length and its mapped granules (address ->
/// handle).
struct MappedRange {
    len: usize,
    pages: BTreeMap<usize, AclrtDrvMemHandle>,
}

impl Drop for Ranges {
    fn drop(&mut self) {
        let rt = self.runtime.rt();
        let Ok(vmm) = rt.vmm.as_ref() else { return };
        for (base, range) in std::mem::take(&mut *self.map.borrow_mut()) {
            // SAFETY: every page was mapped by `AscendDevice::map` with
            // its handle, and the range reserved by `reserve_address`; the
            // stream was drained and destroyed before (field order), so no
            // queued work uses them. Failures cannot be reported here.
            unsafe {
                for (addr, handle) in range.pages {
                    let _ = result::unmap_mem(rt, vmm, addr as *mut c_void);
                    let _ = result::free_physical(rt, vmm, handle);
                }
                let _ = result::release_address(rt, vmm, base as *mut c_void);
            }
        }
    }
}

/// One `aclrtSetDevice` reference, reset when dropped.
struct Context {
    runtime: AscendRuntime,
    id: i32,
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: the stream and every slab of this device were dropped
        // before (field order, and slabs hold the device alive).
        // A failure cannot be reported from a destructor.
        let _ = unsafe { result::reset_device(self.runtime.rt(), self.id) };
    }
}

/// The device's own stream, drained and destroyed when dropped.
struct Stream {
    runtime: AscendRuntime,
    raw: AclrtStream,
}

impl Drop for Stream {
    fn drop(&mut self) {
        let rt = self.runtime.rt();
        // SAFETY: the stream is live until here and not used afterwards;
        // draining it first means no queued work outlives it.
        unsafe {
            let _ = result::synchronize(rt, self.raw);
            let _ = result::destroy_stream(rt, self.raw);
        }
    }
}

impl AscendDevice {
    /// Loads the runtime as `config` says and opens its device: see
    /// [`AscendConfig`] for where libraries are searched.
    pub fn new(config: AscendConfig) -> Result<AscendDevice> {
        let runtime = AscendRuntime::load(&config)?;
        AscendDevice::open(runtime, &config)
    }

    /// Opens device `config.device_id` of an already loaded runtime, with
    /// its own stream, and loads the kernel library (unless
    /// `config.kernels` is off).
    pub fn open(runtime: AscendRuntime, config: &AscendConfig) -> Result<AscendDevice> {
        let id = config.device_id;
        let name = format!("ascend:{id}");
        let rt = runtime.rt();
        let fail = |f: Failure| f.into_error(&name);
        // SAFETY: the runtime is loaded and initialised.
        unsafe { result::set_device(rt, id) }.map_err(fail)?;
        let context = Context { runtime, id };
        // SAFETY: the device was just set on this thread.
        let raw = unsafe { result::create_stream(rt) }.map_err(fail)?;
        let stream = Stream { runtime, raw };
        let kernels = if config.kernels {
            Some(KernelLib::load(config, runtime.library_path())?)
        } else {
            None
        };
        let max_blocks = config
            .max_blocks
            // SAFETY: the runtime is loaded and the device set.
            .or_else(|| unsafe { result::vector_cores(rt, id) })
            .unwrap_or(FALLBACK_BLOCKS)
            .clamp(1, 65_535);
        let executors = Executors::new(config.executor_cache, rt, stream.raw);
        Ok(AscendDevice {
            inner: Rc::new(Inner {
                executors,
                stream,
                ranges: Ranges {
                    runtime,
                    map: RefCell::new(BTreeMap::new()),
                    granularity: Cell::new(None),
                },
                _context: context,
                runtime,
                kernels,
                name,
                id,
                policy: config.malloc_policy,
                attr: config.mem_attr,
                max_blocks,
                headroom: config.headroom,
                probed: Cell::new(false),
                counters: Counters::default(),
            }),
        })
    }

    /// The runtime this device runs on (for [`AscendRuntime::finalize`]).
    pub fn runtime(&self) -> AscendRuntime {
        self.inner.runtime
    }

    /// The device id.
    pub fn id(&self) -> i32 {
        self.inner.id
    }

    /// Cores a kernel launch uses at most.
    pub fn max_blocks(&self) -> u32 {
        self.inner.max_blocks
    }

    /// Where the kernel library was loaded from, if one was.
    pub fn kernel_library(&self) -> Option<&Path> {
        self.inner.kernels.map(|k| k.path.as_path())
    }

    /// Waits for everything queued on the device's stream; reports the
    /// first asynchronous failure (a kernel fault) as an error.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: the stream is live while `inner` is.
        unsafe { result::synchronize(self.inner.runtime.rt(), self.inner.stream.raw) }
            .map_err(|f| self.fail(f))?;
        // Nothing queued uses the retired executors any more.
        self.inner.executors.drained();
        Ok(())
    }

    /// `aclrtGetMemInfo` for the configured memory attribute: `(free,
    /// total)` bytes, device-wide, without what the system reserves.
    /// [`Error::MemoryAttributeUnsupported`] when the device answers free =
    /// total = 0 (it has no memory of that kind).
    pub fn mem_info(&self) -> Result<(usize, usize)> {
        // SAFETY: the runtime is loaded and this thread's device is set.
        let (free, total) =
            unsafe { result::mem_info(self.inner.runtime.rt(), self.inner.attr.code()) }
                .map_err(|f| self.fail(f))?;
        if free == 0 && total == 0 {
            return Err(Error::MemoryAttributeUnsupported {
                device: self.inner.name.clone(),
                attr: self.inner.attr.name(),
            });
        }
        Ok((free, total))
    }

    /// Device memory reservations leave to the runtime.
    pub fn headroom(&self) -> usize {
        self.inner.headroom
    }

    /// Records an event on `stream` (`aclrtCreateEvent`, `aclrtRecordEvent`):
    /// it completes once the work queued there so far has. Returns the
    /// `aclrtEvent` handle.
    ///
    /// # Safety
    /// `stream` is null (the default stream of this thread's device) or a
    /// live `aclrtStream` of this runtime on this device.
    pub unsafe fn record_event(&self, stream: *mut c_void) -> Result<usize> {
        // SAFETY: the runtime is loaded; the caller vouches for the stream.
        unsafe { result::record_event(self.inner.runtime.rt(), stream) }
            .map(|e| e as usize)
            .map_err(|f| self.fail(f))
    }

    /// Whether an event [`AscendDevice::record_event`] gave has completed
    /// (`aclrtQueryEventStatus`).
    ///
    /// # Safety
    /// `event` came from [`AscendDevice::record_event`] of this device and
    /// is not destroyed.
    pub unsafe fn event_done(&self, event: usize) -> Result<bool> {
        // SAFETY: the caller's promise.
        unsafe { result::event_done(self.inner.runtime.rt(), event as *mut c_void) }
            .map_err(|f| self.fail(f))
    }

    /// Destroys an event [`AscendDevice::record_event`] gave
    /// (`aclrtDestroyEvent`).
    ///
    /// # Safety
    /// As [`AscendDevice::event_done`]; the event is not used afterwards.
    pub unsafe fn destroy_event(&self, event: usize) -> Result<()> {
        // SAFETY: the caller's promise.
        unsafe { result::destroy_event(self.inner.runtime.rt(), event as *mut c_void) }
            .map_err(|f| self.fail(f))
    }

    // ---- Mapped ranges (hicann/runtime
    // `docs/zh/api_ref/11-04_virtual_memory_management.md`).

    /// The virtual-memory calls, or [`Error::MissingSymbol`] naming the
    /// first one this runtime lacks.
    fn vmm(&self) -> Result<&'static VmmFns> {
        self.inner
            .runtime
            .rt()
            .vmm
            .as_ref()
            .map_err(|&symbol| Error::MissingSymbol {
                library: self.inner.runtime.library_path().display().to_string(),
                symbol: symbol.to_owned(),
                message: "not exported by this ACL runtime".to_owned(),
                hint: "mapped ranges (aclrtReserveMemAddress, aclrtMallocPhysical, aclrtMapMem) are unsupported with it; whole regions (aclrtMalloc) still work".to_owned(),
            })
    }

    /// What each granule is allocated as: pinned HBM in 2 MiB pages on this
    /// device (`ACL_HBM_MEM_HUGE`, as torch_npu's expandable segments).
    fn physical_prop(&self) -> AclrtPhysicalMemProp {
        AclrtPhysicalMemProp {
            handle_type: ACL_MEM_HANDLE_TYPE_NONE,
            allocation_type: ACL_MEM_ALLOCATION_TYPE_PINNED,
            mem_attr: ACL_HBM_MEM_HUGE,
            location: AclrtMemLocation {
                id: self.inner.id as u32,
                kind: ACL_MEM_LOCATION_TYPE_DEVICE,
            },
            reserve: 0,
        }
    }

    fn range_error(&self, operation: &'static str, message: String) -> Error {
        Error::Device {
            device: self.inner.name.clone(),
            operation,
            message,
        }
    }

    /// The unit of [`AscendDevice::map`] (`aclrtMemGetAllocationGranularity`,
    /// minimum, for 2 MiB HBM pages). [`Error::MissingSymbol`] when the
    /// runtime has no virtual-memory calls.
    pub fn map_granularity(&self) -> Result<usize> {
        if let Some(g) = self.inner.ranges.granularity.get() {
            return Ok(g);
        }
        let vmm = self.vmm()?;
        // SAFETY: the runtime is loaded and this thread's device is set.
        let g =
            unsafe { result::mem_granularity(self.inner.runtime.rt(), vmm, &self.physical_prop()) }
                .map_err(|f| self.fail(f))?;
        if g == 0 || !g.is_power_of_two() {
            return Err(self.range_error(
                "map_granularity",
                format!("aclrtMemGetAllocationGranularity answered {g} bytes, not a power of two"),
            ));
        }
        self.inner.ranges.granularity.set(Some(g));
        Ok(g)
    }

    /// Reserves `bytes` of device address space (`aclrtReserveMemAddress`), a
    /// multiple of the granularity, with nothing mapped; returns its base.
    pub fn reserve_address(&self, bytes: usize) -> Result<usize> {
        let g = self.map_granularity()?;
        if bytes == 0 || !bytes.is_multiple_of(g) {
            return Err(self.range_error(
                "reserve_address",
                format!("{bytes} bytes is not a positive multiple of the {g}-byte granularity"),
            ));
        }
        let vmm = self.vmm()?;
        // SAFETY: the runtime is loaded and this thread's device is set.
        let base = unsafe { result::reserve_address(self.inner.runtime.rt(), vmm, bytes) }
            .map_err(|f| self.fail(f))? as usize;
        self.inner.ranges.map.borrow_mut().insert(
            base,
            MappedRange {
                len: bytes,
                pages: BTreeMap::new(),
            },
        );
        Ok(base)
    }

    /// Checks that `[addr, addr + len)` lies whole in one reserved range,
    /// at granule boundaries; returns the range's base and the granularity.
    fn granules(&self, operation: &'static str, addr: usize, len: usize) -> Result<(usize, usize)> {
        let g = self.map_granularity()?;
        if len == 0 || !addr.is_multiple_of(g) || !len.is_multiple_of(g) {
            return Err(self.range_error(
                operation,
                format!("{len} bytes at {addr:#x} are not whole {g}-byte granules"),
            ));
        }
        let map = self.inner.ranges.map.borrow();
        let (&base, range) = map.range(..=addr).next_back().ok_or_else(|| {
            self.range_error(
                operation,
                format!("{len} bytes at {addr:#x}: outside every reserved range"),
            )
        })?;
        if addr
            .checked_add(len)
            .is_none_or(|end| end > base + range.len)
        {
            return Err(self.range_error(
                operation,
                format!(
                    "{len} bytes at {addr:#x}: past the end of the {}-byte range at {base:#x}",
                    range.len
                ),
            ));
        }
        Ok((base, g))
    }

    /// Backs `[addr, addr + len)` (whole granules of one reserved range,
    /// none mapped now) with fresh device memory: one `aclrtMallocPhysical`
    /// and `aclrtMapMem` per granule. The physical memory plus the
    /// [headroom](AscendConfig::headroom) must fit the free memory
    /// ([`Error::OutOfMemory`] otherwise). On a failure nothing of this
    /// call stays mapped or allocated.
    pub fn map(&self, addr: usize, len: usize) -> Result<()> {
        let (base, g) = self.granules("map", addr, len)?;
        {
            let map = self.inner.ranges.map.borrow();
            let pages = &map[&base].pages;
            if let Some((&p, _)) = pages.range(addr..addr + len).next() {
                return Err(self.range_error(
                    "map",
                    format!("{len} bytes at {addr:#x}: the granule at {p:#x} is mapped already"),
                ));
            }
        }
        let (free, _) = self.mem_info()?;
        if len.saturating_add(self.inner.headroom) > free {
            return Err(self.oom(len));
        }
        let rt = self.inner.runtime.rt();
        let vmm = self.vmm()?;
        let prop = self.physical_prop();
        let mut done: Vec<(usize, AclrtDrvMemHandle)> = Vec::new();
        let mut failure = None;
        for va in (addr..addr + len).step_by(g) {
            // SAFETY: the runtime is loaded and the device set; the
            // properties are valid header values.
            let handle = match unsafe { result::malloc_physical(rt, vmm, g, &prop) } {
                Ok(h) => h,
                Err(f) => {
                    failure = Some(f);
                    break;
                }
            };
            // SAFETY: `va..va + g` lies in a reserved range of this device
            // with nothing mapped (checked above, and each granule once);
            // the handle is fresh, of `g` bytes.
            match unsafe { result::map_mem(rt, vmm, va as *mut c_void, g, handle) } {
                Ok(()) => done.push((va, handle)),
                Err(f) => {
                    // SAFETY: the handle was never mapped.
                    let _ = unsafe { result::free_physical(rt, vmm, handle) };
                    failure = Some(f);
                    break;
                }
            }
        }
        if let Some(f) = failure {
            for (va, handle) in done {
                // SAFETY: mapped just above with this handle; nothing was
                // queued on the bytes (they were never handed out).
                unsafe {
                    let _ = result::unmap_mem(rt, vmm, va as *mut c_void);
                    let _ = result::free_physical(rt, vmm, handle);
                }
            }
            // The runtime's own error (aclrtMallocPhysical's out of memory
            // included) names the call, its code and its message.
            return Err(self.fail(f));
        }
        let mut map = self.inner.ranges.map.borrow_mut();
        if let Some(range) = map.get_mut(&base) {
            range.pages.extend(done);
        }
        Ok(())
    }

    /// Gives the physical memory behind `[addr, addr + len)` (whole granules
    /// of one range, all mapped now) back: the stream is drained, then each
    /// granule unmapped (`aclrtUnmapMem`) and freed (`aclrtFreePhysical`).
    /// The addresses stay reserved.
    pub fn unmap(&self, addr: usize, len: usize) -> Result<()> {
        let (base, g) = self.granules("unmap", addr, len)?;
        {
            let map = self.inner.ranges.map.borrow();
            let pages = &map[&base].pages;
            if let Some(p) = (addr..addr + len)
                .step_by(g)
                .find(|p| !pages.contains_key(p))
            {
                return Err(self.range_error(
                    "unmap",
                    format!("{len} bytes at {addr:#x}: the granule at {p:#x} is not mapped"),
                ));
            }
        }
        // Queued kernels may still use the bytes.
        self.synchronize()?;
        self.unmap_pages(base, addr, len, g)
    }

    fn unmap_pages(&self, base: usize, addr: usize, len: usize, g: usize) -> Result<()> {
        let rt = self.inner.runtime.rt();
        let vmm = self.vmm()?;
        let mut map = self.inner.ranges.map.borrow_mut();
        let Some(range) = map.get_mut(&base) else {
            return Ok(());
        };
        for va in (addr..addr + len).step_by(g) {
            let Some(handle) = range.pages.remove(&va) else {
                continue;
            };
            // SAFETY: mapped at `va` with this handle by `map`; the stream
            // is drained, so nothing queued uses the bytes.
            unsafe { result::unmap_mem(rt, vmm, va as *mut c_void) }.map_err(|f| {
                range.pages.insert(va, handle);
                self.fail(f)
            })?;
            // SAFETY: the handle is unmapped now and forgotten.
            unsafe { result::free_physical(rt, vmm, handle) }.map_err(|f| self.fail(f))?;
        }
        Ok(())
    }

    /// Gives the range at `base` back (`aclrtReleaseMemAddress`), unmapping
    /// and freeing what is still mapped in it first; returns the bytes that
    /// were mapped, or `None` for an address [`AscendDevice::reserve_address`]
    /// did not give.
    pub fn release_address(&self, base: usize) -> Result<Option<usize>> {
        let (len, mapped) = match self.inner.ranges.map.borrow().get(&base) {
            Some(r) => (r.len, r.pages.len()),
            None => return Ok(None),
        };
        let g = self.map_granularity()?;
        if mapped > 0 {
            self.synchronize()?;
            self.unmap_pages(base, base, len, g)?;
        }
        let vmm = self.vmm()?;
        // SAFETY: reserved by `reserve_address`, nothing mapped in it now,
        // forgotten below.
        unsafe { result::release_address(self.inner.runtime.rt(), vmm, base as *mut c_void) }
            .map_err(|f| self.fail(f))?;
        self.inner.ranges.map.borrow_mut().remove(&base);
        Ok(Some(mapped * g))
    }

    /// Whether `addr` lies in a reserved range of this device (mapped or not).
    pub fn in_reserved_range(&self, addr: usize) -> bool {
        self.inner
            .ranges
            .map
            .borrow()
            .range(..=addr)
            .next_back()
            .is_some_and(|(&b, r)| addr - b < r.len)
    }

    /// Bytes mapped in all ranges.
    pub fn mapped_bytes(&self) -> usize {
        let g = match self.map_granularity() {
            Ok(g) => g,
            Err(_) => return 0,
        };
        let map = self.inner.ranges.map.borrow();
        map.values().map(|r| r.pages.len()).sum::<usize>() * g
    }

    /// `[addr, addr + len)` cut at granule boundaries, after checking that
    /// all of it lies in mapped granules of one range: the copies never
    /// touch an unmapped byte, and each stays inside one mapping.
    fn mapped_pieces(
        &self,
        operation: &'static str,
        addr: usize,
        len: usize,
    ) -> Result<Vec<(usize, usize)>> {
        let g = self.map_granularity()?;
        let map = self.inner.ranges.map.borrow();
        let outside = || {
            self.range_error(
                operation,
                format!(
                    "{len} bytes at {addr:#x} are not inside mapped granules of one reserved range"
                ),
            )
        };
        let (&base, range) = map.range(..=addr).next_back().ok_or_else(outside)?;
        let end = addr.checked_add(len).ok_or_else(outside)?;
        if end > base + range.len {
            return Err(outside());
        }
        let mut pieces = Vec::new();
        let mut at = addr;
        while at < end {
            let page = at / g * g;
            if !range.pages.contains_key(&page) {
                return Err(self.range_error(
                    operation,
                    format!(
                        "{len} bytes at {addr:#x}: the granule at {page:#x} is not mapped (its bytes are not readable or writable)"
                    ),
                ));
            }
            let n = (page + g).min(end) - at;
            pieces.push((at, n));
            at += n;
        }
        Ok(pieces)
    }

    /// Copies `src` to `addr` (inside mapped granules of one range).
    pub fn write_mapped(&self, addr: usize, src: &[u8]) -> Result<()> {
        let pieces = self.mapped_pieces("write_mapped", addr, src.len())?;
        if pieces.is_empty() {
            return Ok(());
        }
        self.synchronize()?;
        let rt = self.inner.runtime.rt();
        for (at, n) in pieces {
            let from = &src[at - addr..at - addr + n];
            // SAFETY: `at..at + n` lies in one mapped granule of this
            // device (checked above); `from` is valid for `n` bytes; the
            // stream is drained.
            unsafe {
                result::memcpy(
                    rt,
                    at as *mut c_void,
                    n,
                    from.as_ptr().cast(),
                    n,
                    ACL_MEMCPY_HOST_TO_DEVICE,
                )
            }
            .map_err(|f| self.fail(f))?;
        }
        Ok(())
    }

    /// Copies the bytes at `addr` (inside mapped granules of one range)
    /// into `dst`.
    pub fn read_mapped(&self, addr: usize, dst: &mut [u8]) -> Result<()> {
        let pieces = self.mapped_pieces("read_mapped", addr, dst.len())?;
        if pieces.is_empty() {
            return Ok(());
        }
        self.synchronize()?;
        let rt = self.inner.runtime.rt();
        for (at, n) in pieces {
            let to = &mut dst[at - addr..at - addr + n];
            // SAFETY: `at..at + n` lies in one mapped granule (checked
            // above); `to` is a unique borrow of `n` bytes; the stream is
            // drained.
            unsafe {
                result::memcpy(
                    rt,
                    to.as_mut_ptr().cast(),
                    n,
                    at as *const c_void,
                    n,
                    ACL_MEMCPY_DEVICE_TO_HOST,
                )
            }
            .map_err(|f| self.fail(f))?;
        }
        Ok(())
    }

    /// Sets `len` bytes at `addr` (inside mapped granules of one range) to
    /// `byte` (`aclrtMemset`).
    pub fn fill_mapped(&self, addr: usize, len: usize, byte: u8) -> Result<()> {
        let pieces = self.mapped_pieces("fill_mapped", addr, len)?;
        if pieces.is_empty() {
            return Ok(());
        }
        self.synchronize()?;
        let rt = self.inner.runtime.rt();
        for (at, n) in pieces {
            // SAFETY: `at..at + n` lies in one mapped granule (checked
            // above); the stream is drained.
            unsafe { result::memset(rt, at as *mut c_void, n, i32::from(byte), n) }
                .map_err(|f| self.fail(f))?;
        }
        Ok(())
    }

    pub(crate) fn stream(&self) -> AclrtStream {
        self.inner.stream.raw
    }

    pub(crate) fn executors(&self) -> &Executors {
        &self.inner.executors
    }

    pub(crate) fn fail(&self, f: Failure) -> Error {
        f.into_error(&self.inner.name)
    }

    pub(crate) fn runtime_ref(&self) -> &AscendRuntime {
        &self.inner.runtime
    }

    fn check_range(
        &self,
        slab: &AscendSlab,
        offset: usize,
        len: usize,
        op: &'static str,
    ) -> Result<()> {
        let same = Rc::ptr_eq(&slab.device, &self.inner);
        match offset.checked_add(len) {
            Some(end) if same && end <= slab.len => Ok(()),
            _ => Err(Error::Device {
                device: self.inner.name.clone(),
                operation: op,
                message: if same {
                    format!("range {offset}+{len} is outside the {}-byte slab", slab.len)
                } else {
                    "the slab belongs to another device".to_owned()
                },
            }),
        }
    }

    fn oom(&self, needed: usize) -> Error {
        let c = &self.inner.counters;
        c.failed_allocs.set(c.failed_allocs.get() + 1);
        let available = match self.mem_info() {
            Ok((free, _)) => Available::FreeWithHeadroom {
                free,
                headroom: self.inner.headroom,
            },
            _ => Available::Unknown,
        };
        Error::OutOfMemory {
            device: self.inner.name.clone(),
            needed,
            available,
        }
    }

    /// Proves the kernel library runs: `mul_scalar_` by 2 on the first
    /// [`PROBE_ELEMENTS`] f32 of a fresh slab, filled with known values and
    /// read back, then zeroed again.
    fn probe(&self, lib: &KernelLib, slab: &AscendSlab) -> Result<()> {
        let rt = self.inner.runtime.rt();
        let base = slab.base.cast::<c_void>();
        let values: [f32; PROBE_ELEMENTS] = std::array::from_fn(|i| i as f32 + 1.0);
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
        // SAFETY: the slab's allocation holds at least PROBE_BYTES from
        // `base` (reserve makes it so); nothing is queued on it yet.
        unsafe {
            result::memcpy(
                rt,
                base,
                PROBE_BYTES,
                bytes.as_ptr().cast(),
                PROBE_BYTES,
                ACL_MEMCPY_HOST_TO_DEVICE,
            )
        }
        .map_err(|f| self.fail(f))?;
        let kernel = Kernel::MulScalar { s: 2.0 };
        let tiling = Tiling::new(PROBE_ELEMENTS as u64, 1)?;
        // SAFETY: `base` holds PROBE_ELEMENTS f32 of live device memory of
        // this device's slab; the stream is this device's; f32 has kernels.
        let code = unsafe {
            lib.launch(
                self.inner.stream.raw,
                &kernel,
                DType::F32,
                base,
                std::ptr::null_mut(),
                &tiling,
            )
        };
        let symbol = KernelLib::symbol(&kernel, DType::F32);
        if code != 0 {
            return Err(self.fail(Failure {
                op: symbol,
                code: code as i32,
                message: result::recent_message(rt),
            }));
        }
        self.synchronize()?;
        let mut back = vec![0u8; PROBE_BYTES];
        // SAFETY: as above; the stream has drained.
        unsafe {
            result::memcpy(
                rt,
                back.as_mut_ptr().cast(),
                PROBE_BYTES,
                base,
                PROBE_BYTES,
                ACL_MEMCPY_DEVICE_TO_HOST,
            )
        }
        .map_err(|f| self.fail(f))?;
        let got: Vec<f32> = back
            .chunks_exact(4)
            .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        if got.as_slice() == values.as_slice() {
            return Err(Error::KernelsNotRegistered {
                device: self.inner.name.clone(),
                library: lib.path.display().to_string(),
                symbol: PROBE_SYMBOL,
                built_for: kernel_soc::built_for(&lib.path),
                device_soc: self.inner.runtime.soc_name(),
            });
        }
        if let Some(i) = (0..PROBE_ELEMENTS).find(|&i| got[i] != 2.0 * values[i]) {
            return Err(Error::Device {
                device: self.inner.name.clone(),
                operation: "kernel probe",
                message: format!(
                    "{symbol} by 2 turned element {i} = {} into {}, not {}: the kernel library {} computes wrong results",
                    values[i],
                    got[i],
                    2.0 * values[i],
                    lib.path.display()
                ),
            });
        }
        // SAFETY: as above; the stream has drained.
        unsafe { result::memset(rt, base, PROBE_BYTES, 0, PROBE_BYTES) }.map_err(|f| self.fail(f))
    }
}

impl std::fmt::Debug for AscendDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AscendDevice")
            .field("name", &self.inner.name)
            .field("runtime", &self.inner.runtime)
            .field("kernels", &self.kernel_library())
            .field("max_blocks", &self.inner.max_blocks)
            .finish()
    }
}

impl Device for AscendDevice {
    type Slab = AscendSlab;

    fn name(&self) -> &str {
        &self.inner.name
    }

    fn min_alignment(&self) -> usize {
        // aclrtMalloc returns 64-byte aligned memory; on-chip copies need it.
        64
    }

    /// `None`: whether a slab fits is not "bytes <= free" on this device
    /// (page rounding, the runtime's headroom), so [`Device::reserve`]
    /// decides; [`AscendDevice::mem_info`] has the runtime's figures.
    fn free_memory(&self) -> Result<Option<usize>> {
        Ok(None)
    }

    fn reserve(&self, bytes: usize, align: usize) -> Result<AscendSlab> {
        if !align.is_power_of_two() {
            return Err(Error::InvalidAlignment { align, min: 64 });
        }
        // The runtime aligns to 64; stricter alignment comes from slack
        // inside the same single allocation, which also holds the probe.
        let slack = if align > 64 { align - 1 } else { 0 };
        let alloc_len = bytes
            .max(PROBE_BYTES)
            .checked_add(slack)
            .ok_or_else(|| self.oom(usize::MAX))?;
        let (free, _) = self.mem_info()?;
        let needed = footprint(alloc_len, self.inner.policy);
        if needed.saturating_add(self.inner.headroom) > free {
            return Err(self.oom(needed));
        }
        let rt = self.inner.runtime.rt();
        // SAFETY: the runtime is loaded, the device set; the policy is a
        // header value.
        let raw = match unsafe { result::malloc(rt, alloc_len, self.inner.policy.code()) } {
            Ok(p) if !p.is_null() => p,
            Ok(_) => return Err(self.oom(needed)),
            Err(f)
                if [
                    ACL_ERROR_RT_MEMORY_ALLOCATION,
                    ACL_ERROR_RT_DEVICE_OOM,
                    ACL_ERROR_BAD_ALLOC,
                ]
                .contains(&f.code) =>
            {
                return Err(self.oom(needed));
            }
            Err(f) => {
                let c = &self.inner.counters;
                c.failed_allocs.set(c.failed_allocs.get() + 1);
                return Err(self.fail(f));
            }
        };
        let pad = (align - (raw as usize) % align) % align;
        let slab = AscendSlab {
            device: Rc::clone(&self.inner),
            raw,
            base: raw.cast::<u8>().wrapping_add(pad),
            len: bytes,
            alloc_len,
        };
        let c = &self.inner.counters;
        c.alloc_calls.set(c.alloc_calls.get() + 1);
        c.bytes_in_use.set(c.bytes_in_use.get() + alloc_len as u64);
        c.peak_bytes
            .set(c.peak_bytes.get().max(c.bytes_in_use.get()));
        if pad + bytes > alloc_len {
            // Dropping the slab frees the allocation.
            return Err(Error::Device {
                device: self.inner.name.clone(),
                operation: "reserve",
                message: format!(
                    "aclrtMalloc returned {raw:p}, too misaligned for {align}-byte alignment"
                ),
            });
        }
        // Device memory comes uninitialised; zero it as the host does.
        // SAFETY: `raw..raw + alloc_len` is the allocation just made, and
        // nothing is queued on it yet.
        unsafe { result::memset(rt, raw, alloc_len, 0, alloc_len) }.map_err(|f| self.fail(f))?;
        if let Some(lib) = self.inner.kernels
            && !self.inner.probed.get()
        {
            // Dropping the slab on failure frees the allocation.
            self.probe(lib, &slab)?;
            self.inner.probed.set(true);
        }
        Ok(slab)
    }

    fn write(&self, slab: &AscendSlab, offset: usize, src: &[u8]) -> Result<()> {
        self.check_range(slab, offset, src.len(), "write")?;
        if src.is_empty() {
            return Ok(());
        }
        // aclrtMemcpy is not ordered with the stream: queued kernels may
        // still read these bytes, so let them finish first.
        self.synchronize()?;
        let dst = slab.base.wrapping_add(offset).cast::<c_void>();
        // SAFETY: `dst..dst + (len - offset)` lies in the slab's live
        // allocation (range checked above); `src` is valid for its length,
        // which is at most that; the stream is drained, so nothing queued
        // touches the bytes.
        unsafe {
            result::memcpy(
                self.inner.runtime.rt(),
                dst,
                slab.len - offset,
                src.as_ptr().cast(),
                src.len(),
                ACL_MEMCPY_HOST_TO_DEVICE,
            )
        }
        .map_err(|f| self.fail(f))
    }

    fn read(&self, slab: &AscendSlab, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check_range(slab, offset, dst.len(), "read")?;
        if dst.is_empty() {
            return Ok(());
        }
        // Kernel results are only there once the stream is drained.
        self.synchronize()?;
        let src = slab.base.wrapping_add(offset).cast::<c_void>();
        // SAFETY: `src..src + dst.len()` lies in the slab's live allocation
        // (range checked above); `dst` is a unique borrow of that many
        // bytes; the stream is drained.
        unsafe {
            result::memcpy(
                self.inner.runtime.rt(),
                dst.as_mut_ptr().cast(),
                dst.len(),
                src,
                dst.len(),
                ACL_MEMCPY_DEVICE_TO_HOST,
            )
        }
        .map_err(|f| self.fail(f))
    }

    fn counters(&self) -> DeviceCounters {
        let c = &self.inner.counters;
        DeviceCounters {
            alloc_calls: c.alloc_calls.get(),
            free_calls: c.free_calls.get(),
            failed_allocs: c.failed_allocs.get(),
            bytes_in_use: c.bytes_in_use.get(),
            peak_bytes: c.peak_bytes.get(),
        }
    }
}

impl Kernels for AscendDevice {
    fn launch(
        &self,
        slab: &AscendSlab,
        kernel: &Kernel,
        dtype: DType,
        x: Region,
        other: Option<Region>,
    ) -> Result<()> {
        let other = check_launch(&self.inner.name, slab.len, kernel, dtype, x, other)?;
        self.check_range(slab, x.offset, x.len, kernel.name())?;
        let lib = self.inner.kernels.ok_or_else(|| Error::Device {
            device: self.inner.name.clone(),
            operation: kernel.name(),
            message: "no kernel library was loaded (AscendConfig::without_kernels)".to_owned(),
        })?;
        lib.require(kernel, dtype)?;
        let n = (x.len / dtype.size()) as u64;
        let tiling = Tiling::new(n, self.inner.max_blocks)?;
        if tiling.num_blocks == 0 {
            return Ok(());
        }
        let xp = slab.base.wrapping_add(x.offset).cast::<c_void>();
        let op = other.map_or(std::ptr::null_mut(), |o| {
            slab.base.wrapping_add(o.offset).cast::<c_void>()
        });
        // SAFETY: `check_launch` put both regions inside the slab's live
        // allocation, 64-byte aligned and not overlapping, `x` of `n`
        // elements and `other` of `kernel.operand_len(n)`; the kernel's
        // parameters are validated and `dtype` has kernels; the stream is
        // this device's, and the caller holds the leases of both buffers
        // (the written ones exclusively).
        let code = unsafe { lib.launch(self.inner.stream.raw, kernel, dtype, xp, op, &tiling) };
        if code != 0 {
            return Err(self.fail(Failure {
                op: KernelLib::symbol(kernel, dtype),
                code: code as i32,
                message: result::recent_message(self.inner.runtime.rt()),
            }));
        }
        Ok(())
    }
}

/// The arena's slab in device memory: one `aclrtMalloc`, freed (after
/// draining the stream) when dropped. Not dereferenceable on the host.
pub struct AscendSlab {
    device: Rc<Inner>,
    /// What `aclrtMalloc` returned.
    raw: *mut c_void,
    /// `raw` moved up to the requested alignment; `base + len <= raw +
    /// alloc_len`.
    base: *mut u8,
    len: usize,
    alloc_len: usize,
}

impl Slab for AscendSlab {
    fn base(&self) -> *mut u8 {
        self.base
    }

    fn len(&self) -> usize {
        self.len
    }
}

impl std::fmt::Debug for AscendSlab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AscendSlab")
            .field("device", &self.device.name)
            .field("base", &self.base)
            .field("len", &self.len)
            .finish()
    }
}

impl Drop for AscendSlab {
    fn drop(&mut self) {
        let d = &self.device;
        let rt = d.runtime.rt();
        // SAFETY: the stream is live (the slab holds the device); `raw`
        // came from aclrtMalloc and is freed once, here, after the stream
        // has drained every kernel that could use it. Failures cannot be
        // reported from a destructor.
        unsafe {
            let _ = result::synchronize(rt, d.stream.raw);
            let _ = result::free(rt, self.raw);
        }
        let c = &d.counters;
        c.free_calls.set(c.free_calls.get() + 1);
        c.bytes_in_use
            .set(c.bytes_in_use.get().saturating_sub(self.alloc_len as u64));
    }
}
