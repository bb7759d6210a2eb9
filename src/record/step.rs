//! The step scope of a recorder: temporaries by site name, persistent
//! buffers by handle, phases of the step's mode.

use super::lease::SiteLease;
use super::shared_state::SharedState;
use crate::arena::{Leases, Step, StepScope};
use crate::device::Device;
use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::plan::{Buffer, BufferId, Mode, Phase};

/// One step of a [`Recorder`](super::Recorder), in one mode: made by
/// [`Recorder::step`](super::Recorder::step) or
/// [`Recorder::step_in`](super::Recorder::step_in); every lease borrows it.
///
/// While the recorder records, requests are served from its pool and
/// recorded; once frozen, the same calls lease planned buffers of its arena
/// and allocate nothing. It implements [`StepScope`], as the planned
/// [`Step`] does, so a model written once runs on both.
pub struct RecordStep<'r, D: Device> {
    pub(crate) shared: &'r SharedState,
    /// The step's mode.
    pub(crate) mode: u16,
    /// The arena step and the buffer id of every site, once frozen.
    pub(crate) frozen: Option<(Step<'r, D>, &'r [BufferId])>,
}

impl<'r, D: Device> RecordStep<'r, D> {
    /// A temporary of `shape` for the site called `site` in the step's mode
    /// (any stable name: a string constant, or
    /// [`call_site!()`](crate::call_site) for the calling line).
    ///
    /// Recording: the request is served from the pool (allocating if the
    /// site needs more memory) and recorded: the site's element type, the
    /// shape its buffer must hold (by its [`ShapeRule`]: the request whose
    /// padded shape has the most elements, or, for a site that opted in to
    /// per-dimension limits, the largest of each dimension), and the phases
    /// from its first lease to its last release.
    ///
    /// Frozen: the planned buffer of the site, viewed with `shape`, found
    /// by hashing the name (no allocation). A site never recorded in this
    /// mode is an [`Error::UnrecordedSite`]; a shape its buffer cannot hold
    /// by the site's rule is an [`Error::ExceedsRecorded`] naming the rule.
    #[inline]
    pub fn temp<T: Element>(&self, site: &str, shape: &[usize]) -> Result<SiteLease<'_, T, D>> {
        match &self.frozen {
            None => self.shared.request::<T>(site, shape).map(SiteLease::pooled),
            Some((step, ids)) => {
                let (buffer, elements) = self.frozen_site::<T>(step, ids, site, shape)?;
                let mut lease = step.lease(buffer)?;
                // `frozen_site` checked the shape by the site's rule.
                lease.dims[..shape.len()].copy_from_slice(shape);
                lease.ndim = shape.len() as u8;
                lease.len = elements;
                Ok(SiteLease::planned(lease))
            }
        }
    }

    /// Finds a frozen site's buffer and checks the request against it;
    /// returns the buffer and the view's element count.
    #[inline]
    fn frozen_site<T: Element>(
        &self,
        step: &Step<'r, D>,
        ids: &[BufferId],
        name: &str,
        shape: &[usize],
    ) -> Result<(Buffer<T>, usize)> {
        let plan = step.plan();
        let (index, elements) =
            self.shared
                .book
                .planned_request(self.mode, name, T::DTYPE, shape, |index| {
                    // Sites cannot be added while frozen: every site has an id.
                    let id = ids.get(index)?;
                    plan.buffers().get(id.index())
                })?;
        // The book checked the element type: the id's.
        let Some(buffer) = ids.get(index).copied().and_then(BufferId::typed::<T>) else {
            return Err(self.unrecorded(name));
        };
        Ok((buffer, elements))
    }

    #[cold]
    fn unrecorded(&self, name: &str) -> Error {
        Error::UnrecordedSite {
            site: name.to_owned(),
            mode: self.shared.mode_name(self.mode).to_owned(),
        }
    }

    /// Leases a persistent buffer declared with
    /// [`Recorder::persistent`](super::Recorder::persistent), viewed with its
    /// declared shape.
    pub fn lease<T: Element>(&self, buffer: Buffer<T>) -> Result<SiteLease<'_, T, D>> {
        let index = buffer.id.index();
        if buffer.id.planner != self.shared.id {
            return Err(Error::ForeignHandle {
                index,
                owner: "recorder",
            });
        }
        match &self.frozen {
            None => self
                .shared
                .lease_persistent::<T>(index)
                .map(SiteLease::pooled),
            Some((step, ids)) => {
                let id = ids.get(index).copied().and_then(BufferId::typed::<T>);
                match id {
                    Some(b) => step.lease(b).map(SiteLease::planned),
                    None => Err(Error::ForeignHandle {
                        index,
                        owner: "recorder",
                    }),
                }
            }
        }
    }

    /// Moves the step to `phase`, a phase of the step's mode (declared with
    /// [`Recorder::phase`](super::Recorder::phase) or
    /// [`Recorder::phase_in`](super::Recorder::phase_in)); phases only move
    /// forward. Leases dropped from now on count as used up to `phase`.
    pub fn enter(&self, phase: Phase) -> Result<()> {
        if phase.planner != self.shared.id {
            return Err(Error::ForeignPhase {
                index: phase.index(),
                owner: "recorder",
            });
        }
        let book = &self.shared.book;
        book.check_phase(self.mode, phase.mode, phase.index())?;
        match &self.frozen {
            None => book.enter(phase.mode, phase.index()),
            Some((step, _)) => step.enter(Phase {
                planner: step.plan().id,
                ..phase
            }),
        }
    }

    /// Name of the current phase (`"step"` when the mode has none).
    pub fn phase(&self) -> &str {
        match &self.frozen {
            None => self.shared.book.phase_name(),
            Some((step, _)) => step.phase(),
        }
    }

    /// The step's mode.
    pub fn mode(&self) -> Mode {
        Mode {
            planner: self.shared.id,
            index: self.mode,
        }
    }

    /// Whether this step is being recorded (served from the pool).
    pub fn is_recording(&self) -> bool {
        self.frozen.is_none()
    }
}

/// The lease family of a recorder on device `D`: [`SiteLease`].
#[derive(Debug)]
pub struct Recorded<D>(std::marker::PhantomData<D>);

impl<D: Device> Leases for Recorded<D> {
    type Device = D;
    type Lease<'s, T: Element>
        = SiteLease<'s, T, D>
    where
        Self: 's;
}

impl<'r, D: Device> StepScope for RecordStep<'r, D> {
    type Device = D;
    type Family = Recorded<D>;

    #[inline]
    fn temp<T: Element>(&self, name: &str, shape: &[usize]) -> Result<SiteLease<'_, T, D>> {
        RecordStep::temp(self, name, shape)
    }

    #[inline]
    fn lease<T: Element>(&self, buffer: Buffer<T>) -> Result<SiteLease<'_, T, D>> {
        RecordStep::lease(self, buffer)
    }

    fn enter(&self, phase: Phase) -> Result<()> {
        RecordStep::enter(self, phase)
    }

    fn phase(&self) -> &str {
        RecordStep::phase(self)
    }

    fn is_recording(&self) -> bool {
        RecordStep::is_recording(self)
    }
}
