//! An owned lease book: the arena's lease rules over a plan, with no memory
//! and no borrows, for callers that cannot hold a [`Step`](crate::Step)
//! borrow (language bindings: the Python package keeps its slab in a torch
//! tensor and its leases in Python objects).
//!
//! It runs the checks of [`Arena::begin_step_in`](crate::Arena::begin_step_in),
//! [`Step::lease`](crate::Step::lease),
//! [`Lease::set_shape`](crate::Lease::set_shape) and
//! [`Step::enter`](crate::Step::enter) through the same internal book, so
//! it refuses the same requests with the same [`Error`]s, modes included. What the borrow
//! checker guarantees for `Step` and `Lease` becomes tokens checked at run
//! time: a [`StepToken`] names the open step, a [`LeaseToken`] one lease;
//! a token of an ended step or of a released lease is refused, never
//! honoured. Tokens are plain values: dropping one does nothing, a lease
//! ends with [`LeaseBook::release`] or with its step.

use super::book::{self, Book};
use super::checked::lifetime_ends;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::plan::{BufferId, Mode, Phase, Plan, PlannedBuffer, next_owner_id};
use crate::shape::check_view;

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
    /// The step's mode (its index in [`Plan::modes`]).
    pub mode: usize,
    /// The timeline slot (phase) left; see [`PlannedBuffer::phases`].
    pub from: usize,
    /// The slot entered, or `None` when the step ended.
    pub to: Option<usize>,
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

    /// Opens the next step, in the default mode's first phase. Fails with
    /// [`Error::StepStillOpen`] while a step is open.
    pub fn begin_step(&mut self) -> Result<StepToken> {
        self.open(0)
    }

    /// Opens the next step in `mode`, in its first phase: only persistent
    /// buffers and the mode's own can be leased, only its phases entered
    /// (as [`Arena::begin_step_in`](crate::Arena::begin_step_in)). Fails with
    /// [`Error::ForeignMode`] for a mode of another plan, and with
    /// [`Error::StepStillOpen`] while a step is open.
    ///
    /// ```
    /// use tensor_arena::arena::LeaseBook;
    /// use tensor_arena::{Error, Planner};
    /// let mut p = Planner::new();
    /// let train = p.mode("train")?;
    /// let eval = p.mode("eval")?;
    /// let h = p.step_in::<f32>(train, "h", &[32, 64])?;
    /// let eh = p.step_in::<f32>(eval, "h", &[256, 64])?;
    /// let mut book = LeaseBook::new(p.plan()?);
    /// let step = book.begin_step_in(book.mode("eval")?)?;
    /// assert_eq!(book.mode_name(), "eval");
    /// book.lease(step, eh.id(), Some(&[200, 64]))?;
    /// let e = book.lease(step, h.id(), None).unwrap_err();
    /// assert!(matches!(e, Error::WrongMode { .. }), "{e}");
    /// assert!(e.to_string().contains("'train'") && e.to_string().contains("'eval'"));
    /// book.end_step(step)?;
    /// assert!(matches!(book.begin_step_in(train), Ok(_)));
    /// # Ok::<(), tensor_arena::Error>(())
    /// ```
    pub fn begin_step_in(&mut self, mode: Mode) -> Result<StepToken> {
        let mode = book::mode_index(&self.plan, mode, "lease book")?;
        self.open(mode)
    }

    fn open(&mut self, mode: u16) -> Result<StepToken> {
        if let Some(open) = self.open {
            return Err(Error::StepStillOpen { open });
        }
        let step = self.book.counters.steps.get();
        self.book.open(&self.plan, mode);
        self.open = Some(step);
        Ok(StepToken {
            owner: self.owner,
            step,
        })
    }

    /// The handle of the plan's mode called `name` (`default` for the
    /// default mode): what a binding hands to its callers when it got the
    /// plan without its planner. [`Error::UnknownName`] if there is none.
    pub fn mode(&self, name: &str) -> Result<Mode> {
        let index = self
            .plan
            .modes()
            .iter()
            .position(|m| m.name() == name)
            .ok_or_else(|| Error::UnknownName {
                name: name.to_owned(),
                kind: "mode",
                context: "the plan",
            })?;
        Ok(Mode {
            planner: self.plan.id,
            // Fits: the planner hands out u16 mode indices.
            index: index as u16,
        })
    }

    /// Name of the open step's mode (of the last step when none is open).
    pub fn mode_name(&self) -> &str {
        self.plan
            .modes()
            .get(usize::from(self.book.mode.get()))
            .map_or(crate::plan::DEFAULT_MODE, |m| m.name())
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
    /// exceeds the capacity (or, for a buffer with per-dimension limits, a
    /// dimension beyond its padded one). A buffer of another mode than the
    /// step's is [`Error::WrongMode`]. A refused request changes nothing.
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
                let (name, padded) = (planned.name(), planned.padded_shape());
                match check_view(name, shape, slot.capacity, padded, slot.rule) {
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
    /// [`Lease::set_shape`](crate::Lease::set_shape): the buffer's
    /// [`ShapeRule`](crate::ShapeRule)) and returns its element count.
    pub fn reshape(&self, lease: LeaseToken, shape: &[usize]) -> Result<usize> {
        let planned = self.live_buffer(lease)?;
        check_view(
            planned.name(),
            shape,
            planned.capacity(),
            planned.padded_shape(),
            planned.shape_rule(),
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
    /// does: a phase of the step's mode ([`Error::WrongMode`] otherwise),
    /// phases only move forward, and no lease may outlive its span.
    /// Returns which lifetimes ended, for [`LeaseBook::ended`].
    pub fn enter(&mut self, step: StepToken, phase: Phase) -> Result<Ended> {
        self.check_step(step)?;
        let slot = self.book.phase_slot(&self.plan, phase, "lease book")?;
        let from = self.book.phase.get();
        self.book.enter(&self.plan, slot)?;
        Ok(self.ended_at(from, Some(slot)))
    }

    fn ended_at(&self, from: usize, to: Option<usize>) -> Ended {
        Ended {
            mode: usize::from(self.book.mode.get()),
            from,
            to,
        }
    }

    /// Name of the open step's phase (`"step"` when no phases were declared).
    pub fn phase(&self) -> &str {
        self.plan.phase_name(self.book.phase.get())
    }

    /// Ends `step`: every lease still live ends with it (their tokens go
    /// stale), the phase goes back to the first one, the step is counted.
    /// Returns which lifetimes ended: every step-scoped one of its mode.
    pub fn end_step(&mut self, step: StepToken) -> Result<Ended> {
        self.check_step(step)?;
        let from = self.book.phase.get();
        for (index, live) in self.live.iter_mut().enumerate() {
            if *live != 0 {
                self.book.release(&self.book.slots[index]);
                *live = 0;
            }
        }
        let ended = self.ended_at(from, None);
        self.book.end_step();
        self.open = None;
        Ok(ended)
    }

    /// The buffers whose lifetime `ended` closed: the ones checked mode
    /// poisons, by the arena's rule (every step-scoped buffer of the step's
    /// mode at the end of a step; at a phase change, those whose span's
    /// last phase was left). Poison whole slots ([`PlannedBuffer::range`]),
    /// as the arena does: the guard bytes are re-armed by the next lease.
    pub fn ended(&self, ended: Ended) -> impl Iterator<Item = &PlannedBuffer> + '_ {
        // Mode indices fit in u16 (the planner hands them out so).
        let mode = ended.mode as u16;
        self.book
            .slots
            .iter()
            .filter(move |slot| lifetime_ends(slot, mode, ended.from, ended.to))
            .map(|slot| &self.plan.buffers()[slot.index as usize])
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
                mode: 0,
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
        assert_eq!(
            e,
            Ended {
                mode: 0,
                from: 1,
                to: None
            }
        );
        assert_eq!(names(&book, e), ["h", "g", "s"]);
        Ok(())
    }

    struct Modes {
        plan: Plan,
        train: Mode,
        eval: Mode,
        fwd: Phase,
        bwd: Phase,
        efwd: Phase,
        w: BufferId,
        h: BufferId,
        g: BufferId,
        eh: BufferId,
        es: BufferId,
    }

    fn modes() -> Result<Modes> {
        let mut p = Planner::new();
        let train = p.mode("train")?;
        let eval = p.mode("eval")?;
        let fwd = p.phase_in(train, "forward")?;
        let bwd = p.phase_in(train, "backward")?;
        let efwd = p.phase_in(eval, "forward")?;
        let w = p.persistent::<f32>("w", &[64])?.id();
        let h = p.span::<f32>("h", &[32, 64], fwd, bwd)?.id();
        let g = p.span::<f32>("g", &[32, 64], bwd, bwd)?.id();
        let eh = p.span::<f32>("h", &[256, 64], efwd, efwd)?.id();
        let es = p.step_in::<u8>(eval, "s", &[100])?.id();
        Ok(Modes {
            plan: p.plan()?,
            train,
            eval,
            fwd,
            bwd,
            efwd,
            w,
            h,
            g,
            eh,
            es,
        })
    }

    #[test]
    fn modes_are_refused_as_the_arena_refuses_them() -> Result<()> {
        let m = modes()?;
        let mut book = LeaseBook::new(m.plan.clone());
        let mut arena = Arena::new(HostDevice::new(), m.plan.clone())?;
        let step = book.begin_step_in(m.eval)?;
        assert_eq!(book.mode_name(), "eval");
        assert_eq!(book.phase(), "forward");
        let s = arena.begin_step_in(m.eval)?;

        // A buffer of another mode, then a phase of another mode.
        let ours = book.lease(step, m.h, None).unwrap_err();
        let h = m.h.typed::<f32>().ok_or(Error::EmptyPlan)?;
        let theirs = s.lease(h).unwrap_err();
        assert_eq!(ours.to_string(), theirs.to_string());
        assert!(
            matches!(&ours, Error::WrongMode { what: "buffer", mode, step_mode, .. } if mode == "train" && step_mode == "eval"),
            "{ours}"
        );
        let ours = book.enter(step, m.bwd).unwrap_err();
        let theirs = s.enter(m.bwd).unwrap_err();
        assert_eq!(ours.to_string(), theirs.to_string());
        assert!(matches!(ours, Error::WrongMode { what: "phase", .. }));
        drop(s);

        // The mode's own buffers and the persistent ones.
        let eh = book.lease(step, m.eh, Some(&[256, 64]))?;
        assert_eq!(eh.offset, m.plan.buffer(m.eh)?.offset());
        book.lease(step, m.w, None)?;
        book.lease(step, m.es, None)?;
        book.enter(step, m.efwd)?;
        book.end_step(step)?;

        // A mode of another plan, and a mode by name.
        let other = modes()?;
        assert!(matches!(
            book.begin_step_in(other.train),
            Err(Error::ForeignMode {
                owner: "lease book",
                ..
            })
        ));
        assert!(matches!(
            book.mode("generate"),
            Err(Error::UnknownName { kind: "mode", .. })
        ));
        assert_eq!(book.mode("train")?, m.train);
        let step = book.begin_step_in(book.mode("train")?)?;
        assert!(matches!(
            book.begin_step_in(m.eval),
            Err(Error::StepStillOpen { .. })
        ));
        book.lease(step, m.h, None)?;
        assert!(matches!(
            book.lease(step, m.eh, None),
            Err(Error::WrongMode { .. })
        ));
        assert!(matches!(
            book.enter(step, m.efwd),
            Err(Error::WrongMode { .. })
        ));
        // The train mode's own phases, in order.
        book.enter(step, m.bwd)?;
        book.lease(step, m.g, None)?;
        assert!(matches!(
            book.enter(step, m.fwd),
            Err(Error::PhaseOrder { .. })
        ));
        Ok(())
    }

    #[test]
    fn ended_is_limited_to_the_steps_mode() -> Result<()> {
        let m = modes()?;
        let mut book = LeaseBook::new(m.plan.clone());
        let names = |book: &LeaseBook, e| {
            book.ended(e)
                .map(|b| b.name().to_owned())
                .collect::<Vec<_>>()
        };
        let step = book.begin_step_in(m.train)?;
        let e = book.enter(step, m.bwd)?;
        assert_eq!(names(&book, e), [] as [&str; 0], "h lives on in backward");
        let e = book.end_step(step)?;
        assert_eq!(e.mode, m.train.index());
        assert_eq!(names(&book, e), ["h", "g"]);
        let step = book.begin_step_in(m.eval)?;
        let e = book.end_step(step)?;
        assert_eq!(names(&book, e), ["h", "s"]);
        let eval: Vec<usize> = book.ended(e).map(|b| b.offset()).collect();
        let buffers = m.plan.buffers();
        assert_eq!(
            eval,
            [
                buffers[m.eh.index()].offset(),
                buffers[m.es.index()].offset()
            ]
        );
        Ok(())
    }

    #[test]
    fn per_dimension_buffers_keep_their_dimensions() -> Result<()> {
        let mut p = Planner::new();
        let any = p.step::<f32>("any", &[4, 16])?.id();
        let dims = p.declare_dyn(
            crate::BufferSpec::of::<f32>("dims", &[4, 16]).shape_rule(crate::ShapeRule::Dims),
        )?;
        let mut book = LeaseBook::new(p.plan()?);
        let step = book.begin_step()?;
        assert_eq!(book.lease(step, any, Some(&[2, 32]))?.elements, 64);
        let e = book.lease(step, dims, Some(&[2, 32])).unwrap_err();
        assert!(
            matches!(e, Error::ViewExceedsDims { dim: Some(1), .. }),
            "{e}"
        );
        let lease = book.lease(step, dims, Some(&[4, 16]))?;
        assert!(matches!(
            book.reshape(lease.token, &[64]),
            Err(Error::ViewExceedsDims { dim: None, .. })
        ));
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
