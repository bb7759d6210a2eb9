//! The lease book: which buffers are leased, which buffers share bytes, and
//! the running counters. Built once when the arena is made; the hot path
//! only flips flags and adds numbers.

use std::cell::Cell;

use rustc_hash::FxHashMap;

use crate::error::{Error, Result};
use crate::plan::{LifetimeKind, Mode, Phase, Plan};
use crate::shape::{MAX_DIMS, ShapeRule};

/// What a lease needs to know about its buffer, copied out of the plan into
/// one flat row so the hot path touches a single cache line or two.
#[derive(Debug)]
pub(crate) struct Slot {
    /// The buffer has a live lease.
    pub live: Cell<bool>,
    /// Leases of this buffer so far (the arena's totals are sums over
    /// slots, so the hot path touches only this slot's cache line).
    pub leases: Cell<u64>,
    /// `aliases[alias.0..alias.1]`: buffers whose slab bytes intersect this
    /// one's.
    pub alias: (u32, u32),
    /// Position in the plan.
    pub index: u32,
    pub offset: usize,
    pub size: usize,
    /// Bytes a live lease adds to the step-scoped active bytes: `size`,
    /// or 0 for a persistent buffer (always allocated, counted apart), so
    /// the hot path needs no branch.
    pub counted: usize,
    pub capacity: usize,
    /// Bytes of the padded shape: guard bytes start right after.
    pub capacity_bytes: usize,
    pub elements: usize,
    /// First and last timeline slot of its lifetime (a step-scoped buffer's
    /// mode's slots for `Step`; every slot for `Persistent`).
    pub first: usize,
    pub last: usize,
    pub kind: LifetimeKind,
    /// Its mode (`u16::MAX` for persistent buffers).
    pub mode: u16,
    pub rule: ShapeRule,
    /// Checked mode only: (lease number, step, phase) of the last lease.
    pub holder: Cell<(u64, u64, usize)>,
    pub ndim: u8,
    pub dims: [usize; MAX_DIMS],
}

/// Per-arena lease state, mutated through shared references from a step.
#[derive(Debug)]
pub(crate) struct Book {
    pub slots: Box<[Slot]>,
    /// Alias lists of all slots, one after the other (one allocation).
    aliases: Box<[u32]>,
    /// Buffers with a phase span, checked when the step changes phase.
    spanned: Box<[u32]>,
    /// Per mode: its step-scoped buffers by name (for `Step::temp`).
    names: Box<[FxHashMap<Box<str>, u32>]>,
    /// Persistent buffers by name.
    persistent_names: FxHashMap<Box<str>, u32>,
    /// Current timeline slot (phase) of the open step.
    pub phase: Cell<usize>,
    /// Mode of the open step.
    pub mode: Cell<u16>,
    pub counters: Counters,
}

/// Running totals behind [`ArenaStats`](crate::ArenaStats). Active bytes
/// count step-scoped leases only (see `Slot::counted`).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub active_bytes: Cell<u64>,
    pub peak_active_bytes: Cell<u64>,
    pub live_leases: Cell<u64>,
    pub peak_live_leases: Cell<u64>,
    pub steps: Cell<u64>,
}

fn add(cell: &Cell<u64>, v: u64) -> u64 {
    let n = cell.get().wrapping_add(v);
    cell.set(n);
    n
}

impl Book {
    pub fn new(plan: &Plan) -> Book {
        let bufs = plan.buffers();
        let n = bufs.len();
        // Sweep buffers in offset order: the ones whose bytes intersect
        // buffer i are those starting before i ends.
        let mut by_offset: Vec<usize> = (0..n).collect();
        by_offset.sort_by_key(|&i| bufs[i].offset());
        let mut pairs: Vec<(u32, u32)> = Vec::new();
        for (k, &i) in by_offset.iter().enumerate() {
            let end = bufs[i].range().end;
            for &j in &by_offset[k + 1..] {
                if bufs[j].offset() >= end {
                    break;
                }
                // Indices fit in u32: the planner hands out u32 indices.
                pairs.push((i as u32, j as u32));
                pairs.push((j as u32, i as u32));
            }
        }
        pairs.sort_unstable();
        let mut alias_start = vec![0u32; n + 1];
        for &(i, _) in &pairs {
            alias_start[i as usize + 1] += 1;
        }
        for i in 0..n {
            alias_start[i + 1] += alias_start[i];
        }
        let spanned = (0..n)
            .filter(|&i| bufs[i].lifetime() == LifetimeKind::Phases)
            .map(|i| i as u32)
            .collect();
        let mut names: Vec<FxHashMap<Box<str>, u32>> =
            plan.modes().iter().map(|_| FxHashMap::default()).collect();
        let mut persistent_names = FxHashMap::default();
        for (i, b) in bufs.iter().enumerate() {
            let map = match b.mode() {
                Some(m) => &mut names[m],
                None => &mut persistent_names,
            };
            map.insert(Box::from(b.name()), i as u32);
        }
        let slots = bufs
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let mut dims = [0; MAX_DIMS];
                dims[..b.shape().len()].copy_from_slice(b.shape());
                let (first, last) = b.phases();
                Slot {
                    live: Cell::new(false),
                    leases: Cell::new(0),
                    alias: (alias_start[i], alias_start[i + 1]),
                    // Fits: the planner hands out u32 indices.
                    index: i as u32,
                    offset: b.offset(),
                    size: b.size(),
                    counted: if b.lifetime() == LifetimeKind::Persistent {
                        0
                    } else {
                        b.size()
                    },
                    capacity: b.capacity(),
                    capacity_bytes: b.bytes(),
                    elements: b.shape().elements(),
                    first,
                    last,
                    kind: b.lifetime(),
                    // Modes fit in u16: the planner hands out u16 indices.
                    mode: b.mode().map_or(u16::MAX, |m| m as u16),
                    rule: b.shape_rule(),
                    holder: Cell::new((0, 0, 0)),
                    ndim: b.shape().len() as u8,
                    dims,
                }
            })
            .collect();
        Book {
            slots,
            aliases: pairs.into_iter().map(|(_, j)| j).collect(),
            spanned,
            names: names.into_boxed_slice(),
            persistent_names,
            phase: Cell::new(0),
            mode: Cell::new(0),
            counters: Counters::default(),
        }
    }

    /// The buffer called `name` in mode `mode`: `Ok(index)` for one of its
    /// step-scoped buffers, `Err(Some(index))` for a persistent buffer,
    /// `Err(None)` when there is none. Hashes the name; allocates nothing.
    #[inline]
    pub fn find(&self, mode: u16, name: &str) -> std::result::Result<usize, Option<usize>> {
        match self.names.get(usize::from(mode)).and_then(|m| m.get(name)) {
            Some(&i) => Ok(i as usize),
            None => Err(self.persistent_names.get(name).map(|&i| i as usize)),
        }
    }

    /// Marks buffer `index` leased, or says why it cannot be. `None` if the
    /// index is not one of this book's buffers. Always inlined into the
    /// lease (see `Step::lease`).
    #[inline(always)]
    pub fn acquire(&self, plan: &Plan, index: usize) -> Option<Result<&Slot>> {
        let slot = self.slots.get(index)?;
        let phase = self.phase.get();
        // Step-scoped buffers live in their mode's slots (all of them for
        // `Step`), so one range check refuses other modes and other phases.
        if slot.kind != LifetimeKind::Persistent && (phase < slot.first || phase > slot.last) {
            return Some(Err(self.outside_phase(plan, index)));
        }
        if slot.live.get() {
            return Some(Err(Error::AlreadyLeased {
                buffer: plan.buffers()[index].name().to_owned(),
            }));
        }
        let aliases = self
            .aliases
            .get(slot.alias.0 as usize..slot.alias.1 as usize)
            .unwrap_or_default();
        if let Some(&j) = aliases.iter().find(|&&j| self.slots[j as usize].live.get()) {
            return Some(Err(self.overlap(plan, index, j as usize)));
        }
        slot.live.set(true);
        let c = &self.counters;
        let size = slot.counted as u64;
        let active = add(&c.active_bytes, size);
        c.peak_active_bytes
            .set(c.peak_active_bytes.get().max(active));
        let live = add(&c.live_leases, 1);
        c.peak_live_leases.set(c.peak_live_leases.get().max(live));
        add(&slot.leases, 1);
        Some(Ok(slot))
    }

    #[cold]
    fn outside_phase(&self, plan: &Plan, index: usize) -> Error {
        let slot = &self.slots[index];
        let mode = self.mode.get();
        if slot.mode != mode {
            return Error::WrongMode {
                what: "buffer",
                name: plan.buffers()[index].name().to_owned(),
                mode: mode_name(plan, slot.mode),
                step_mode: mode_name(plan, mode),
            };
        }
        let name = |i: usize| plan.phase_name(i).to_owned();
        Error::OutsidePhase {
            buffer: plan.buffers()[index].name().to_owned(),
            current: name(self.phase.get()),
            first: name(slot.first),
            last: name(slot.last),
        }
    }

    #[cold]
    fn overlap(&self, plan: &Plan, index: usize, other: usize) -> Error {
        let (b, o) = (&plan.buffers()[index], &plan.buffers()[other]);
        Error::LeaseOverlap {
            buffer: b.name().to_owned(),
            other: o.name().to_owned(),
            start: b.offset().max(o.offset()),
            end: b.range().end.min(o.range().end),
        }
    }

    /// Ends the lease of buffer `index`.
    #[inline]
    pub fn release(&self, slot: &Slot) {
        let size = slot.counted;
        slot.live.set(false);
        let c = &self.counters;
        c.active_bytes.set(c.active_bytes.get() - size as u64);
        c.live_leases.set(c.live_leases.get() - 1);
    }

    /// Moves the open step to phase `next`, refusing to go backwards or to
    /// leave a lease live past its span.
    pub fn enter(&self, plan: &Plan, next: usize) -> Result<()> {
        let current = self.phase.get();
        if next < current {
            return Err(Error::PhaseOrder {
                current: plan.phase_name(current).to_owned(),
                requested: plan.phase_name(next).to_owned(),
            });
        }
        // With no live lease there is nothing that could outlive its span.
        let live_spans = (self.counters.live_leases.get() != 0)
            .then_some(self.spanned.iter())
            .into_iter()
            .flatten()
            .map(|&i| &self.slots[i as usize]);
        for slot in live_spans {
            if slot.last < next && slot.live.get() {
                return Err(Error::LeaseOutlivesSpan {
                    buffer: plan.buffers()[slot.index as usize].name().to_owned(),
                    phase: plan.phase_name(next).to_owned(),
                    last: plan.phase_name(slot.last).to_owned(),
                });
            }
        }
        self.phase.set(next);
        Ok(())
    }

    /// Opens a step of mode `mode` (an index of `plan`'s modes, checked by
    /// [`mode_index`]): its first phase.
    pub fn open(&self, plan: &Plan, mode: u16) {
        let first = plan
            .modes()
            .get(usize::from(mode))
            .map_or(0, |m| m.first_slot());
        self.mode.set(mode);
        self.phase.set(first);
    }

    /// The timeline slot of `phase`, a phase of the open step's mode: the
    /// checks of [`Step::enter`](crate::Step::enter), for the arena and the
    /// owned lease book (`owner` names which in the error).
    pub fn phase_slot(&self, plan: &Plan, phase: Phase, owner: &'static str) -> Result<usize> {
        let mode = plan.modes().get(usize::from(phase.mode));
        let Some(mode) =
            mode.filter(|m| phase.planner == plan.id && phase.index() < m.phases().len())
        else {
            return Err(Error::ForeignPhase {
                index: phase.index(),
                owner,
            });
        };
        if phase.mode != self.mode.get() {
            return Err(Error::WrongMode {
                what: "phase",
                name: mode.phases()[phase.index()].clone(),
                mode: mode.name().to_owned(),
                step_mode: mode_name(plan, self.mode.get()),
            });
        }
        Ok(mode.first_slot() + phase.index())
    }

    /// Clears flags of leases that were leaked with `mem::forget`: once the
    /// arena is borrowed exclusively again no lease can be alive.
    pub fn clear_leaked(&self) {
        let c = &self.counters;
        if c.live_leases.get() != 0 {
            self.slots.iter().for_each(|s| s.live.set(false));
            c.live_leases.set(0);
            c.active_bytes.set(0);
        }
    }

    /// Closes a step: back to the first phase, one more step counted.
    pub fn end_step(&self) {
        self.phase.set(0);
        add(&self.counters.steps, 1);
    }

    /// Leases handed out so far, and the slab bytes of the step-scoped
    /// ones.
    pub fn totals(&self) -> (u64, u64) {
        self.slots.iter().fold((0, 0), |(n, bytes), s| {
            let k = s.leases.get();
            (n + k, bytes + k * s.counted as u64)
        })
    }

    /// Number of buffers sharing bytes with buffer `index`.
    #[cfg(test)]
    pub fn alias_count(&self, index: usize) -> usize {
        let (lo, hi) = self.slots[index].alias;
        (hi - lo) as usize
    }
}

/// The index of `mode` in `plan`, or [`Error::ForeignMode`] (naming
/// `owner`) for a mode of another planner.
pub(crate) fn mode_index(plan: &Plan, mode: Mode, owner: &'static str) -> Result<u16> {
    if mode.planner != plan.id || mode.index() >= plan.modes().len() {
        return Err(Error::ForeignMode {
            index: mode.index(),
            owner,
        });
    }
    Ok(mode.index)
}

/// The name of mode `mode` of `plan`.
pub(crate) fn mode_name(plan: &Plan, mode: u16) -> String {
    plan.modes()
        .get(usize::from(mode))
        .map_or_else(|| "(none)".to_owned(), |m| m.name().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Planner;

    #[test]
    fn aliases_are_symmetric_and_exact() {
        let mut p = Planner::new();
        let a = p.phase("a").unwrap();
        let b = p.phase("b").unwrap();
        p.persistent::<f32>("w", &[64]).unwrap();
        p.span::<f32>("x", &[256], a, a).unwrap();
        p.span::<f32>("y", &[256], b, b).unwrap();
        p.span::<f32>("z", &[64], b, b).unwrap();
        let plan = p.plan().unwrap();
        let book = Book::new(&plan);
        let bufs = plan.buffers();
        for i in 0..bufs.len() {
            let expected = (0..bufs.len())
                .filter(|&j| {
                    j != i
                        && bufs[i].range().start < bufs[j].range().end
                        && bufs[j].range().start < bufs[i].range().end
                })
                .count();
            assert_eq!(book.alias_count(i), expected, "buffer {i}");
        }
        assert_eq!(book.alias_count(0), 0, "persistent buffers share nothing");
    }

    #[test]
    fn live_bytes_are_never_granted_twice() {
        // The phase rules already keep aliasing buffers apart; the byte check
        // is the last line of defence, exercised here by moving the phase
        // under a live lease.
        let mut p = Planner::new();
        let a = p.phase("a").unwrap();
        let b = p.phase("b").unwrap();
        p.span::<f32>("x", &[256], a, a).unwrap();
        p.span::<f32>("y", &[64], b, b).unwrap();
        let plan = p.plan().unwrap();
        let book = Book::new(&plan);
        book.acquire(&plan, 0).unwrap().unwrap();
        book.phase.set(1);
        let err = book.acquire(&plan, 1).unwrap().unwrap_err();
        assert!(
            matches!(&err, Error::LeaseOverlap { buffer, other, .. } if buffer == "y" && other == "x"),
            "{err}"
        );
        book.release(&book.slots[0]);
        book.acquire(&plan, 1).unwrap().unwrap();
        assert!(book.acquire(&plan, 2).is_none());
        assert_eq!(book.counters.live_leases.get(), 1);
    }
}
