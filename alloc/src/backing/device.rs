//! Backings over the core crate's devices: the host device (2 MiB pages)
//! and the Ascend device (`aclrtMalloc` through ACL loaded at run time).

use std::collections::BTreeMap;
use std::path::Path;

use tensor_arena::device::ascend::{AscendConfig, AscendDevice};
use tensor_arena::{Device, HostDevice, device::Slab};

use super::Backing;
#[cfg(unix)]
use super::host_range::HostRanges;
use crate::error::{Error, Result};

/// Regions are reserved with this alignment: torch_npu's and PyTorch's
/// block granule.
const REGION_ALIGN: usize = 512;

/// A backing over a [`Device`]: each region is one slab of the device.
pub struct DeviceBacking<D: Device> {
    device: D,
    slabs: BTreeMap<usize, D::Slab>,
    reservations: u64,
    reserved: u64,
    total: Option<usize>,
    /// Mapped ranges (host pages only; the Ascend device's are the
    /// runtime's own calls).
    #[cfg(unix)]
    ranges: Option<HostRanges>,
}

/// Host pages (the CPU backend).
pub fn host_backing() -> DeviceBacking<HostDevice> {
    host_backing_on(HostDevice::new())
}

/// Host pages of a host device of the caller's (for instance
/// [`HostDevice::with_limit`], a small device for out-of-memory tests).
pub fn host_backing_on(device: HostDevice) -> DeviceBacking<HostDevice> {
    DeviceBacking {
        device,
        slabs: BTreeMap::new(),
        reservations: 0,
        reserved: 0,
        total: None,
        #[cfg(unix)]
        ranges: Some(HostRanges::default()),
    }
    .with_host_total()
}

/// Ascend device memory on device `id`; `runtime_lib` names the ACL
/// runtime to load (the simulated one, for tests, is asked for this way),
/// else the usual CANN search (`ASCEND_HOME_PATH`, `LD_LIBRARY_PATH`).
pub fn npu_backing(id: i32, runtime_lib: Option<&str>) -> Result<NpuBacking> {
    let mut config = AscendConfig::from_env()?.device(id).without_kernels();
    if let Some(lib) = runtime_lib {
        config = config.runtime_lib(lib);
    }
    let device = AscendDevice::new(config)?;
    let total = device.mem_info().ok().map(|(_, total)| total);
    Ok(NpuBacking(DeviceBacking {
        device,
        slabs: BTreeMap::new(),
        reservations: 0,
        reserved: 0,
        total,
        #[cfg(unix)]
        ranges: None,
    }))
}

/// [`DeviceBacking`] over the Ascend device, movable between threads. Its
/// mapped ranges are the runtime's own (`aclrtReserveMemAddress`,
/// `aclrtMallocPhysical` + `aclrtMapMem` per granule, `aclrtUnmapMem` +
/// `aclrtFreePhysical`, `aclrtReleaseMemAddress`), through
/// [`AscendDevice`]'s methods; a runtime without them has none
/// ([`Backing::map_granularity`] is `None`).
pub struct NpuBacking(DeviceBacking<AscendDevice>);

// SAFETY: `AscendDevice` is `!Send` because its handle is an `Rc` shared
// with the slabs it makes. Every clone of that `Rc` (the device and each
// slab) is owned by this one value and never handed out, so moving the
// value moves all of them together; the allocator's mutex serialises every
// use, so no two threads touch the counts at once. ACL itself allows calls
// from any thread on which the device is set, which torch_npu does on the
// threads that allocate NPU tensors (an assumption, docs/allocator.md).
unsafe impl Send for NpuBacking {}

impl DeviceBacking<HostDevice> {
    /// The capacity: the device's limit, else the machine's memory.
    fn with_host_total(mut self) -> Self {
        let limit = self.device.free_memory().ok().flatten();
        self.total = limit.or_else(host_memory_total);
        self
    }
}

impl<D: Device> DeviceBacking<D> {
    fn slab_at(&self, addr: usize, len: usize) -> Result<(&D::Slab, usize)> {
        let (base, slab) = self
            .slabs
            .range(..=addr)
            .next_back()
            .ok_or_else(|| self.outside(addr, len))?;
        let offset = addr - base;
        if offset.saturating_add(len) > slab.len() {
            return Err(self.outside(addr, len));
        }
        Ok((slab, offset))
    }

    fn outside(&self, addr: usize, len: usize) -> Error {
        Error::Backing {
            backend: self.device.name().to_owned(),
            reason: format!("{len} bytes at {addr:#x} are not inside one reserved region"),
        }
    }
}

impl<D: Device> DeviceBacking<D> {
    fn reserve_region(&mut self, bytes: usize) -> Result<usize> {
        // The device's limit counts the mapped pages of its ranges too.
        #[cfg(unix)]
        if let Some(mapped) = self.ranges.as_ref().map(HostRanges::mapped_bytes)
            && mapped > 0
            && let Some(free) = self.device.free_memory().ok().flatten()
            && mapped.saturating_add(bytes) > free
        {
            return Err(Error::Backing {
                backend: self.device.name().to_owned(),
                reason: format!(
                    "{bytes} bytes with {mapped} mapped: past the {free} bytes the device has left"
                ),
            });
        }
        let slab = self.device.reserve(bytes, REGION_ALIGN)?;
        let addr = slab.base() as usize;
        self.reserved += slab.len() as u64;
        self.reservations += 1;
        self.slabs.insert(addr, slab);
        Ok(addr)
    }

    fn release_region(&mut self, addr: usize) {
        if let Some(slab) = self.slabs.remove(&addr) {
            self.reserved -= slab.len() as u64;
        }
    }

    fn fill_region(&mut self, addr: usize, len: usize, byte: u8) -> Result<()> {
        #[cfg(unix)]
        if let Some(r) = self.ranges.as_ref().filter(|r| r.holds(addr)) {
            return r.fill(addr, len, byte);
        }
        const CHUNK: usize = 4096;
        let chunk = [byte; CHUNK];
        let (slab, offset) = self.slab_at(addr, len)?;
        let mut done = 0;
        while done < len {
            let n = (len - done).min(CHUNK);
            self.device.write(slab, offset + done, &chunk[..n])?;
            done += n;
        }
        Ok(())
    }

    fn read_region(&mut self, addr: usize, dst: &mut [u8]) -> Result<()> {
        #[cfg(unix)]
        if let Some(r) = self.ranges.as_ref().filter(|r| r.holds(addr)) {
            return r.read(addr, dst);
        }
        let (slab, offset) = self.slab_at(addr, dst.len())?;
        self.device.read(slab, offset, dst)?;
        Ok(())
    }
}

impl<D: Device + Send> Backing for DeviceBacking<D>
where
    D::Slab: Send,
{
    fn name(&self) -> String {
        self.device.name().to_owned()
    }
    fn reserve(&mut self, bytes: usize) -> Result<usize> {
        self.reserve_region(bytes)
    }
    fn release(&mut self, addr: usize) {
        self.release_region(addr)
    }
    fn fill(&mut self, addr: usize, len: usize, byte: u8) -> Result<()> {
        self.fill_region(addr, len, byte)
    }
    fn read(&mut self, addr: usize, dst: &mut [u8]) -> Result<()> {
        self.read_region(addr, dst)
    }
    fn free_memory(&self) -> Option<usize> {
        self.device.free_memory().ok().flatten()
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
        -1
    }
    #[cfg(unix)]
    fn map_granularity(&self) -> Option<usize> {
        self.ranges.as_ref().map(|_| super::host_range::page_size())
    }
    #[cfg(unix)]
    fn reserve_address(&mut self, bytes: usize) -> Result<usize> {
        match self.ranges.as_mut() {
            Some(r) => r.reserve(bytes),
            None => Err(super::no_ranges(
                self.device.name(),
                "reserve_address",
                bytes,
            )),
        }
    }
    #[cfg(unix)]
    fn map(&mut self, addr: usize, len: usize) -> Result<()> {
        // The host device's limit (tests' small devices) counts mapped
        // pages as it counts regions.
        let mapped = self.ranges.as_ref().map_or(0, HostRanges::mapped_bytes);
        if let Some(free) = self.device.free_memory().ok().flatten()
            && mapped.saturating_add(len) > free
        {
            return Err(Error::Backing {
                backend: self.device.name().to_owned(),
                reason: format!(
                    "map of {len} bytes with {mapped} mapped: past the {free} bytes the device has left"
                ),
            });
        }
        match self.ranges.as_mut() {
            Some(r) => r.map(addr, len)?,
            None => return Err(super::no_ranges(self.device.name(), "map", len)),
        }
        self.reserved += len as u64;
        self.reservations += 1;
        Ok(())
    }
    #[cfg(unix)]
    fn unmap(&mut self, addr: usize, len: usize) -> Result<()> {
        match self.ranges.as_mut() {
            Some(r) => r.unmap(addr, len)?,
            None => return Err(super::no_ranges(self.device.name(), "unmap", len)),
        }
        self.reserved -= len as u64;
        Ok(())
    }
    #[cfg(unix)]
    fn release_address(&mut self, base: usize) {
        if let Some(mapped) = self.ranges.as_mut().and_then(|r| r.release(base)) {
            self.reserved -= mapped as u64;
        }
    }
}

impl Backing for NpuBacking {
    fn name(&self) -> String {
        self.0.device.name().to_owned()
    }
    fn reserve(&mut self, bytes: usize) -> Result<usize> {
        // The arena's headroom rule: leave the runtime its share.
        if let Some(usable) = self.free_memory()
            && bytes > usable
        {
            return Err(Error::Backing {
                backend: self.name(),
                reason: format!(
                    "{bytes} bytes requested, {usable} usable (free memory less the {} B headroom, TENSOR_ARENA_ASCEND_HEADROOM)",
                    self.0.device.headroom()
                ),
            });
        }
        self.0.reserve_region(bytes)
    }
    fn release(&mut self, addr: usize) {
        self.0.release_region(addr)
    }
    fn fill(&mut self, addr: usize, len: usize, byte: u8) -> Result<()> {
        if self.0.device.in_reserved_range(addr) {
            return Ok(self.0.device.fill_mapped(addr, len, byte)?);
        }
        self.0.fill_region(addr, len, byte)
    }
    fn read(&mut self, addr: usize, dst: &mut [u8]) -> Result<()> {
        if self.0.device.in_reserved_range(addr) {
            return Ok(self.0.device.read_mapped(addr, dst)?);
        }
        self.0.read_region(addr, dst)
    }
    fn map_granularity(&self) -> Option<usize> {
        self.0.device.map_granularity().ok()
    }
    fn reserve_address(&mut self, bytes: usize) -> Result<usize> {
        Ok(self.0.device.reserve_address(bytes)?)
    }
    fn map(&mut self, addr: usize, len: usize) -> Result<()> {
        // The arena's headroom rule, as for whole regions: mapped memory
        // leaves the runtime its share.
        if let Some(usable) = self.free_memory()
            && len > usable
        {
            return Err(Error::Backing {
                backend: self.name(),
                reason: format!(
                    "map of {len} bytes at {addr:#x}: {usable} usable (free memory less the {} B headroom, TENSOR_ARENA_ASCEND_HEADROOM)",
                    self.0.device.headroom()
                ),
            });
        }
        self.0.device.map(addr, len)?;
        self.0.reserved += len as u64;
        self.0.reservations += 1;
        Ok(())
    }
    fn unmap(&mut self, addr: usize, len: usize) -> Result<()> {
        self.0.device.unmap(addr, len)?;
        self.0.reserved -= len as u64;
        Ok(())
    }
    fn release_address(&mut self, base: usize) {
        // A failure leaves the range to the device's drop, which unmaps and
        // releases what it still holds; the policy cannot act on it.
        if let Ok(Some(mapped)) = self.0.device.release_address(base) {
            self.0.reserved -= mapped as u64;
        }
    }
    fn free_memory(&self) -> Option<usize> {
        let (free, _) = self.0.device.mem_info().ok()?;
        Some(free.saturating_sub(self.0.device.headroom()))
    }
    fn total_memory(&self) -> Option<usize> {
        self.0.total
    }
    fn reservations(&self) -> u64 {
        self.0.reservations
    }
    fn reserved_bytes(&self) -> u64 {
        self.0.reserved
    }
    fn device(&self) -> i32 {
        self.0.device.id()
    }
    fn record_event(&mut self, stream: usize) -> Result<usize> {
        // SAFETY: `stream` is the `aclrtStream` torch_npu passed for a live
        // stream of this device (0: the default stream).
        Ok(unsafe { self.0.device.record_event(stream as *mut std::ffi::c_void) }?)
    }
    fn event_done(&mut self, event: usize) -> Result<bool> {
        // SAFETY: `event` came from record_event above and is not destroyed
        // yet (the allocator destroys each event once, after its last query).
        Ok(unsafe { self.0.device.event_done(event) }?)
    }
    fn destroy_event(&mut self, event: usize) {
        // SAFETY: as above; destroyed once.
        let _ = unsafe { self.0.device.destroy_event(event) };
    }
}

/// `MemTotal` of /proc/meminfo, where there is one.
fn host_memory_total() -> Option<usize> {
    let text = std::fs::read_to_string(Path::new("/proc/meminfo")).ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}
