//! The arena: one slab reserved once, leased every step.
#![deny(unsafe_code)]

// `Lease::tensor` and `Step::aclnn` for the Ascend backend.
mod ascend_ops;
mod book;
mod checked;
// Leases as slices and ndarray views of host-accessible slabs.
#[allow(unsafe_code)]
mod host_view;
mod lease;
// The owned, token-based lease book for language bindings.
mod lease_book;
mod lease_kernels;
mod scope;
mod stats;
mod step;

pub use crate::error::GuardViolation;
pub use checked::{ArenaOptions, GUARD_BYTE, POISON_BYTE};
pub use lease::Lease;
pub use lease_book::{Ended, Granted, LeaseBook, LeaseToken, StepToken};
pub use lease_kernels::{DropoutBitMask, DropoutMask};
pub use scope::{LeaseOf, LeaseOps, Leases, Planned, StepScope};
pub use stats::ArenaStats;
pub use step::Step;
pub(crate) use step::persistent_by_name;

use std::cell::{Cell, RefCell};

use book::Book;

use crate::device::{Device, Slab};
use crate::dtype::Element;
use crate::error::{Available, Error, Result};
use crate::ops::RngState;
use crate::plan::{Buffer, BufferId, Mode, Plan};

/// Owns a plan, the one slab that holds it, and the lease state.
///
/// ```
/// use tensor_arena::{Arena, HostDevice, Planner};
/// let mut planner = Planner::new();
/// let x = planner.step::<f32>("x", &[4, 100])?;
/// let mut arena = Arena::new(HostDevice::new(), planner.plan()?)?;
/// for batch in [4, 4, 3] {
///     arena.step(|s| {
///         let mut x = s.lease(x)?;
///         x.set_shape(&[batch, 100])?;
///         x.as_mut_slice().fill(1.0);
///         Ok::<_, tensor_arena::Error>(())
///     })?;
/// }
/// assert_eq!(arena.stats().device.alloc_calls, 1);
/// # Ok::<(), tensor_arena::Error>(())
/// ```
pub struct Arena<D: Device> {
    // Field order is drop order: the slab goes back before the device.
    pub(crate) slab: D::Slab,
    pub(crate) device: D,
    pub(crate) plan: Plan,
    pub(crate) book: Book,
    /// Where the next random op reads the Philox stream.
    pub(crate) rng: Cell<RngState>,
    pub(crate) options: ArenaOptions,
    /// Checked mode: guard damage found so far.
    pub(crate) violations: RefCell<Vec<GuardViolation>>,
}

impl<D: Device> Arena<D> {
    /// Reserves the plan's slab on `device` with one allocation, with the
    /// options of the environment ([`ArenaOptions::from_env`]: checked mode
    /// when `TENSOR_ARENA_CHECKED=1`).
    ///
    /// Fails with [`Error::OutOfMemory`], naming needed and free bytes, if
    /// the device reports less free memory than the plan needs; nothing is
    /// allocated in that case.
    pub fn new(device: D, plan: Plan) -> Result<Arena<D>> {
        Arena::with_options(device, plan, ArenaOptions::from_env())
    }

    /// [`Arena::new`] with explicit options, whatever the environment says,
    /// such as checked mode ([`ArenaOptions::checked`]): guard bytes
    /// verified after every lease and step-scoped buffers poisoned when
    /// their lease ends; [`ArenaOptions::default`] for neither.
    pub fn with_options(device: D, plan: Plan, options: ArenaOptions) -> Result<Arena<D>> {
        let needed = plan.slab_bytes();
        if let Some(free) = device.free_memory()?
            && needed > free
        {
            return Err(Error::OutOfMemory {
                device: device.name().to_owned(),
                needed,
                available: Available::Free(free),
            });
        }
        let align = plan.offset_align().max(device.min_alignment());
        let slab = device.reserve(needed, align)?;
        debug_assert!(slab.len() >= needed);
        let book = Book::new(&plan);
        let arena = Arena {
            slab,
            device,
            plan,
            book,
            rng: Cell::new(RngState::default()),
            options,
            violations: RefCell::new(Vec::new()),
        };
        if options.checked {
            arena.arm_all();
        }
        Ok(arena)
    }

    /// Opens a step of the default mode and runs `f` in it. Leases made in
    /// `f` cannot escape it.
    pub fn step<R>(&mut self, f: impl FnOnce(&Step<'_, D>) -> R) -> R {
        let step = self.begin_step();
        f(&step)
    }

    /// Opens a step of `mode` and runs `f` in it: only persistent buffers
    /// and the mode's own buffers can be leased, and only its phases
    /// entered. Fails with [`Error::ForeignMode`] if `mode` comes from
    /// another planner.
    ///
    /// ```
    /// use tensor_arena::{Arena, HostDevice, Planner};
    /// let mut p = Planner::new();
    /// let eval = p.mode("eval")?;
    /// let x = p.step_in::<f32>(eval, "x", &[256, 32])?;
    /// let mut arena = Arena::new(HostDevice::new(), p.plan()?)?;
    /// let n = arena.step_in(eval, |s| {
    ///     let x = s.lease(x)?;
    ///     Ok::<_, tensor_arena::Error>(x.len())
    /// })?;
    /// assert_eq!(n, 256 * 32);
    /// # Ok::<(), tensor_arena::Error>(())
    /// ```
    pub fn step_in<R, E: From<Error>>(
        &mut self,
        mode: Mode,
        f: impl FnOnce(&Step<'_, D>) -> std::result::Result<R, E>,
    ) -> std::result::Result<R, E> {
        let step = self.begin_step_in(mode)?;
        f(&step)
    }

    /// Opens a step of the default mode held by a guard; the step ends
    /// when the guard drops.
    pub fn begin_step(&mut self) -> Step<'_, D> {
        self.open(0)
    }

    /// Opens a step of `mode` held by a guard (see [`Arena::step_in`]).
    pub fn begin_step_in(&mut self, mode: Mode) -> Result<Step<'_, D>> {
        let mode = book::mode_index(&self.plan, mode, "arena")?;
        Ok(self.open(mode))
    }

    /// Opens a step of mode index `mode` (checked by the callers).
    pub(crate) fn open(&mut self, mode: u16) -> Step<'_, D> {
        self.book.open(&self.plan, mode);
        self.book.clear_leaked();
        Step { arena: self }
    }

    /// Copies `data` into a buffer, outside any step (to load weights,
    /// say). `data` must hold exactly the buffer's declared shape;
    /// [`write_prefix`](Arena::write_prefix) copies fewer elements on
    /// purpose.
    ///
    /// ```
    /// use tensor_arena::{Arena, Error, HostDevice, Planner};
    /// let mut p = Planner::new();
    /// let w = p.persistent::<f32>("w", &[64, 64])?;
    /// let mut arena = Arena::new(HostDevice::new(), p.plan()?)?;
    /// assert!(matches!(arena.write(w, &[1.0; 10]), Err(Error::CopyLength { .. })));
    /// arena.write(w, &vec![1.0; 64 * 64])?;
    /// arena.write_prefix(w, &[2.0; 10])?; // the first 10 elements only
    /// # Ok::<(), tensor_arena::Error>(())
    /// ```
    pub fn write<T: Element>(&mut self, buffer: Buffer<T>, data: &[T]) -> Result<()> {
        let offset = self.check_exact("write", buffer, data.len())?;
        self.device
            .write(&self.slab, offset, bytemuck::cast_slice(data))
    }

    /// Copies `data` into the first `data.len()` elements of a buffer,
    /// outside any step: a partial [`write`](Arena::write), up to the
    /// buffer's (padded) capacity.
    pub fn write_prefix<T: Element>(&mut self, buffer: Buffer<T>, data: &[T]) -> Result<()> {
        let offset = self.check_copy(buffer, data.len())?;
        self.device
            .write(&self.slab, offset, bytemuck::cast_slice(data))
    }

    /// Copies a buffer into `out`, outside any step. `out` must hold
    /// exactly the buffer's declared shape; see
    /// [`read_prefix`](Arena::read_prefix).
    pub fn read<T: Element>(&mut self, buffer: Buffer<T>, out: &mut [T]) -> Result<()> {
        let offset = self.check_exact("read", buffer, out.len())?;
        self.device
            .read(&self.slab, offset, bytemuck::cast_slice_mut(out))
    }

    /// Copies the first `out.len()` elements of a buffer into `out`,
    /// outside any step: a partial [`read`](Arena::read), up to the
    /// capacity.
    pub fn read_prefix<T: Element>(&mut self, buffer: Buffer<T>, out: &mut [T]) -> Result<()> {
        let offset = self.check_copy(buffer, out.len())?;
        self.device
            .read(&self.slab, offset, bytemuck::cast_slice_mut(out))
    }

    /// Copies raw bytes into the start of buffer `id`, outside any step:
    /// the untyped [`Arena::write_prefix`], for tools that move buffers
    /// whatever their element type (checkpoints, the recorder). `bytes`
    /// may be shorter than the buffer's capacity, never longer.
    ///
    /// ```
    /// use tensor_arena::{Arena, HostDevice, Planner};
    /// let mut p = Planner::new();
    /// let w = p.persistent::<f32>("w", &[4])?;
    /// let mut arena = Arena::new(HostDevice::new(), p.plan()?)?;
    /// arena.write_bytes(w.id(), bytemuck::cast_slice(&[1.5f32, 2.5]))?;
    /// let mut back = [0u8; 8];
    /// arena.read_bytes(w.id(), &mut back)?;
    /// assert_eq!(bytemuck::cast_slice::<u8, f32>(&back), [1.5, 2.5]);
    /// # Ok::<(), tensor_arena::Error>(())
    /// ```
    pub fn write_bytes(&mut self, id: BufferId, bytes: &[u8]) -> Result<()> {
        let offset = self.check_byte_copy(id, bytes.len())?;
        self.device.write(&self.slab, offset, bytes)
    }

    /// Copies the first `out.len()` bytes of buffer `id` into `out`,
    /// outside any step (a step borrows the arena exclusively): the untyped
    /// [`Arena::read`].
    pub fn read_bytes(&self, id: BufferId, out: &mut [u8]) -> Result<()> {
        let offset = self.check_byte_copy(id, out.len())?;
        self.device.read(&self.slab, offset, out)
    }

    fn check_byte_copy(&self, id: BufferId, len: usize) -> Result<usize> {
        let size = self.plan.buffer(id)?.dtype().size();
        self.check_elements(id, len.div_ceil(size))
    }

    fn check_exact<T: Element>(
        &self,
        op: &'static str,
        buffer: Buffer<T>,
        elements: usize,
    ) -> Result<usize> {
        let b = self.plan.buffer(buffer.id)?;
        if elements != b.shape().elements() {
            return Err(Error::CopyLength {
                op,
                buffer: b.name().to_owned(),
                given: elements,
                expected: b.shape().elements(),
                shape: b.shape().to_vec(),
            });
        }
        Ok(b.offset())
    }

    fn check_copy<T: Element>(&self, buffer: Buffer<T>, elements: usize) -> Result<usize> {
        self.check_elements(buffer.id, elements)
    }

    /// The buffer's slab offset, if `elements` fit its capacity.
    fn check_elements(&self, id: BufferId, elements: usize) -> Result<usize> {
        let b = self.plan.buffer(id)?;
        if elements > b.capacity() {
            return Err(Error::ViewTooLarge {
                buffer: b.name().to_owned(),
                shape: vec![elements],
                elements,
                capacity: b.capacity(),
                padded: b.padded_shape().to_vec(),
            });
        }
        Ok(b.offset())
    }

    /// Restarts the random stream at element 0 of `seed`.
    pub fn set_seed(&mut self, seed: u64) {
        self.rng.set(RngState::new(seed));
    }

    /// Where the next random op will read the stream. Save it with a
    /// checkpoint and restore it with [`Arena::set_rng_state`] to draw the
    /// same masks after a resume.
    pub fn rng_state(&self) -> RngState {
        self.rng.get()
    }

    /// Restores a saved random-stream position.
    pub fn set_rng_state(&mut self, state: RngState) {
        self.rng.set(state);
    }

    /// The options the arena was made with.
    pub fn options(&self) -> ArenaOptions {
        self.options
    }

    /// Checked mode: verifies the persistent buffers' guards, then reports
    /// the first guard violation found since the last
    /// [`take_violations`](Arena::take_violations), if any.
    pub fn verify(&mut self) -> Result<()> {
        if self.options.checked {
            self.check_persistent();
        }
        match self.violations.borrow().first() {
            Some(v) => Err(Error::GuardViolation(Box::new(v.clone()))),
            None => Ok(()),
        }
    }

    /// Checked mode: every guard violation found so far, clearing the list.
    pub fn take_violations(&mut self) -> Vec<GuardViolation> {
        std::mem::take(self.violations.get_mut())
    }

    /// The plan this arena holds.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The device.
    pub fn device(&self) -> &D {
        &self.device
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> ArenaStats {
        book_stats(
            &self.book,
            &self.plan,
            self.slab.len() as u64,
            self.device.counters(),
        )
    }

    /// A table laid out like `torch_npu.npu.memory_summary()`, with leases
    /// called leases, persistent buffers counted as allocated, and the
    /// plan's slab beside what the device reserved for it.
    pub fn memory_summary(&self) -> String {
        self.stats()
            .summary(self.device.name(), self.device.reserve_rounding())
    }
}

impl<D: Device> std::fmt::Debug for Arena<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Arena")
            .field("device", &self.device.name())
            .field("slab_bytes", &self.slab.len())
            .field("buffers", &self.plan.buffers().len())
            .finish()
    }
}

/// The counters of `book` over `plan`, with the bytes the device reserved
/// and its counters: one definition for the arena and the owned lease book.
pub(crate) fn book_stats(
    book: &Book,
    plan: &Plan,
    reserved_bytes: u64,
    device: crate::device::DeviceCounters,
) -> ArenaStats {
    let c = &book.counters;
    let (total_leases, leased_bytes) = book.totals();
    ArenaStats {
        reserved_bytes,
        slab_bytes: plan.slab_bytes() as u64,
        persistent_bytes: plan.persistent_bytes() as u64,
        persistent_buffers: book
            .slots
            .iter()
            .filter(|s| s.kind == crate::plan::LifetimeKind::Persistent)
            .count() as u64,
        active_bytes: c.active_bytes.get(),
        peak_active_bytes: c.peak_active_bytes.get(),
        live_leases: c.live_leases.get(),
        peak_live_leases: c.peak_live_leases.get(),
        total_leases,
        // Every lease not live any more was released.
        total_releases: total_leases - c.live_leases.get(),
        leased_bytes,
        released_bytes: leased_bytes - c.active_bytes.get(),
        segments: 1,
        steps: c.steps.get(),
        device,
    }
}
