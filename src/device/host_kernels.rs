//! Running the reference kernels on the host device: regions to slices,
//! CPU-feature dispatch, and optional threads.

use super::host::{HostDevice, HostSlab};
use super::launch_checks::check_launch;
use super::{Device, Kernels, Region, Slab};
use crate::dtype::DType;
use crate::error::Result;
use crate::ops::cpu_dispatch::{run, run_bytes, run_writing_bits};
use crate::ops::{Float, Kernel, Operand};
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
            DType::U8 => {
                self.run_bytes(slab, kernel, x);
                Ok(())
            }
            // Refused by `check_launch`.
            DType::I32 => Ok(()),
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
        if let (true, Some(bits)) = (kernel.writes_operand(), other) {
            self.run_writing_bits::<T>(slab, kernel, x, bits);
            return Ok(());
        }
        let m = kernel.operand_len(n);
        // SAFETY: both regions lie inside the live slab and are 64-byte
        // aligned (checked above), which covers `T`'s alignment; `other`
        // holds `kernel.operand_len(n)` elements of its type, `T` or (for
        // u8 and bit masks) bytes (checked above). The slab holds
        // initialised host memory and `T: Pod` and `u8` accept any bits.
        // The two regions do not overlap (checked above), and the caller (a
        // lease method) holds the leases of both buffers, the written one
        // exclusively, so no other reference to these bytes is live.
        let (xs, operand) = unsafe {
            let xs = std::slice::from_raw_parts_mut(base.add(x.offset).cast::<T>(), n);
            let operand = match other {
                None => Operand::None,
                Some(o) => match kernel {
                    Kernel::ApplyMaskU8 { .. } => {
                        Operand::Mask(std::slice::from_raw_parts(base.add(o.offset), m))
                    }
                    Kernel::ApplyBits { .. } => {
                        Operand::Bits(std::slice::from_raw_parts(base.add(o.offset), m))
                    }
                    _ => Operand::Same(std::slice::from_raw_parts(
                        base.add(o.offset).cast::<T>(),
                        m,
                    )),
                },
            };
            (xs, operand)
        };
        self.in_parts(xs, |xc, pos| {
            run(kernel, xc, part_of(operand, pos, xc.len()), pos)
        });
        Ok(())
    }

    /// A kernel that writes its bit-mask operand as well as `x`
    /// ([`Kernel::DropoutBits`]); chunks of `x` write their own bytes.
    fn run_writing_bits<T: Float>(
        &self,
        slab: &HostSlab,
        kernel: &Kernel,
        x: Region,
        bits: Region,
    ) {
        let n = x.len / std::mem::size_of::<T>();
        let base = slab.base();
        // SAFETY: as in `run_typed`: `x` holds `n` elements of `T` inside
        // the live, initialised slab, aligned, not overlapping `bits`, and
        // the caller holds its lease exclusively.
        let xs = unsafe { std::slice::from_raw_parts_mut(base.add(x.offset).cast::<T>(), n) };
        let bits = SendPtr(base.wrapping_add(bits.offset));
        self.in_parts(xs, |xc, pos| {
            let (first, end) = (pos / 8, (pos + xc.len()).div_ceil(8));
            // SAFETY: `bits` holds `ceil(n / 8)` bytes inside the slab
            // (checked by `check_launch`), and `first..end` lies within
            // them. Parts start at multiples of CHUNK_ALIGN (64) elements,
            // so each owns whole bytes and no two parts' ranges overlap;
            // the caller holds the bit mask's lease exclusively, so no other
            // reference to these bytes is live while the launch runs.
            let b = unsafe { std::slice::from_raw_parts_mut(bits.get().add(first), end - first) };
            run_writing_bits(kernel, xc, b, pos)
        });
    }

    /// Bernoulli into a u8 mask (the only kernel that writes u8; others are
    /// refused by `check_launch`).
    fn run_bytes(&self, slab: &HostSlab, kernel: &Kernel, x: Region) {
        // SAFETY: the region lies inside the live slab (checked by
        // `check_launch`), which holds initialised host memory; the caller
        // holds the buffer's lease exclusively, so this is the only
        // reference to these bytes.
        let xs = unsafe { std::slice::from_raw_parts_mut(slab.base().add(x.offset), x.len) };
        self.in_parts(xs, |xc, pos| run_bytes(kernel, xc, pos));
    }

    /// Runs `f(chunk, position)` over `xs`: on the calling thread, or, for
    /// large calls with workers, in disjoint chunks on the worker threads.
    fn in_parts<E: Send + Copy>(&self, xs: &mut [E], f: impl Fn(&mut [E], usize) + Sync) {
        let n = xs.len();
        match self.workers() {
            Some(workers) if n >= PARALLEL_THRESHOLD => {
                let parts = workers.parts();
                let chunk = n.div_ceil(parts).next_multiple_of(CHUNK_ALIGN);
                let xs_base = SendPtr(xs.as_mut_ptr());
                workers.run(&|part| {
                    let pos = (part * chunk).min(n);
                    let len = chunk.min(n - pos);
                    // SAFETY: parts cover disjoint ranges `pos..pos + len`
                    // of `xs` (part * chunk, clamped to n), so each mutable
                    // sub-slice is unique; `xs` outlives `run`, which
                    // returns only after every part has finished.
                    let xc = unsafe { std::slice::from_raw_parts_mut(xs_base.get().add(pos), len) };
                    f(xc, pos);
                });
            }
            _ => f(xs, 0),
        }
    }
}

/// Elements `pos..pos + len` of a second operand.
fn part_of<T>(o: Operand<'_, T>, pos: usize, len: usize) -> Operand<'_, T> {
    match o {
        Operand::None => Operand::None,
        Operand::Same(v) => Operand::Same(&v[pos..pos + len]),
        Operand::Mask(m) => Operand::Mask(&m[pos..pos + len]),
        // Parts start at multiples of 64 elements: whole bytes.
        Operand::Bits(b) => Operand::Bits(&b[pos / 8..(pos + len).div_ceil(8)]),
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
