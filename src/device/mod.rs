//! Devices: where the slab lives.
//!
//! A device reserves and frees the one slab, copies bytes between host and
//! slab, and reports its allocation counters. It knows regions (offset and
//! length in the slab), not buffer specs, so the arena, leases and tests are
//! the same on every backend.
//!
//! The crate denies `unsafe` at its root; the submodules below that need it
//! allow it one by one, each with the reason.

// FFI fenced module by module inside (see its `mod` list).
pub mod ascend;
// The host slab: raw allocation (2 MiB pages where the OS has them), and
// the `HostAccessible` promise.
#[allow(unsafe_code)]
mod host;
// Regions of the slab turned into slices for the reference kernels.
#[allow(unsafe_code)]
mod host_kernels;
mod launch_checks;
// Worker threads that borrow slab chunks for the length of one launch.
#[allow(unsafe_code)]
mod workers;

pub use host::{HostDevice, HostSlab};
pub use host_kernels::PARALLEL_THRESHOLD;

use crate::dtype::DType;
use crate::error::Result;
use crate::ops::Kernel;

/// A byte range of the slab.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Region {
    /// Offset from the slab start.
    pub offset: usize,
    /// Length in bytes.
    pub len: usize,
}

/// Counters a device keeps about its own allocations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceCounters {
    /// Successful allocation calls (one per arena).
    pub alloc_calls: u64,
    /// Free calls.
    pub free_calls: u64,
    /// Allocation calls that failed.
    pub failed_allocs: u64,
    /// Bytes currently allocated.
    pub bytes_in_use: u64,
    /// Highest `bytes_in_use` seen.
    pub peak_bytes: u64,
}

/// The one allocation a device hands to an arena. Dropping it frees it.
pub trait Slab {
    /// Device address of the first byte (not dereferenceable on the host
    /// unless the device is [`HostAccessible`]).
    fn base(&self) -> *mut u8;
    /// Length in bytes.
    fn len(&self) -> usize;
    /// Whether the slab is empty (never, for slabs made by an arena).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A memory space an arena can reserve its slab in.
pub trait Device {
    /// The slab type this device allocates.
    type Slab: Slab;

    /// Short name for reports and errors (`host`, `ascend:0`).
    fn name(&self) -> &str;

    /// Smallest offset alignment the device accepts for the slab start.
    fn min_alignment(&self) -> usize {
        64
    }

    /// Free bytes, if the device can tell.
    fn free_memory(&self) -> Result<Option<usize>>;

    /// Reserves `bytes` aligned to `align` (a power of two). Contents are
    /// zero-filled where the device can do so cheaply.
    fn reserve(&self, bytes: usize, align: usize) -> Result<Self::Slab>;

    /// Copies `src` into the slab at `offset`.
    fn write(&self, slab: &Self::Slab, offset: usize, src: &[u8]) -> Result<()>;

    /// Copies slab bytes at `offset` into `dst`.
    fn read(&self, slab: &Self::Slab, offset: usize, dst: &mut [u8]) -> Result<()>;

    /// Allocation counters.
    fn counters(&self) -> DeviceCounters;

    /// Why a slab this device reserves may be larger than the bytes asked
    /// for, in words for reports (`memory_summary()`); empty when it never
    /// is.
    fn reserve_rounding(&self) -> &'static str {
        ""
    }
}

/// A device whose slab is ordinary host memory, so leases can hand out
/// slices and ndarray views.
///
/// # Safety
/// Implementors guarantee that `Slab::base()` of every slab they return
/// points to `len()` bytes of initialised host memory, aligned as requested,
/// valid for reads and writes until the slab is dropped, and accessed by
/// nothing but the holder of the slab.
// Declaring the promise is `unsafe`; keeping it is each implementor's job.
#[allow(unsafe_code)]
pub unsafe trait HostAccessible: Device {}

/// A device that runs the crate's in-place kernels ([`Kernel`]) on slab
/// regions. Every backend must produce the host reference's bits.
pub trait Kernels: Device {
    /// Runs `kernel` on the elements of `dtype` in region `x` of `slab`,
    /// reading region `other` for two-operand kernels. The regions must lie
    /// in the slab, be aligned, have equal lengths and not overlap;
    /// violations are errors, never undefined behaviour.
    fn launch(
        &self,
        slab: &Self::Slab,
        kernel: &Kernel,
        dtype: DType,
        x: Region,
        other: Option<Region>,
    ) -> Result<()>;
}
