//! An owned lease book: the arena's lease rules over a plan, with no memory
//! and no borrows, for callers that cannot hold a [`Step`](crate::Step)
//! borrow (language bindings: the Python package keeps its slab in a torch
//! tensor and its leases in Python objects).
//!
//! It runs the checks of [`Step::lease`](crate::Step::lease),
//! [`Lease::set_shape`](crate::Lease::set_shape) and
//! [`Step::enter`](crate::Step::enter) through the same internal book, so
//! it refuses the same requests with the same [`Error`]s. What the borrow
//! checker guarantees for `Step` and `Lease` becomes tokens checked at run
//! time: a [`StepToken`] names the open step, a [`LeaseToken`] one lease;
//! a token of an ended step or of a released lease is refused, never
//! honoured. Tokens are plain values: dropping one does nothing, a lease
//! ends with [`LeaseBook::release`] or with its step.

use super::book::Book;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::plan::{BufferId, LifetimeKind, Phase, Plan, PlannedBuffer, next_owner_id};
use crate::shape::view_elements;

/// The lease rules of an [`Arena`](crate::Arena) for a slab the caller owns.
///
/// ```
/// use tensor_arena::arena::LeaseBook;
/// use tensor_arena::{Error, Planner};
/// let mut p = Planner::new();
/// let fwd = p.phase("forward")?;
/// let bwd = p.phase("backward")?;
/// let h = p.span::<f32>("h", &[64, 100], fwd, fwd)?;
/// let g = p.span::<f32>("g", &[64, 100], bwd, bwd)?;
/// let mut book = LeaseBook::new(p.plan()?);
///
/// let step = book.begin_step()?;
/// let lease = book.lease(step, h.id(), Some(&[32, 100]))?;
/// assert_eq!((lease.offset, lease.elements), (book.plan().buffer(h.id())?.offset(), 3200));
/// assert!(matches!(book.lease(step, h.id(), None), Err(Error::AlreadyLeased { .. })));
/// // h lives in forward only: it must end before backward.
/// assert!(matches!(book.enter(step, bwd), Err(Error::LeaseOutlivesSpan { .. })));
/// book.release(lease.token)?;
/// book.enter(step, bwd)?;
/// let _g = book.lease(step, g.id(), None)?;
/// book.end_step(step)?; // ends the lease of g as well
/// assert!(matches!(book.lease(step, g.id(), None), Err(Error::StepNotOpen { .. })));
/// assert_eq!(book.stats().steps, 1);
/// # Ok::<(), tensor_arena::Error>(())
/// ```
#[derive(Debug)]
pub struct LeaseBook {
    /// Identity of this book's tokens (not the planner's: two books of one
    /// plan must not accept each other's tokens).
    owner: u64,
    plan: Plan,
    book: Book,
    /// The open step's number.
    open: Option<u64>,
    /// Per buffer: the number of its live lease, 0 when none.
    live: Box<[u64]>,
    /// Leases handed out so far; the next lease's number is one more.
    serial: u64,
}

/// The open step of a [`LeaseBook`]. Every lease and phase change names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StepToken {
    owner: u64,
    step: u64,
}

impl StepToken {
    /// The step's number (0 for the first step).
    pub fn number(self) -> u64 {
        self.step
    }
}

/// One lease of a [`LeaseBook`]; [`LeaseBook::release`] ends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseToken {
    owner: u64,
    index: u32,
    serial: u64,
}

impl LeaseToken {
    /// The leased buffer's position in the plan.
    pub fn index(self) -> usize {
        self.index as usize
    }

    /// The lease's number in its book (from 1).
    pub fn number(self) -> u64 {
        self.serial
    }
}

/// A granted lease: where its bytes are and how many elements its view has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Granted {
    /// The token that ends it.
    pub token: LeaseToken,
    /// Slab offset of the buffer's first byte.
    pub offset: usize,
    /// Elements of the view (the product of its shape).
    pub elements: usize,
    /// The buffer's element type.
    pub dtype: DType,
}

/// Which lifetimes a phase change (or the end of a step) closed; see
/// [`LeaseBook::ended`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    /// The phase left.
    pub from: usize,
    /// The phase entered, or `None` when the step ended.
    pub to: Option<usize>,
}

/// Whether a buffer's lifetime ends when a step goes from phase `from` to
/// `to` (`None`: the step ends): the rule checked mode poisons by.
fn lifetime_ends(b: &PlannedBuffer, from: usize, to: Option<usize>) -> bool {
    match (b.lifetime(), to) {
        (LifetimeKind::Persistent, _) => false,
        (_, None) => true,
        (LifetimeKind::Step, Some(_)) => false,
        (LifetimeKind::Phases, Some(to)) => {
            let last = b.phases().1;
            last >= from && last < to
        }
    }
}

impl LeaseBook {
    /// A book for `plan`, with no step open.
    pub fn new(plan: Plan) -> LeaseBook {
        let book = Book::new(&plan);
        let live = vec![0; plan.buffers().len()].into_boxed_slice();
        LeaseBook {
            owner: next_owner_id(),
            plan,
            book,
            open: None,
            live,
            serial: 0,
        }
    }

    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The handle of every planned buffer, in plan order: what a binding
    /// hands to its callers when it got the plan without its planner (from
    /// a spec file, say).
    pub fn ids(&self) -> impl ExactSizeIterator<Item = BufferId> + '_ {
        let planner = self.plan.id;
        self.plan
            .buffers()
            .iter()
            .enumerate()
            .map(move |(i, b)| BufferId {
                planner,
                // Fits: the planner hands out u32 indices.
                index: i as u32,
                dtype: b.dtype(),
            })
    }

    /// Opens the next step, in the first phase. Fails with
    /// [`Error::StepStillOpen`] while a step is open.
    pub fn begin_step(&mut self) -> Result<StepToken> {
        if let Some(open) = self.open {
            return Err(Error::StepStillOpen { open });
        }
        let step = self.book.counters.steps.get();
        self.book.phase.set(0);
        self.open = Some(step);
        Ok(StepToken {
            owner: self.owner,
            step,
        })
    }

    /// The open step, if any.
    pub fn open_step(&self) -> Option<StepToken> {
        self.open.map(|step| StepToken {
            owner: self.owner,
            step,
        })
    }

    fn check_step(&self, step: StepToken) -> Result<()> {
        if step.owner != self.owner {
            return Err(Error::StepNotOpen {
                step: step.step,
                reason: "belongs to another lease book",
            });
        }
        if self.open != Some(step.step) {
            return Err(Error::StepNotOpen {
                step: step.step,
                reason: "has ended",
            });
        }
        Ok(())
    }

    /// Leases buffer `id` in `step`, viewed with `shape` (`None`: the
    /// declared shape). Refuses what [`Step::lease`](crate::Step::lease)
    /// followed by [`Lease::set_shape`](crate::Lease::set_shape) refuses,
    /// in the same order and with the same errors: a handle of another
    /// plan, a phase outside the buffer's span, a second lease of the
    /// buffer, a live lease sharing its bytes, a shape whose element count
    /// exceeds the capacity. A refused request changes nothing.
    pub fn lease(
        &mut self,
        step: StepToken,
        id: BufferId,
        shape: Option<&[usize]>,
    ) -> Result<Granted> {
        self.check_step(step)?;
        let index = id.index();
        if id.planner != self.plan.id || index >= self.live.len() {
            return Err(Error::ForeignHandle {
                index,
                owner: "lease book",
            });
        }
        let slot = match self.book.acquire(&self.plan, index) {
            Some(granted) => granted?,
            None => {
                return Err(Error::ForeignHandle {
                    index,
                    owner: "lease book",
                });
            }
        };
        let planned = &self.plan.buffers()[index];
        let elements = match shape {
            None => slot.elements,
            Some(shape) => {
                match view_elements(planned.name(), shape, slot.capacity, planned.padded_shape()) {
                    Ok(n) => n,
                    Err(e) => {
                        self.book.release(slot);
                        return Err(e);
                    }
                }
            }
        };
        self.serial += 1;
        self.live[index] = self.serial;
        Ok(Granted {
            token: LeaseToken {
                owner: self.owner,
                index: index as u32,
                serial: self.serial,
            },
            offset: slot.offset,
            elements,
            dtype: planned.dtype(),
        })
    }

    /// Checks that `shape` fits the buffer of a live lease (the rule of
    /// [`Lease::set_shape`](crate::Lease::set_shape)) and returns its
    /// element count.
    pub fn reshape(&self, lease: LeaseToken, shape: &[usize]) -> Result<usize> {
        let planned = self.live_buffer(lease)?;
        view_elements(
            planned.name(),
            shape,
            planned.capacity(),
            planned.padded_shape(),
        )
    }

    fn live_buffer(&self, lease: LeaseToken) -> Result<&PlannedBuffer> {
        let index = lease.index();
        let planned = match self.plan.buffers().get(index) {
            Some(b) if lease.owner == self.owner => b,
            _ => {
                return Err(Error::ForeignHandle {
                    index,
                    owner: "lease book",
                });
            }
        };
        if self.live[index] != lease.serial {
            return Err(Error::StaleLease {
                buffer: planned.name().to_owned(),
                lease: lease.serial,
                reason: "released, or ended with its step",
            });
        }
        Ok(planned)
    }

    /// Whether `lease` is live.
    pub fn is_live(&self, lease: LeaseToken) -> bool {
        self.live_buffer(lease).is_ok()
    }

    /// Ends a lease. A token already released, or whose step ended, is
    /// [`Error::StaleLease`]; nothing changes then.
    pub fn release(&mut self, lease: LeaseToken) -> Result<()> {
        self.live_buffer(lease)?;
        let index = lease.index();
        self.book.release(&self.book.slots[index]);
        self.live[index] = 0;
        Ok(())
    }

    /// Moves `step` to `phase`, as [`Step::enter`](crate::Step::enter)
    /// does: phases only move forward, and no lease may outlive its span.
    /// Returns which lifetimes ended, for [`LeaseBook::ended`].
    pub fn enter(&mut self, step: StepToken, phase: Phase) -> Result<Ended> {
        self.check_step(step)?;
        if phase.planner != self.plan.id || phase.index() >= self.plan.phases().len() {
            return Err(Error::ForeignPhase {
                index: phase.index(),
                owner: "lease book",
            });
        }
        let from = self.book.phase.get();
        self.book.enter(&self.plan, phase.index())?;
        Ok(Ended {
            from,
            to: Some(phase.index()),
        })
    }

    /// Name of the open step's phase (`"step"` when no phases were declared).
    pub fn phase(&self) -> &str {
        self.plan.phase_name(self.book.phase.get())
    }

    /// Ends `step`: every lease still live ends with it (their tokens go
    /// stale), the phase goes back to the first one, the step is counted.
    /// Returns which lifetimes ended: every step-scoped one.
    pub fn end_step(&mut self, step: StepToken) -> Result<Ended> {
        self.check_step(step)?;
        let from = self.book.phase.get();
        for (index, live) in self.live.iter_mut().enumerate() {
            if *live != 0 {
                self.book.release(&self.book.slots[index]);
                *live = 0;
            }
        }
        self.book.end_step();
        self.open = None;
        Ok(Ended { from, to: None })
    }

    /// The buffers whose lifetime `ended` closed: the ones checked mode
    /// poisons (every step-scoped buffer at the end of a step; at a phase
    /// change, those whose span's last phase was left).
    pub fn ended(&self, ended: Ended) -> impl Iterator<Item = &PlannedBuffer> + '_ {
        self.plan
            .buffers()
            .iter()
            .filter(move |b| lifetime_ends(b, ended.from, ended.to))
    }

    /// The counters, as an arena keeps them. The book owns no memory:
    /// `reserved_bytes` is the plan's slab size and the device counters
    /// are zero (the caller's allocator counts its one slab).
    pub fn stats(&self) -> super::ArenaStats {
        super::book_stats(
            &self.book,
            &self.plan,
            self.plan.slab_bytes() as u64,
            crate::device::DeviceCounters::default(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Arena, HostDevice, Planner};

    struct Fixture {
        plan: Plan,
        fwd: Phase,
        bwd: Phase,
        w: BufferId,
        h: BufferId,
        g: BufferId,
        s: BufferId,
    }

    fn fixture() -> Result<Fixture> {
        let mut p = Planner::new();
        let fwd = p.phase("forward")?;
        let bwd = p.phase("backward")?;
        let w = p.persistent::<f32>("w", &[64])?.id();
        let h = p.span::<f32>("h", &[32, 64], fwd, fwd)?.id();
        let g = p.span::<f32>("g", &[32, 64], bwd, bwd)?.id();
        let s = p.step::<u8>("s", &[100])?.id();
        Ok(Fixture {
            plan: p.plan()?,
            fwd,
            bwd,
            w,
            h,
            g,
            s,
        })
    }

    #[test]
    fn refusals_match_the_borrowing_step() -> Result<()> {
        let f = fixture()?;
        let mut book = LeaseBook::new(f.plan.clone());
        let mut arena = Arena::new(HostDevice::new(), f.plan.clone())?;
        let step = book.begin_step()?;
        let s = arena.begin_step();
        let h = f.h.typed::<f32>().ok_or(Error::EmptyPlan)?;
        let g = f.g.typed::<f32>().ok_or(Error::EmptyPlan)?;

        // Outside the phase.
        let ours = book.lease(step, f.g, None).unwrap_err();
        let theirs = s.lease(g).unwrap_err();
        assert_eq!(ours.to_string(), theirs.to_string());
        assert!(matches!(ours, Error::OutsidePhase { .. }));

        // Too large a view.
        let ours = book.lease(step, f.h, Some(&[33, 64])).unwrap_err();
        let theirs = s.lease(h)?.with_shape(&[33, 64]).unwrap_err();
        assert_eq!(ours.to_string(), theirs.to_string());
        assert!(matches!(
            ours,
            Error::ViewTooLarge {
                elements: 2112,
                capacity: 2048,
                ..
            }
        ));
        let ours = book.lease(step, f.h, Some(&[])).unwrap_err();
        assert!(matches!(ours, Error::InvalidView { .. }), "{ours}");

        // Twice.
        let lease = book.lease(step, f.h, Some(&[3, 64]))?;
        assert_eq!(lease.elements, 192);
        let held = s.lease(h)?;
        let ours = book.lease(step, f.h, None).unwrap_err();
        let theirs = s.lease(h).unwrap_err();
        assert_eq!(ours.to_string(), theirs.to_string());

        // A lease alive past its span.
        let ours = book.enter(step, f.bwd).unwrap_err();
        let theirs = s.enter(f.bwd).unwrap_err();
        assert_eq!(ours.to_string(), theirs.to_string());
        assert!(matches!(ours, Error::LeaseOutlivesSpan { .. }));
        drop(held);
        book.release(lease.token)?;
        assert_eq!(
            book.enter(step, f.bwd)?,
            Ended {
                from: 0,
                to: Some(1)
            }
        );
        s.enter(f.bwd)?;

        // Phases only move forward.
        let ours = book.enter(step, f.fwd).unwrap_err();
        let theirs = s.enter(f.fwd).unwrap_err();
        assert_eq!(ours.to_string(), theirs.to_string());
        Ok(())
    }

    #[test]
    fn overlapping_bytes_are_refused() -> Result<()> {
        let f = fixture()?;
        let (h, g) = (f.plan.buffer(f.h)?, f.plan.buffer(f.g)?);
        assert_eq!(h.offset(), g.offset(), "forward and backward share bytes");
        let mut book = LeaseBook::new(f.plan.clone());
        let step = book.begin_step()?;
        book.lease(step, f.h, None)?;
        // Move the phase under the live lease, as the internal book's own
        // test does: the byte check is the last line of defence.
        book.book.phase.set(1);
        let err = book.lease(step, f.g, None).unwrap_err();
        assert!(
            matches!(&err, Error::LeaseOverlap { buffer, other, .. } if buffer == "g" && other == "h"),
            "{err}"
        );
        Ok(())
    }

    #[test]
    fn tokens_go_stale_and_are_refused() -> Result<()> {
        let f = fixture()?;
        let mut book = LeaseBook::new(f.plan.clone());
        assert!(book.open_step().is_none());
        let step = book.begin_step()?;
        assert_eq!(book.open_step(), Some(step));
        assert!(matches!(
            book.begin_step(),
            Err(Error::StepStillOpen { open: 0 })
        ));
        let w = book.lease(step, f.w, None)?;
        assert!(book.is_live(w.token));
        assert_eq!(book.reshape(w.token, &[8, 8])?, 64);
        assert!(matches!(
            book.reshape(w.token, &[65]),
            Err(Error::ViewTooLarge { .. })
        ));
        book.release(w.token)?;
        assert!(!book.is_live(w.token));
        let err = book.release(w.token).unwrap_err();
        assert!(
            matches!(&err, Error::StaleLease { buffer, lease: 1, .. } if buffer == "w"),
            "{err}"
        );
        assert!(matches!(
            book.reshape(w.token, &[1]),
            Err(Error::StaleLease { .. })
        ));

        assert_eq!(book.ids().collect::<Vec<_>>(), [f.w, f.h, f.g, f.s]);
        let s = book.lease(step, f.s, Some(&[7]))?;
        assert_eq!(s.dtype, DType::U8);
        assert_eq!(book.stats().live_leases, 1);
        book.end_step(step)?;
        assert_eq!(book.stats().live_leases, 0);
        assert!(matches!(
            book.release(s.token),
            Err(Error::StaleLease { .. })
        ));
        assert!(matches!(
            book.lease(step, f.s, None),
            Err(Error::StepNotOpen { step: 0, .. })
        ));
        assert!(matches!(
            book.end_step(step),
            Err(Error::StepNotOpen { .. })
        ));
        assert!(matches!(
            book.enter(step, f.bwd),
            Err(Error::StepNotOpen { .. })
        ));

        // A new step: the old step token stays dead, the buffer is free.
        let next = book.begin_step()?;
        assert_eq!(next.number(), 1);
        assert!(matches!(
            book.lease(step, f.s, None),
            Err(Error::StepNotOpen { .. })
        ));
        let again = book.lease(next, f.s, None)?;
        assert_eq!(again.token.number(), 3);
        Ok(())
    }

    #[test]
    fn handles_and_tokens_of_others_are_refused() -> Result<()> {
        let f = fixture()?;
        let other = fixture()?;
        let mut book = LeaseBook::new(f.plan.clone());
        let mut twin = LeaseBook::new(f.plan.clone());
        let step = book.begin_step()?;
        let twin_step = twin.begin_step()?;
        assert!(matches!(
            book.lease(step, other.w, None),
            Err(Error::ForeignHandle {
                owner: "lease book",
                ..
            })
        ));
        assert!(matches!(
            book.enter(step, other.bwd),
            Err(Error::ForeignPhase { .. })
        ));
        assert!(matches!(
            book.lease(twin_step, f.w, None),
            Err(Error::StepNotOpen { .. })
        ));
        let lease = twin.lease(twin_step, f.w, None)?;
        assert!(matches!(
            book.release(lease.token),
            Err(Error::ForeignHandle { .. })
        ));
        Ok(())
    }

    #[test]
    fn ended_lists_what_checked_mode_poisons() -> Result<()> {
        let f = fixture()?;
        let mut book = LeaseBook::new(f.plan.clone());
        let step = book.begin_step()?;
        let names = |book: &LeaseBook, e| {
            book.ended(e)
                .map(|b| b.name().to_owned())
                .collect::<Vec<_>>()
        };
        let e = book.enter(step, f.bwd)?;
        assert_eq!(names(&book, e), ["h"]);
        let e = book.end_step(step)?;
        assert_eq!(e, Ended { from: 1, to: None });
        assert_eq!(names(&book, e), ["h", "g", "s"]);
        Ok(())
    }

    #[test]
    fn stats_count_like_the_arena() -> Result<()> {
        let f = fixture()?;
        let mut book = LeaseBook::new(f.plan.clone());
        for _ in 0..3 {
            let step = book.begin_step()?;
            let h = book.lease(step, f.h, None)?;
            book.lease(step, f.s, None)?;
            book.release(h.token)?;
            book.end_step(step)?;
        }
        let stats = book.stats();
        assert_eq!(
            (stats.steps, stats.total_leases, stats.total_releases),
            (3, 6, 6)
        );
        let (h, s) = (f.plan.buffer(f.h)?.size(), f.plan.buffer(f.s)?.size());
        assert_eq!(stats.peak_active_bytes, (h + s) as u64);
        assert_eq!(stats.reserved_bytes, f.plan.slab_bytes() as u64);
        Ok(())
    }
}
