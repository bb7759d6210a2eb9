//! The step scope: the only place leases come from.

use super::Arena;
use super::book::mode_name;
use super::lease::Lease;
use crate::device::Device;
use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::plan::{Buffer, BufferId, Mode, Phase};
use crate::shape::check_view;

/// One training step (or any unit of repeated work) on an arena, in one
/// [`Mode`].
///
/// Made by [`Arena::step`] / [`Arena::step_in`] or [`Arena::begin_step`] /
/// [`Arena::begin_step_in`]; it borrows the arena exclusively, and every
/// lease borrows it, so no lease outlives its step. Dropping it ends the
/// step: the phase goes back to the first one and the step counter moves
/// on.
pub struct Step<'a, D: Device> {
    pub(crate) arena: &'a Arena<D>,
}

impl<'a, D: Device> Step<'a, D> {
    /// Leases `buffer` with its declared shape as the initial view.
    ///
    /// Fails, without side effects, if the buffer is already leased, if a
    /// live lease shares its bytes, if it belongs to another mode than the
    /// step's, if the current phase is outside its span, or if the handle
    /// belongs to another plan. Allocates nothing.
    // Always inlined: with `temp` calling it too, the compiler would
    // otherwise keep it out of line and every lease would pay a call
    // (about 110 instructions per lease and release instead of 74).
    #[inline(always)]
    pub fn lease<T: Element>(&self, buffer: Buffer<T>) -> Result<Lease<'_, T, D>> {
        let arena = self.arena;
        let index = buffer.id.index();
        let granted = (buffer.id.planner == arena.plan.id)
            .then(|| arena.book.acquire(&arena.plan, index))
            .flatten();
        match granted {
            Some(Ok(slot)) => {
                if arena.options.checked {
                    arena.on_acquire(slot);
                }
                Ok(Lease::new(arena, slot))
            }
            Some(Err(e)) => Err(e),
            None => Err(Error::ForeignHandle {
                index,
                owner: "arena",
            }),
        }
    }

    /// Leases the step-scoped buffer called `name` in the step's mode, viewed
    /// with `shape` (checked by the buffer's [`ShapeRule`](crate::ShapeRule)):
    /// the same request a recorded step makes
    /// ([`RecordStep::temp`](crate::RecordStep::temp)), so a model written
    /// against [`StepScope`](crate::StepScope) runs on both. Finds the
    /// buffer by hashing the name (no allocation); leasing by handle
    /// ([`lease`](Step::lease)) skips the hash.
    ///
    /// ```
    /// use tensor_arena::{Arena, HostDevice, Planner};
    /// let mut p = Planner::new();
    /// p.step::<f32>("h", &[64, 32])?;
    /// let mut arena = Arena::new(HostDevice::new(), p.plan()?)?;
    /// arena.step(|s| {
    ///     let h = s.temp::<f32>("h", &[10, 32])?;
    ///     assert_eq!(h.shape(), &[10, 32]);
    ///     assert!(s.temp::<f32>("nope", &[1]).is_err());
    ///     Ok::<_, tensor_arena::Error>(())
    /// })?;
    /// # Ok::<(), tensor_arena::Error>(())
    /// ```
    #[inline]
    pub fn temp<T: Element>(&self, name: &str, shape: &[usize]) -> Result<Lease<'_, T, D>> {
        let arena = self.arena;
        let index = match arena.book.find(arena.book.mode.get(), name) {
            Ok(index) => index,
            Err(persistent) => return Err(self.not_a_temp(name, shape, persistent)),
        };
        let planned = &arena.plan.buffers()[index];
        let id = BufferId {
            planner: arena.plan.id,
            // Fits: the planner hands out u32 indices.
            index: index as u32,
            dtype: planned.dtype(),
        };
        let Some(buffer) = id.typed::<T>() else {
            return Err(Error::DTypeMismatch {
                buffer: name.to_owned(),
                declared: planned.dtype().name(),
                requested: T::DTYPE.name(),
            });
        };
        // Checked before leasing, so a refused shape has no side effect.
        let elements = check_view(
            name,
            shape,
            planned.capacity(),
            planned.padded_shape(),
            planned.shape_rule(),
        )?;
        let mut lease = self.lease(buffer)?;
        lease.dims[..shape.len()].copy_from_slice(shape);
        lease.ndim = shape.len() as u8;
        lease.len = elements;
        Ok(lease)
    }

    #[cold]
    fn not_a_temp(&self, name: &str, shape: &[usize], persistent: Option<usize>) -> Error {
        match persistent {
            Some(_) => crate::arena::persistent_by_name(name, shape),
            None => Error::NoSuchBuffer {
                name: name.to_owned(),
                mode: mode_name(&self.arena.plan, self.arena.book.mode.get()),
                shape: shape.to_vec(),
            },
        }
    }

    /// Leases a buffer known by its untyped id, checking that `T` is its
    /// declared element type.
    pub fn lease_dyn<T: Element>(&self, id: BufferId) -> Result<Lease<'_, T, D>> {
        let planned = self.arena.plan.buffer(id)?;
        match id.typed::<T>() {
            Some(buffer) => self.lease(buffer),
            None => Err(Error::DTypeMismatch {
                buffer: planned.name().to_owned(),
                declared: planned.dtype().name(),
                requested: T::DTYPE.name(),
            }),
        }
    }

    /// Moves the step to `phase`, a phase of the step's mode. Phases only
    /// move forward, and every lease of a buffer whose span ends before
    /// `phase` must have been dropped.
    pub fn enter(&self, phase: Phase) -> Result<()> {
        let plan = &self.arena.plan;
        let book = &self.arena.book;
        let slot = book.phase_slot(plan, phase, "arena")?;
        let from = book.phase.get();
        book.enter(plan, slot)?;
        if self.arena.options.checked {
            self.arena.poison_ended(from, Some(slot));
        }
        Ok(())
    }

    /// Name of the current phase (`"step"` when the mode has no phases).
    pub fn phase(&self) -> &str {
        self.arena.plan.phase_name(self.arena.book.phase.get())
    }

    /// The step's mode.
    pub fn mode(&self) -> Mode {
        Mode {
            planner: self.arena.plan.id,
            index: self.arena.book.mode.get(),
        }
    }

    /// Name of the step's mode (`default` unless the step was opened in a
    /// declared mode).
    pub fn mode_name(&self) -> &str {
        self.arena
            .plan
            .modes()
            .get(usize::from(self.arena.book.mode.get()))
            .map_or("default", |m| m.name())
    }

    /// Checked mode: verifies the guard bytes of every live lease now, and
    /// reports the first violation found (also kept for
    /// [`Arena::take_violations`]). Without checked mode, does nothing.
    pub fn verify(&self) -> Result<()> {
        let arena = self.arena;
        if !arena.options.checked {
            return Ok(());
        }
        for slot in arena.book.slots.iter().filter(|s| s.live.get()) {
            if let Some(v) = arena.inspect(slot, slot.elements) {
                arena.violations.borrow_mut().push(v.clone());
                return Err(Error::GuardViolation(Box::new(v)));
            }
        }
        Ok(())
    }

    /// The arena's counters, as of now.
    pub fn stats(&self) -> crate::ArenaStats {
        self.arena.stats()
    }

    /// The plan the arena was built from.
    pub fn plan(&self) -> &crate::Plan {
        &self.arena.plan
    }
}

impl<D: Device> Drop for Step<'_, D> {
    fn drop(&mut self) {
        if self.arena.options.checked {
            self.arena.check_persistent();
            self.arena.poison_ended(self.arena.book.phase.get(), None);
        }
        self.arena.book.end_step();
    }
}

/// The error for a persistent buffer asked for by name as a temporary.
#[cold]
pub(crate) fn persistent_by_name(name: &str, shape: &[usize]) -> Error {
    Error::InvalidView {
        buffer: name.to_owned(),
        shape: shape.to_vec(),
        reason: "this name is a persistent buffer; lease it with its handle",
    }
}
