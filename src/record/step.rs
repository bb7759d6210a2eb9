//! The step scope of a recorder: temporaries by site name, persistent
//! buffers by handle, phases.

use super::lease::SiteLease;
use super::recorder::Persistent;
use super::shared_state::{SharedState, persistent_by_name};
use crate::arena::Step;
use crate::device::Device;
use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::plan::{BufferId, Phase};

/// One step of a [`Recorder`](super::Recorder): made by
/// [`Recorder::step`](super::Recorder::step); every lease borrows it.
///
/// While the recorder records, requests are served from its pool and
/// recorded; once frozen, the same calls lease planned buffers of its arena
/// and allocate nothing.
pub struct RecordStep<'r, D: Device> {
    pub(crate) shared: &'r SharedState,
    /// The arena step and the buffer id of every site, once frozen.
    pub(crate) frozen: Option<(Step<'r, D>, &'r [BufferId])>,
}

impl<'r, D: Device> RecordStep<'r, D> {
    /// A temporary of `shape` for the site called `site` (any stable name:
    /// a string constant, or [`call_site!()`](crate::call_site) for the
    /// calling line).
    ///
    /// Recording: the request is served from the pool (allocating if the
    /// site needs more memory) and recorded: the site's element type, its
    /// largest shape per dimension, and the phases from its first lease to
    /// its last release. A site keeps its element type and number of
    /// dimensions.
    ///
    /// Frozen: the planned buffer of the site, viewed with `shape`, found
    /// by hashing the name (no allocation). A site never recorded is an
    /// [`Error::UnrecordedSite`]; a shape with a dimension beyond the
    /// planned (padded) maximum is an [`Error::ExceedsRecorded`] naming the
    /// recorded maximum.
    #[inline]
    pub fn temp<T: Element>(&self, site: &str, shape: &[usize]) -> Result<SiteLease<'_, T, D>> {
        match &self.frozen {
            None => self.shared.request::<T>(site, shape).map(SiteLease::pooled),
            Some((step, ids)) => {
                let buffer = self.frozen_site::<T>(step, ids, site, shape)?;
                let mut lease = step.lease(buffer)?;
                // `frozen_site` checked the shape against the padded one:
                // same rank, no dimension larger, so it fits the capacity.
                lease.dims[..shape.len()].copy_from_slice(shape);
                lease.ndim = shape.len() as u8;
                lease.len = shape.iter().product();
                Ok(SiteLease::planned(lease))
            }
        }
    }

    /// Finds a frozen site's buffer and checks the request against it.
    #[inline]
    fn frozen_site<T: Element>(
        &self,
        step: &Step<'r, D>,
        ids: &[BufferId],
        name: &str,
        shape: &[usize],
    ) -> Result<crate::plan::Buffer<T>> {
        let table = self.shared.table.borrow();
        let Some(index) = table.find(name) else {
            return Err(Error::UnrecordedSite {
                site: name.to_owned(),
            });
        };
        let site = &table.sites[index];
        if site.is_persistent() {
            return Err(persistent_by_name(name, shape));
        }
        // Sites cannot be added while frozen, so every site has an id.
        let Some(&id) = ids.get(index) else {
            return Err(Error::UnrecordedSite {
                site: name.to_owned(),
            });
        };
        let Some(buffer) = id.typed::<T>() else {
            return Err(Error::DTypeMismatch {
                buffer: name.to_owned(),
                declared: id.dtype().name(),
                requested: T::DTYPE.name(),
            });
        };
        let Some(planned) = step.plan().buffers().get(id.index()) else {
            return Err(Error::UnrecordedSite {
                site: name.to_owned(),
            });
        };
        let padded = planned.padded_shape();
        let fits =
            shape.len() == padded.len() && shape.iter().zip(padded.iter()).all(|(s, p)| s <= p);
        if !fits || shape.contains(&0) {
            return Err(if fits {
                Error::EmptyShape {
                    buffer: name.to_owned(),
                    shape: shape.to_vec(),
                }
            } else {
                Error::ExceedsRecorded {
                    site: name.to_owned(),
                    requested: shape.to_vec(),
                    recorded: site.max.to_vec(),
                    padded: padded.to_vec(),
                }
            });
        }
        Ok(buffer)
    }

    /// Leases a persistent buffer declared with
    /// [`Recorder::persistent`](super::Recorder::persistent), viewed with its
    /// declared shape.
    pub fn lease<T: Element>(&self, buffer: Persistent<T>) -> Result<SiteLease<'_, T, D>> {
        if buffer.owner != self.shared.id {
            return Err(Error::ForeignHandle {
                index: buffer.index,
                owner: "recorder",
            });
        }
        match &self.frozen {
            None => self
                .shared
                .lease_persistent::<T>(buffer.index)
                .map(SiteLease::pooled),
            Some((step, ids)) => {
                let id = ids
                    .get(buffer.index)
                    .copied()
                    .and_then(BufferId::typed::<T>);
                match id {
                    Some(b) => step.lease(b).map(SiteLease::planned),
                    None => Err(Error::ForeignHandle {
                        index: buffer.index,
                        owner: "recorder",
                    }),
                }
            }
        }
    }

    /// Moves the step to `phase` (declared with
    /// [`Recorder::phase`](super::Recorder::phase)); phases only move
    /// forward. Leases dropped from now on count as used up to `phase`.
    pub fn enter(&self, phase: Phase) -> Result<()> {
        if phase.planner != self.shared.id || phase.index() >= self.shared.phases.len() {
            return Err(Error::ForeignPhase {
                index: phase.index(),
                owner: "recorder",
            });
        }
        match &self.frozen {
            None => {
                let current = self.shared.phase.get();
                if phase.index() < current {
                    return Err(Error::PhaseOrder {
                        current: self.shared.phase_name().to_owned(),
                        requested: self.shared.phases[phase.index()].clone(),
                    });
                }
                self.shared.phase.set(phase.index());
                Ok(())
            }
            Some((step, _)) => step.enter(Phase {
                planner: step.plan().id,
                index: phase.index,
            }),
        }
    }

    /// Name of the current phase (`"step"` when none are declared).
    pub fn phase(&self) -> &str {
        match &self.frozen {
            None => self.shared.phase_name(),
            Some((step, _)) => step.phase(),
        }
    }

    /// Whether this step is being recorded (served from the pool).
    pub fn is_recording(&self) -> bool {
        self.frozen.is_none()
    }
}
