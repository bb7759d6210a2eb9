//! The step scope: the only place leases come from.

use super::Arena;
use super::lease::Lease;
use crate::device::Device;
use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::plan::{Buffer, BufferId, Phase};

/// One training step (or any unit of repeated work) on an arena.
///
/// Made by [`Arena::step`] or [`Arena::begin_step`]; it borrows the arena
/// exclusively, and every lease borrows it, so no lease outlives its step.
/// Dropping it ends the step: the phase goes back to the first one and the
/// step counter moves on.
pub struct Step<'a, D: Device> {
    pub(crate) arena: &'a Arena<D>,
}

impl<'a, D: Device> Step<'a, D> {
    /// Leases `buffer` with its declared shape as the initial view.
    ///
    /// Fails, without side effects, if the buffer is already leased, if a
    /// live lease shares its bytes, if the current phase is outside its
    /// span, or if the handle belongs to another plan. Allocates nothing.
    #[inline]
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

    /// Moves the step to `phase`. Phases only move forward, and every lease
    /// of a buffer whose span ends before `phase` must have been dropped.
    pub fn enter(&self, phase: Phase) -> Result<()> {
        let plan = &self.arena.plan;
        if phase.planner != plan.id || phase.index() >= plan.phases().len() {
            return Err(Error::ForeignPhase {
                index: phase.index(),
                owner: "arena",
            });
        }
        let from = self.arena.book.phase.get();
        self.arena.book.enter(plan, phase.index())?;
        if self.arena.options.checked {
            self.arena.poison_ended(from, Some(phase.index()));
        }
        Ok(())
    }

    /// Name of the current phase (`"step"` when no phases were declared).
    pub fn phase(&self) -> &str {
        self.arena.plan.phase_name(self.arena.book.phase.get())
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
