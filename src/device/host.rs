//! The host device: the slab is zeroed host memory from `std::alloc`.

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::workers::Workers;
use super::{Device, DeviceCounters, HostAccessible, Slab};
use crate::error::{Available, Error, Result};

/// Slabs of at least this size are backed by 2 MiB pages where possible.
pub const HUGE_PAGE: usize = 2 << 20;

/// Asks the kernel to back `len` bytes at `ptr` with transparent huge pages.
/// Advice only: where it is refused or unsupported, small pages serve.
#[cfg(target_os = "linux")]
fn advise_huge_pages(ptr: NonNull<u8>, len: usize) {
    // SAFETY: `ptr..ptr + len` is one live allocation owned by the caller,
    // aligned to HUGE_PAGE (a multiple of the page size); MADV_HUGEPAGE
    // changes how pages are backed, never their contents or mapping.
    let _ = unsafe { libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_HUGEPAGE) };
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_ptr: NonNull<u8>, _len: usize) {}

/// The host (CPU) device, the crate's default backend.
///
/// ```
/// use tensor_arena::{Device, HostDevice};
/// let dev = HostDevice::with_limit(1 << 20);
/// assert_eq!(dev.free_memory()?, Some(1 << 20));
/// assert!(dev.reserve(2 << 20, 512).is_err());
/// # Ok::<(), tensor_arena::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct HostDevice {
    limit: Option<usize>,
    counters: Arc<Counters>,
    /// Worker threads for large kernels; `None` runs everything on the
    /// calling thread.
    workers: Option<Arc<Workers>>,
}

#[derive(Debug, Default)]
struct Counters {
    alloc_calls: AtomicU64,
    free_calls: AtomicU64,
    failed_allocs: AtomicU64,
    bytes_in_use: AtomicU64,
    peak_bytes: AtomicU64,
}

impl HostDevice {
    /// A host device limited only by the machine.
    pub fn new() -> HostDevice {
        HostDevice::default()
    }

    /// A host device that behaves as if it had `bytes` of memory, to test
    /// out-of-memory handling or model a smaller device.
    pub fn with_limit(bytes: usize) -> HostDevice {
        HostDevice {
            limit: Some(bytes),
            ..HostDevice::default()
        }
    }

    /// The same device running kernels of at least
    /// [`PARALLEL_THRESHOLD`](crate::device::PARALLEL_THRESHOLD) elements on
    /// `threads` worker threads (created now, once). Results are bit-identical
    /// to one thread. `threads <= 1` means no workers.
    pub fn with_threads(mut self, threads: usize) -> Result<HostDevice> {
        self.workers = if threads <= 1 {
            None
        } else {
            Some(Arc::new(Workers::new(threads)?))
        };
        Ok(self)
    }

    /// Threads kernels may use (1 without workers).
    pub fn threads(&self) -> usize {
        self.workers.as_ref().map_or(1, |w| w.parts())
    }

    pub(crate) fn workers(&self) -> Option<&Workers> {
        self.workers.as_deref()
    }

    fn in_use(&self) -> usize {
        usize::try_from(self.counters.bytes_in_use.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
    }

    fn oom(&self, needed: usize, available: Available) -> Error {
        self.counters.failed_allocs.fetch_add(1, Ordering::Relaxed);
        Error::OutOfMemory {
            device: self.name().to_owned(),
            needed,
            available,
        }
    }

    fn check_range(
        &self,
        slab: &HostSlab,
        offset: usize,
        len: usize,
        op: &'static str,
    ) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= slab.layout.size() => Ok(()),
            _ => Err(Error::Device {
                device: self.name().to_owned(),
                operation: op,
                message: format!(
                    "range {offset}+{len} is outside the {}-byte slab",
                    slab.layout.size()
                ),
            }),
        }
    }
}

impl Device for HostDevice {
    type Slab = HostSlab;

    fn name(&self) -> &str {
        "host"
    }

    fn free_memory(&self) -> Result<Option<usize>> {
        Ok(self.limit.map(|l| l.saturating_sub(self.in_use())))
    }

    fn reserve(&self, bytes: usize, align: usize) -> Result<HostSlab> {
        if let Some(free) = self.free_memory()?
            && bytes > free
        {
            return Err(self.oom(bytes, Available::Free(free)));
        }
        let huge = bytes >= HUGE_PAGE;
        // Large slabs get 2 MiB pages where the OS allows it (as ACL's
        // HUGE_FIRST policy does on the device): rounded up to whole huge
        // pages, aligned to one, so sweeping kernels miss the TLB less.
        let (size, align) = if huge {
            (
                bytes.div_ceil(HUGE_PAGE).saturating_mul(HUGE_PAGE),
                align.max(HUGE_PAGE),
            )
        } else {
            (bytes.max(1), align)
        };
        let layout = Layout::from_size_align(size, align)
            .map_err(|_| self.oom(bytes, Available::Unknown))?;
        let ptr = if huge {
            // SAFETY: `layout` has a non-zero size (at least HUGE_PAGE).
            let raw = unsafe { std::alloc::alloc(layout) };
            let ptr = NonNull::new(raw).ok_or_else(|| self.oom(bytes, Available::Unknown))?;
            advise_huge_pages(ptr, layout.size());
            // SAFETY: `ptr` points to `layout.size()` writable bytes just
            // allocated; zeroing them initialises the slab (and, after the
            // advice, faults it in as huge pages).
            unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, layout.size()) };
            ptr
        } else {
            // SAFETY: `layout` has a non-zero size (`max(1)` above).
            let raw = unsafe { std::alloc::alloc_zeroed(layout) };
            NonNull::new(raw).ok_or_else(|| self.oom(bytes, Available::Unknown))?
        };
        let c = &self.counters;
        c.alloc_calls.fetch_add(1, Ordering::Relaxed);
        let now = c
            .bytes_in_use
            .fetch_add(layout.size() as u64, Ordering::Relaxed)
            + layout.size() as u64;
        c.peak_bytes.fetch_max(now, Ordering::Relaxed);
        Ok(HostSlab {
            ptr,
            layout,
            counters: Arc::clone(&self.counters),
        })
    }

    fn write(&self, slab: &HostSlab, offset: usize, src: &[u8]) -> Result<()> {
        self.check_range(slab, offset, src.len(), "write")?;
        // SAFETY: the range is inside the slab (checked above) and the slab
        // is live while `&HostSlab` is. No reference into these bytes can be
        // live elsewhere: an arena never exposes its slab, and it only
        // copies into ranges it holds exclusively (`&mut` arena or lease).
        // `copy` tolerates `src` overlapping the destination.
        unsafe {
            std::ptr::copy(src.as_ptr(), slab.ptr.as_ptr().add(offset), src.len());
        }
        Ok(())
    }

    fn read(&self, slab: &HostSlab, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check_range(slab, offset, dst.len(), "read")?;
        // SAFETY: the range is inside the live slab (checked above); `copy`
        // tolerates overlap, and `dst` is a unique borrow so nothing else
        // writes it meanwhile.
        unsafe {
            std::ptr::copy(slab.ptr.as_ptr().add(offset), dst.as_mut_ptr(), dst.len());
        }
        Ok(())
    }

    fn reserve_rounding(&self) -> &'static str {
        "the host device backs slabs of 2 MiB or more with whole 2 MiB pages"
    }

    fn counters(&self) -> DeviceCounters {
        let c = &self.counters;
        DeviceCounters {
            alloc_calls: c.alloc_calls.load(Ordering::Relaxed),
            free_calls: c.free_calls.load(Ordering::Relaxed),
            failed_allocs: c.failed_allocs.load(Ordering::Relaxed),
            bytes_in_use: c.bytes_in_use.load(Ordering::Relaxed),
            peak_bytes: c.peak_bytes.load(Ordering::Relaxed),
        }
    }
}

// SAFETY: `reserve` returns zero-filled memory from the global allocator,
// `len()` bytes long, aligned to the requested power of two, owned by the
// slab until it is dropped.
unsafe impl HostAccessible for HostDevice {}

/// A slab of host memory. Frees itself on drop.
#[derive(Debug)]
pub struct HostSlab {
    ptr: NonNull<u8>,
    layout: Layout,
    counters: Arc<Counters>,
}

// SAFETY: the slab uniquely owns its allocation; the raw pointer is only an
// address, and moving ownership to another thread is as safe as moving a
// `Vec<u8>`.
unsafe impl Send for HostSlab {}

impl Slab for HostSlab {
    fn base(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    fn len(&self) -> usize {
        self.layout.size()
    }
}

impl Drop for HostSlab {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `alloc_zeroed(self.layout)` and is freed
        // exactly once, here.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
        self.counters.free_calls.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes_in_use
            .fetch_sub(self.layout.size() as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_is_aligned_zeroed_and_counted() {
        let dev = HostDevice::new();
        let slab = dev.reserve(4096, 512).unwrap();
        assert_eq!(slab.base() as usize % 512, 0);
        let mut out = [1u8; 64];
        dev.read(&slab, 4000, &mut out[..96 - 64]).unwrap();
        assert!(out[..32].iter().all(|&b| b == 0));
        assert_eq!(dev.counters().alloc_calls, 1);
        assert_eq!(dev.counters().bytes_in_use, 4096);
        drop(slab);
        assert_eq!(dev.counters().free_calls, 1);
        assert_eq!(dev.counters().bytes_in_use, 0);
    }

    #[test]
    fn copies_are_bounds_checked() {
        let dev = HostDevice::new();
        let slab = dev.reserve(128, 64).unwrap();
        dev.write(&slab, 100, &[7; 28]).unwrap();
        let mut back = [0; 28];
        dev.read(&slab, 100, &mut back).unwrap();
        assert_eq!(back, [7; 28]);
        assert!(dev.write(&slab, 101, &[0; 28]).is_err());
        assert!(dev.read(&slab, usize::MAX, &mut back).is_err());
    }

    #[test]
    fn limit_reports_needed_and_free() {
        let dev = HostDevice::with_limit(1000);
        let err = dev.reserve(2000, 64).unwrap_err();
        assert_eq!(
            err,
            Error::OutOfMemory {
                device: "host".into(),
                needed: 2000,
                available: Available::Free(1000)
            }
        );
        assert_eq!(dev.counters().failed_allocs, 1);
        assert_eq!(dev.counters().alloc_calls, 0);
    }
}
