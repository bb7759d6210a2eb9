//! Running the reference kernels on the host device: regions to slices,
//! CPU-feature dispatch, and optional threads.

use super::host::{HostDevice, HostSlab};
use super::launch_checks::check_launch;
use super::{Device, Kernels, Region, Slab};
use crate::dtype::DType;
use crate::error::Result;
use crate::ops::cpu_dispatch::run;
use crate::ops::{Float, Kernel};
use half::{bf16, f16};

/// Below this many elements a kernel runs on the calling thread: handing
/// work to other threads costs more than it saves.
pub const PARALLEL_THRESHOLD: usize = 1 << 16;

/// Chunks handed to threads are multiples of this many elements (whole
/// Philox tiles, whole cache lines).
const CHUNK_ALIGN: usize = 64;

impl Kernels for HostDevice {
    fn launch(
        &self,
        slab: &HostSlab,
        kernel: &Kernel,
        dtype: DType,
        x: Region,
        other: Option<Region>,
    ) -> Result<()> {
        let other = check_launch(self.name(), slab.len(), kernel, dtype, x, other)?;
        match dtype {
            DType::F32 => self.run_typed::<f32>(slab, kernel, x, other),
            DType::F16 => self.run_typed::<f16>(slab, kernel, x, other),
            DType::BF16 => self.run_typed::<bf16>(slab, kernel, x, other),
            // Refused by `check_launch`.
            DType::I32 | DType::U8 => Ok(()),
        }
    }
}

impl HostDevice {
    fn run_typed<T: Float>(
        &self,
        slab: &HostSlab,
        kernel: &Kernel,
        x: Region,
        other: Option<Region>,
    ) -> Result<()> {
        let n = x.len / std::mem::size_of::<T>();
        let base = slab.base();
        // SAFETY: both regions lie inside the live slab and are 64-byte
        // aligned (checked above), which covers `T`'s alignment; the slab
        // holds initialised host memory and `T: Pod` accepts any bits. The
        // two regions do not overlap (checked above), and the caller (a
        // lease method) holds the leases of both buffers, the written one
        // exclusively, so no other reference to these bytes is live.
        let (xs, os) = unsafe {
            let xs = std::slice::from_raw_parts_mut(base.add(x.offset).cast::<T>(), n);
            let os = other
                .map(|o| std::slice::from_raw_parts(base.add(o.offset).cast::<T>(), n) as &[T]);
            (xs, os)
        };
        match self.workers() {
            Some(workers) if n >= PARALLEL_THRESHOLD => {
                let parts = workers.parts();
                let chunk = n.div_ceil(parts).next_multiple_of(CHUNK_ALIGN);
                let (xs_base, os) = (SendPtr(xs.as_mut_ptr()), os);
                workers.run(&|part| {
                    let pos = (part * chunk).min(n);
                    let len = chunk.min(n - pos);
                    // SAFETY: parts cover disjoint ranges `pos..pos + len`
                    // of `xs` (part * chunk, clamped to n), so each mutable
                    // sub-slice is unique; `xs` outlives `run`, which
                    // returns only after every part has finished.
                    let xc = unsafe { std::slice::from_raw_parts_mut(xs_base.get().add(pos), len) };
                    let oc = os.map(|o| &o[pos..pos + len]);
                    run(kernel, xc, oc, pos);
                });
            }
            _ => run(kernel, xs, os, 0),
        }
        Ok(())
    }
}

/// A raw pointer that may cross to the worker threads.
#[derive(Clone, Copy)]
struct SendPtr<T>(*mut T);

impl<T> SendPtr<T> {
    fn get(self) -> *mut T {
        self.0
    }
}

// SAFETY: the pointer is only used to build disjoint sub-slices, one per
// part, while the owning slice is borrowed by the launching call (see
// `run_typed`); `T: Send` elements may be written from other threads.
unsafe impl<T: Send> Sync for SendPtr<T> {}
