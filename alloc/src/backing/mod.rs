//! The memory behind the slab and the fallback's regions: host pages, CUDA
//! device memory or Ascend device memory. Each backing hands out whole
//! regions by address; the policy never dereferences them (checked mode
//! goes through [`Backing::fill`] and [`Backing::read`]).

use crate::config::{Backend, Config};
use crate::error::{Error, Result};

mod capped;
// The CUDA runtime's functions, dlopen'd, are called through raw pointers.
#[allow(unsafe_code)]
mod cuda;
// The CUDA driver's virtual memory management, dlopen'd likewise.
#[allow(unsafe_code)]
mod cuda_driver;
// The Ascend device handle is made `Send`: one owner, behind the mutex.
#[allow(unsafe_code)]
mod device;
#[cfg(unix)]
// mmap / mprotect / madvise on the host's own address space.
#[allow(unsafe_code)]
mod host_range;

pub use capped::Capped;
pub use cuda::CudaBacking;
pub use device::{DeviceBacking, NpuBacking, host_backing, host_backing_on, npu_backing};

/// A source of device memory regions.
pub trait Backing: Send {
    /// Short name for reports (`cpu`, `cuda:0`, `npu:0`).
    fn name(&self) -> String;
    /// Reserves `bytes` (512-byte aligned at least) and returns its address.
    fn reserve(&mut self, bytes: usize) -> Result<usize>;
    /// Returns a region [`Backing::reserve`] gave, by its address; an
    /// address it did not give is ignored.
    fn release(&mut self, addr: usize);
    /// Sets `len` bytes at `addr` (inside one reserved region) to `byte`.
    fn fill(&mut self, addr: usize, len: usize, byte: u8) -> Result<()>;
    /// Copies bytes at `addr` (inside one reserved region) into `dst`.
    fn read(&mut self, addr: usize, dst: &mut [u8]) -> Result<()>;
    /// Bytes the device can still give (after its headroom rule), if known.
    fn free_memory(&self) -> Option<usize>;
    /// The device's capacity, if known.
    fn total_memory(&self) -> Option<usize>;
    /// Successful reservations so far.
    fn reservations(&self) -> u64;
    /// Bytes reserved now.
    fn reserved_bytes(&self) -> u64;
    /// The device index it reserves on (-1 for host memory).
    fn device(&self) -> i32;
    /// Records an event on `stream` (a runtime stream handle, 0 for the
    /// default stream) after the work queued on it so far; returns its
    /// handle. Host memory has no streams: nothing to wait for (handle 0,
    /// complete at once).
    fn record_event(&mut self, stream: usize) -> Result<usize> {
        let _ = stream;
        Ok(0)
    }
    /// Whether the event [`Backing::record_event`] gave has completed
    /// (`false`: still pending). An error counts as pending: the bytes it
    /// guards are not handed out again on a guess.
    fn event_done(&mut self, event: usize) -> Result<bool> {
        let _ = event;
        Ok(true)
    }
    /// Destroys an event [`Backing::record_event`] gave (completed or not).
    fn destroy_event(&mut self, event: usize) {
        let _ = event;
    }
    /// Moves the cap on reserved bytes of a [`Capped`] backing; `false`
    /// for a backing without one (wrap it first).
    fn set_reserve_cap(&mut self, cap: u64) -> bool {
        let _ = cap;
        false
    }

    // ---- Mapped ranges: address space reserved once, physical memory
    // mapped into it and unmapped page by page (CUDA's driver VMM,
    // `cuMemAddressReserve` / `cuMemCreate` / `cuMemMap`; Ascend's
    // `aclrtReserveMemAddress` / `aclrtMallocPhysical` / `aclrtMapMem`; the
    // host's `PROT_NONE` reservation committed in pages). A range's mapped
    // bytes are its reserved bytes: [`Backing::reserved_bytes`] counts them.

    /// The unit of [`Backing::map`] and [`Backing::unmap`] (offsets and
    /// lengths are multiples of it), or `None` for a backing without a
    /// virtual-memory API: the policy then uses whole regions only.
    fn map_granularity(&self) -> Option<usize> {
        None
    }
    /// Reserves `bytes` of address space (a multiple of the granularity)
    /// with nothing mapped and returns its base.
    fn reserve_address(&mut self, bytes: usize) -> Result<usize> {
        Err(no_ranges(&self.name(), "reserve_address", bytes))
    }
    /// Backs `[addr, addr + len)`, inside one reserved range and unmapped
    /// now, with physical memory readable and writable by the device.
    fn map(&mut self, addr: usize, len: usize) -> Result<()> {
        let _ = addr;
        Err(no_ranges(&self.name(), "map", len))
    }
    /// Gives the physical memory behind `[addr, addr + len)` (mapped now,
    /// inside one range) back to the device; the addresses stay reserved.
    fn unmap(&mut self, addr: usize, len: usize) -> Result<()> {
        let _ = addr;
        Err(no_ranges(&self.name(), "unmap", len))
    }
    /// Gives a reserved range back (what is still mapped in it is unmapped
    /// first). An address [`Backing::reserve_address`] did not give is
    /// ignored.
    fn release_address(&mut self, base: usize) {
        let _ = base;
    }
}

/// The error of a range call on a backing without mapped ranges.
pub(crate) fn no_ranges(backend: &str, call: &str, bytes: usize) -> Error {
    Error::Backing {
        backend: backend.to_owned(),
        reason: format!(
            "{call} of {bytes} bytes: this backing has no mapped ranges (map_granularity is None)"
        ),
    }
}

/// Opens the backing `config` names. A backend whose runtime is missing
/// fails with the error of its loader (what was searched, how to set it
/// up); nothing falls back to host memory.
pub fn open(config: &Config) -> Result<Box<dyn Backing>> {
    Ok(match config.backend {
        Backend::Cpu => Box::new(host_backing()),
        Backend::Cuda => Box::new(CudaBacking::open(
            config.device,
            config.cuda_runtime_lib.as_deref(),
        )?),
        Backend::Npu => Box::new(npu_backing(
            config.device.unwrap_or(0),
            config.npu_runtime_lib.as_deref(),
        )?),
    })
}
