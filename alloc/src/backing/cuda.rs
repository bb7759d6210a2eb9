//! CUDA device memory through the CUDA runtime (`libcudart`), loaded at
//! run time: nothing links against CUDA, and a machine without it fails
//! with an error naming what was searched.

use std::cell::OnceCell;
use std::collections::BTreeMap;
use std::ffi::{CStr, c_char, c_int, c_void};

use libloading::Library;

use super::Backing;
use super::cuda_driver::{CudaRanges, DRIVER_NAMES, Driver};
use crate::error::{Error, Result};

/// Names tried in order (the soname torch's own wheels load first, so the
/// copy already in the process is found).
const CUDART_NAMES: [&str; 5] = [
    "libcudart.so.13",
    "libcudart.so.12",
    "libcudart.so.11.0",
    "libcudart.so",
    "cudart64_12.dll",
];

const MEMCPY_HOST_TO_DEVICE: c_int = 1;
const MEMCPY_DEVICE_TO_HOST: c_int = 2;

type Malloc = unsafe extern "C" fn(*mut *mut c_void, usize) -> c_int;
type Free = unsafe extern "C" fn(*mut c_void) -> c_int;
type MemGetInfo = unsafe extern "C" fn(*mut usize, *mut usize) -> c_int;
type Memcpy = unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int) -> c_int;
type SetDevice = unsafe extern "C" fn(c_int) -> c_int;
type GetDevice = unsafe extern "C" fn(*mut c_int) -> c_int;
type ErrorString = unsafe extern "C" fn(c_int) -> *const c_char;
/// `cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)`
type EventCreateWithFlags = unsafe extern "C" fn(*mut *mut c_void, u32) -> c_int;
/// `cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)`
type EventRecord = unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int;
/// `cudaError_t cudaEventQuery(cudaEvent_t event)`
type EventQuery = unsafe extern "C" fn(*mut c_void) -> c_int;
/// `cudaError_t cudaEventDestroy(cudaEvent_t event)`
type EventDestroy = unsafe extern "C" fn(*mut c_void) -> c_int;
/// `cudaError_t cudaDeviceSynchronize(void)`
type DeviceSynchronize = unsafe extern "C" fn() -> c_int;

/// `cudaEventDisableTiming` (driver_types.h): events only for ordering,
/// the cheapest kind (what torch's caching allocator creates).
const EVENT_DISABLE_TIMING: u32 = 0x02;
/// `cudaErrorNotReady` (driver_types.h): what `cudaEventQuery` answers
/// while the work before the event has not completed.
const ERROR_NOT_READY: c_int = 600;

struct Fns {
    malloc: Malloc,
    free: Free,
    mem_get_info: MemGetInfo,
    memcpy: Memcpy,
    set_device: SetDevice,
    get_device: GetDevice,
    error_string: ErrorString,
    event_create: EventCreateWithFlags,
    event_record: EventRecord,
    event_query: EventQuery,
    event_destroy: EventDestroy,
    device_synchronize: DeviceSynchronize,
}

/// Device memory of one CUDA device.
pub struct CudaBacking {
    fns: Fns,
    device: c_int,
    regions: BTreeMap<usize, usize>,
    reservations: u64,
    reserved: u64,
    total: Option<usize>,
    /// Mapped ranges through the driver's VMM, opened at the first use
    /// (`map_granularity` or a range call): empty before, `Err` when the
    /// driver could not be opened (the error is given again by every range
    /// call, and `map_granularity` answers `None`).
    ranges: OnceCell<std::result::Result<CudaRanges, String>>,
    /// Where the driver is looked for (`DRIVER_NAMES` unless a test or a
    /// caller says otherwise).
    driver_names: Vec<String>,
    // Keeps the functions above loaded; dropped last.
    _lib: Library,
}

impl CudaBacking {
    /// Loads the CUDA runtime (`lib`, else the usual sonames) for device
    /// `device`, else the calling thread's current device.
    pub fn open(device: Option<i32>, lib: Option<&str>) -> Result<CudaBacking> {
        let names: Vec<&str> = match lib {
            Some(l) => vec![l],
            None => CUDART_NAMES.to_vec(),
        };
        let mut tried = Vec::new();
        let mut found = None;
        for name in &names {
            // SAFETY: loading the CUDA runtime runs its initialisers, which
            // have no preconditions on the caller.
            match unsafe { Library::new(name) } {
                Ok(l) => {
                    found = Some(l);
                    break;
                }
                Err(e) => tried.push(format!("{name}: {e}")),
            }
        }
        let lib = found.ok_or_else(|| Error::Backing {
            backend: "cuda".to_owned(),
            reason: format!(
                "no CUDA runtime could be loaded (tried {}); install the CUDA build of torch or set cuda_runtime_lib",
                tried.join("; ")
            ),
        })?;
        let sym = |name: &str| -> Result<*const c_void> {
            // SAFETY: the symbol is only read as an address here and cast
            // below to the signature the CUDA runtime API documents.
            unsafe { lib.get::<*const c_void>(name.as_bytes()) }
                .map(|s| *s)
                .map_err(|e| Error::Backing {
                    backend: "cuda".to_owned(),
                    reason: format!("the CUDA runtime lacks {name}: {e}"),
                })
        };
        // SAFETY: each pointer is the named CUDA runtime function, whose C
        // signature (cuda_runtime_api.h) is the type it is cast to.
        let fns = unsafe {
            Fns {
                malloc: std::mem::transmute::<*const c_void, Malloc>(sym("cudaMalloc")?),
                free: std::mem::transmute::<*const c_void, Free>(sym("cudaFree")?),
                mem_get_info: std::mem::transmute::<*const c_void, MemGetInfo>(sym(
                    "cudaMemGetInfo",
                )?),
                memcpy: std::mem::transmute::<*const c_void, Memcpy>(sym("cudaMemcpy")?),
                set_device: std::mem::transmute::<*const c_void, SetDevice>(sym("cudaSetDevice")?),
                get_device: std::mem::transmute::<*const c_void, GetDevice>(sym("cudaGetDevice")?),
                error_string: std::mem::transmute::<*const c_void, ErrorString>(sym(
                    "cudaGetErrorString",
                )?),
                event_create: std::mem::transmute::<*const c_void, EventCreateWithFlags>(sym(
                    "cudaEventCreateWithFlags",
                )?),
                event_record: std::mem::transmute::<*const c_void, EventRecord>(sym(
                    "cudaEventRecord",
                )?),
                event_query: std::mem::transmute::<*const c_void, EventQuery>(sym(
                    "cudaEventQuery",
                )?),
                event_destroy: std::mem::transmute::<*const c_void, EventDestroy>(sym(
                    "cudaEventDestroy",
                )?),
                device_synchronize: std::mem::transmute::<*const c_void, DeviceSynchronize>(sym(
                    "cudaDeviceSynchronize",
                )?),
            }
        };
        let mut backing = CudaBacking {
            fns,
            device: device.unwrap_or(0),
            regions: BTreeMap::new(),
            reservations: 0,
            reserved: 0,
            total: None,
            ranges: OnceCell::new(),
            driver_names: DRIVER_NAMES.iter().map(|&n| n.to_owned()).collect(),
            _lib: lib,
        };
        if device.is_none() {
            let mut current: c_int = 0;
            // SAFETY: cudaGetDevice writes one int through a valid pointer.
            backing.check("cudaGetDevice", unsafe {
                (backing.fns.get_device)(&mut current)
            })?;
            backing.device = current;
        }
        backing.total = backing.mem_info().ok().map(|(_, total)| total);
        Ok(backing)
    }

    fn check(&self, op: &str, code: c_int) -> Result<()> {
        if code == 0 {
            return Ok(());
        }
        // SAFETY: cudaGetErrorString returns a static NUL-terminated string
        // for any code.
        let text = unsafe { CStr::from_ptr((self.fns.error_string)(code)) };
        Err(Error::Backing {
            backend: format!("cuda:{}", self.device),
            reason: format!("{op} failed with {code} ({})", text.to_string_lossy()),
        })
    }

    /// Runs `f` with this backing's device current, restoring the caller's.
    /// Waits for every stream of the device (`cudaDeviceSynchronize`).
    fn synchronize(&self) -> Result<()> {
        self.on_device(|| {
            // SAFETY: a plain call without arguments on the current device.
            self.check("cudaDeviceSynchronize", unsafe {
                (self.fns.device_synchronize)()
            })
        })
    }

    fn on_device<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let mut previous: c_int = 0;
        // SAFETY: cudaGetDevice writes one int through a valid pointer.
        self.check("cudaGetDevice", unsafe {
            (self.fns.get_device)(&mut previous)
        })?;
        if previous != self.device {
            // SAFETY: plain call with a device index.
            self.check("cudaSetDevice", unsafe {
                (self.fns.set_device)(self.device)
            })?;
        }
        let out = f();
        if previous != self.device {
            // SAFETY: as above; restores the caller's device.
            let _ = unsafe { (self.fns.set_device)(previous) };
        }
        out
    }

    fn mem_info(&self) -> Result<(usize, usize)> {
        self.on_device(|| {
            let (mut free, mut total) = (0usize, 0usize);
            // SAFETY: two valid out-pointers.
            self.check("cudaMemGetInfo", unsafe {
                (self.fns.mem_get_info)(&mut free, &mut total)
            })?;
            Ok((free, total))
        })
    }

    fn inside(&self, addr: usize, len: usize) -> Result<()> {
        if let Some(Ok(r)) = self.ranges.get()
            && r.holds(addr)
        {
            return if r.is_mapped(addr, len) {
                Ok(())
            } else {
                Err(Error::Backing {
                    backend: format!("cuda:{}", self.device),
                    reason: format!(
                        "{len} bytes at {addr:#x} are not inside mapped pages of one range"
                    ),
                })
            };
        }
        match self.regions.range(..=addr).next_back() {
            Some((&base, &size)) if addr - base + len <= size => Ok(()),
            _ => Err(Error::Backing {
                backend: format!("cuda:{}", self.device),
                reason: format!("{len} bytes at {addr:#x} are not inside one reserved region"),
            }),
        }
    }

    /// Looks for the driver in `names` instead of the usual sonames (before
    /// the first range call; a test's way to a missing driver).
    pub fn with_driver_names(mut self, names: &[&str]) -> CudaBacking {
        self.driver_names = names.iter().map(|&n| n.to_owned()).collect();
        self.ranges = OnceCell::new();
        self
    }

    /// The driver's VMM, opened at the first call (`map_granularity` or
    /// a range call): the driver loaded, the device's primary context
    /// retained, its granularity read. The runtime's device is made
    /// current first and `cudaFree(NULL)` run, so the primary context
    /// exists (torch's, when torch runs). A failure is kept and given by
    /// every later call.
    fn opened_ranges(&self) -> &std::result::Result<CudaRanges, String> {
        self.ranges.get_or_init(|| {
            let names: Vec<&str> = self.driver_names.iter().map(String::as_str).collect();
            self.on_device(|| {
                // SAFETY: cudaFree(NULL) frees nothing; it makes the runtime
                // create the device's primary context if it has not yet.
                self.check("cudaFree", unsafe { (self.fns.free)(std::ptr::null_mut()) })?;
                CudaRanges::open(Driver::load(&names)?, self.device)
            })
            .map_err(|e| e.to_string())
        })
    }

    fn ranges(&mut self) -> Result<&mut CudaRanges> {
        let _ = self.opened_ranges();
        let device = self.device;
        match self.ranges.get_mut() {
            Some(Ok(r)) => Ok(r),
            Some(Err(reason)) => Err(Error::Backing {
                backend: format!("cuda:{device}"),
                reason: format!("mapped ranges are unavailable: {reason}"),
            }),
            None => unreachable!("opened above"),
        }
    }
}

impl Backing for CudaBacking {
    fn name(&self) -> String {
        format!("cuda:{}", self.device)
    }

    fn reserve(&mut self, bytes: usize) -> Result<usize> {
        let addr = self.on_device(|| {
            let mut ptr: *mut c_void = std::ptr::null_mut();
            // SAFETY: a valid out-pointer; cudaMalloc aligns to 256 B at
            // least (512 in practice).
            self.check("cudaMalloc", unsafe { (self.fns.malloc)(&mut ptr, bytes) })?;
            Ok(ptr as usize)
        })?;
        self.regions.insert(addr, bytes);
        self.reservations += 1;
        self.reserved += bytes as u64;
        Ok(addr)
    }

    fn release(&mut self, addr: usize) {
        if let Some(size) = self.regions.remove(&addr) {
            self.reserved -= size as u64;
            let _ = self.on_device(|| {
                // SAFETY: `addr` came from cudaMalloc and is freed once
                // (removed from the map above).
                self.check("cudaFree", unsafe { (self.fns.free)(addr as *mut c_void) })
            });
        }
    }

    fn fill(&mut self, addr: usize, len: usize, byte: u8) -> Result<()> {
        self.inside(addr, len)?;
        let host = vec![byte; len];
        self.on_device(|| {
            // SAFETY: the destination range lies in a live region (checked)
            // and the source is `len` host bytes; cudaMemcpy synchronises.
            self.check("cudaMemcpy", unsafe {
                (self.fns.memcpy)(
                    addr as *mut c_void,
                    host.as_ptr().cast(),
                    len,
                    MEMCPY_HOST_TO_DEVICE,
                )
            })
        })
    }

    fn read(&mut self, addr: usize, dst: &mut [u8]) -> Result<()> {
        self.inside(addr, dst.len())?;
        self.on_device(|| {
            // SAFETY: the source range lies in a live region (checked) and
            // `dst` is a unique host buffer of the same length.
            self.check("cudaMemcpy", unsafe {
                (self.fns.memcpy)(
                    dst.as_mut_ptr().cast(),
                    addr as *const c_void,
                    dst.len(),
                    MEMCPY_DEVICE_TO_HOST,
                )
            })
        })
    }

    fn free_memory(&self) -> Option<usize> {
        self.mem_info().ok().map(|(free, _)| free)
    }

    fn total_memory(&self) -> Option<usize> {
        self.total
    }

    fn reservations(&self) -> u64 {
        self.reservations
    }

    fn reserved_bytes(&self) -> u64 {
        self.reserved
    }

    fn device(&self) -> i32 {
        self.device
    }

    fn map_granularity(&self) -> Option<usize> {
        // A driver that cannot be opened answers `None`: the policy keeps
        // to whole regions.
        self.opened_ranges()
            .as_ref()
            .ok()
            .map(CudaRanges::granularity)
    }

    fn reserve_address(&mut self, bytes: usize) -> Result<usize> {
        self.ranges()?.reserve(bytes)
    }

    fn map(&mut self, addr: usize, len: usize) -> Result<()> {
        self.ranges()?.map(addr, len)?;
        self.reserved += len as u64;
        Ok(())
    }

    fn unmap(&mut self, addr: usize, len: usize) -> Result<()> {
        // cuMemUnmap / cuMemRelease do not wait for work queued on the
        // device (unlike cudaFree; measured on an H200, docs/device-costs.md):
        // kernels that used these pages before their blocks were freed may
        // still run. Wait for the device first. Unmaps are rare (a plan
        // changes, empty_cache), never in a steady step.
        self.synchronize()?;
        let r = self.ranges()?;
        let before = r.mapped_bytes();
        let out = r.unmap(addr, len);
        // What was unmapped before an error counts too.
        let freed = before - r.mapped_bytes();
        self.reserved -= freed as u64;
        out
    }

    fn release_address(&mut self, base: usize) {
        // As for unmap: pages still mapped are released with the range.
        if self.synchronize().is_err() {
            return;
        }
        if let Some(Ok(r)) = self.ranges.get_mut()
            && let Some(mapped) = r.release(base)
        {
            self.reserved -= mapped as u64;
        }
    }

    fn record_event(&mut self, stream: usize) -> Result<usize> {
        self.on_device(|| {
            let mut event: *mut c_void = std::ptr::null_mut();
            // SAFETY: a valid out-pointer and a flag value of the header.
            self.check("cudaEventCreateWithFlags", unsafe {
                (self.fns.event_create)(&mut event, EVENT_DISABLE_TIMING)
            })?;
            // SAFETY: `event` was just created; `stream` is the handle torch
            // passed for a live stream of this device (0: the legacy default
            // stream).
            let code = unsafe { (self.fns.event_record)(event, stream as *mut c_void) };
            if let Err(e) = self.check("cudaEventRecord", code) {
                // SAFETY: the event was created above and is not used again.
                let _ = unsafe { (self.fns.event_destroy)(event) };
                return Err(e);
            }
            Ok(event as usize)
        })
    }

    fn event_done(&mut self, event: usize) -> Result<bool> {
        // SAFETY: `event` came from record_event and is not destroyed yet
        // (the caller's contract); cudaEventQuery does not need the device
        // to be current.
        let code = unsafe { (self.fns.event_query)(event as *mut c_void) };
        if code == ERROR_NOT_READY {
            return Ok(false);
        }
        self.check("cudaEventQuery", code).map(|()| true)
    }

    fn destroy_event(&mut self, event: usize) {
        if event != 0 {
            // SAFETY: `event` came from record_event and is destroyed once;
            // CUDA releases it once its work completes if it is pending.
            let _ = unsafe { (self.fns.event_destroy)(event as *mut c_void) };
        }
    }
}

// SAFETY: the struct holds plain function pointers and addresses, and (in
// its mapped ranges) the device's primary context handle, which the driver
// lets any thread make current (`cuCtxSetCurrent`, done around each driver
// call); the CUDA runtime's functions may be called from any thread (the
// device is set on the calling thread by `on_device`), and the allocator's
// mutex serialises every use of the region and range maps.
unsafe impl Send for CudaBacking {}
