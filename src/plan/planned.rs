//! The result of planning: every buffer's padded shape, size and offset in
//! one slab.

use serde::Serialize;

use super::placement::{self, Greedy, Interval, SearchStatus};
use super::planner::PlannerConfig;
use super::spec::BufferId;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::{Shape, ShapeRule};

/// How a planned buffer lives (the plan's own copy of the declared
/// [`Lifetime`](crate::Lifetime), with phases resolved to indices).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LifetimeKind {
    /// The whole run.
    Persistent,
    /// A whole step.
    Step,
    /// A span of phases.
    Phases,
}

/// One buffer of a [`Plan`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlannedBuffer {
    pub(crate) name: String,
    pub(crate) dtype: DType,
    pub(crate) shape: Shape,
    pub(crate) padded: Shape,
    pub(crate) bytes: usize,
    pub(crate) size: usize,
    pub(crate) offset: usize,
    pub(crate) kind: LifetimeKind,
    pub(crate) first_phase: usize,
    pub(crate) last_phase: usize,
    /// The buffer's mode (index into [`Plan::modes`]); `None` for
    /// persistent buffers.
    #[serde(skip)]
    pub(crate) mode: Option<u16>,
    #[serde(skip)]
    pub(crate) rule: ShapeRule,
    /// Steps a recorder learned the spec from; `None` when declared by hand.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) recorded_steps: Option<u64>,
}

impl PlannedBuffer {
    /// The declared name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// The declared (largest) shape.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }
    /// The shape after rounding: the capacity of every lease of this buffer.
    pub fn padded_shape(&self) -> &Shape {
        &self.padded
    }
    /// Elements the buffer can hold (of the padded shape).
    pub fn capacity(&self) -> usize {
        self.padded.elements()
    }
    /// Bytes of the padded shape.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
    /// Bytes reserved for it in the slab (device padding and alignment included).
    pub fn size(&self) -> usize {
        self.size
    }
    /// Byte offset in the slab.
    pub fn offset(&self) -> usize {
        self.offset
    }
    /// How it lives.
    pub fn lifetime(&self) -> LifetimeKind {
        self.kind
    }
    /// First and last slot (inclusive) of the plan's timeline in which it
    /// is alive. The timeline runs mode after mode: a mode's phase `i` is
    /// slot [`PlannedMode::first_slot`]` + i` (a mode without phases takes
    /// one slot). With only the default mode, slots are phase indices.
    pub fn phases(&self) -> (usize, usize) {
        (self.first_phase, self.last_phase)
    }

    /// The mode of a step-scoped buffer (its index in [`Plan::modes`]);
    /// `None` for a persistent buffer, which every mode shares.
    pub fn mode(&self) -> Option<usize> {
        self.mode.map(usize::from)
    }

    /// The shape rule its views are checked by.
    pub fn shape_rule(&self) -> ShapeRule {
        self.rule
    }
    /// Its time interval for placement: `[first, last + 1)` in phase units.
    pub fn interval(&self) -> Interval {
        Interval {
            lower: self.first_phase,
            upper: self.last_phase + 1,
            size: self.size,
        }
    }
    /// Whether both buffers are alive in some common phase (persistent
    /// buffers are alive in all of them).
    pub fn overlaps_in_time(&self, other: &PlannedBuffer) -> bool {
        self.interval().overlaps_in_time(&other.interval())
    }
    /// Number of recorded steps the spec was learned from, or `None` if it
    /// was declared by hand.
    pub fn recorded_steps(&self) -> Option<u64> {
        self.recorded_steps
    }
    /// Byte range in the slab.
    pub fn range(&self) -> std::ops::Range<usize> {
        self.offset..self.offset + self.size
    }
}

/// A placement of declared buffers in one slab. Build it with
/// [`Planner::plan`](crate::Planner::plan); reserve it with
/// [`Arena::new`](crate::Arena::new).
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub(crate) id: u64,
    pub(crate) config: PlannerConfig,
    /// Every mode, the default one first.
    pub(crate) modes: Vec<PlannedMode>,
    pub(crate) buffers: Vec<PlannedBuffer>,
    pub(crate) slab_bytes: usize,
    pub(crate) lower_bound: usize,
    pub(crate) persistent_bytes: usize,
    pub(crate) placement: PlacementSummary,
}

/// One mode of a [`Plan`]: its phases, where they sit on the plan's
/// timeline, and what a step of the mode needs.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedMode {
    pub(crate) name: String,
    pub(crate) phases: Vec<String>,
    pub(crate) first_slot: usize,
    pub(crate) slots: usize,
    pub(crate) footprint: usize,
    pub(crate) lower_bound: usize,
    pub(crate) buffers: usize,
}

impl PlannedMode {
    pub(crate) fn new(name: &str, phases: Vec<String>, first_slot: usize, slots: usize) -> Self {
        PlannedMode {
            name: name.to_owned(),
            phases,
            first_slot,
            slots,
            footprint: 0,
            lower_bound: 0,
            buffers: 0,
        }
    }

    /// The mode's name (`default` for the mode every planner starts with).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its phases, in order.
    pub fn phases(&self) -> &[String] {
        &self.phases
    }

    /// The timeline slot of its first phase.
    pub fn first_slot(&self) -> usize {
        self.first_slot
    }

    /// Timeline slots it takes: its number of phases, at least 1.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Whether timeline slot `slot` is one of this mode's.
    pub fn contains_slot(&self, slot: usize) -> bool {
        (self.first_slot..self.first_slot + self.slots).contains(&slot)
    }

    /// Slab bytes a step of this mode touches: from offset 0 (the
    /// persistent buffers) to the end of its highest buffer.
    pub fn footprint(&self) -> usize {
        self.footprint
    }

    /// The persistent bytes plus the largest total of this mode's
    /// step-scoped bytes alive at one time: no placement of the mode can
    /// be smaller.
    pub fn lower_bound(&self) -> usize {
        self.lower_bound
    }

    /// Step-scoped buffers of the mode.
    pub fn buffers(&self) -> usize {
        self.buffers
    }

    /// Whether the mode has neither phases nor step-scoped buffers (the
    /// default mode of a planner that declared modes of its own).
    pub fn is_unused(&self) -> bool {
        self.phases.is_empty() && self.buffers == 0
    }
}

/// How a [`Plan`]'s offsets were found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PlacementSummary {
    /// The greedy placer whose placement was kept, if greedy's was.
    pub greedy: Option<Greedy>,
    /// What the search established, if it ran.
    pub search_status: Option<SearchStatus>,
    /// Whether the slab is proven as small as these buffers allow (given
    /// persistent buffers at the bottom).
    pub optimal: bool,
}

impl Plan {
    /// Places `buffers` (offsets ignored on input): persistent ones stacked
    /// from offset 0, the rest above them by `config.strategy`.
    pub(crate) fn build(
        id: u64,
        config: PlannerConfig,
        mut modes: Vec<PlannedMode>,
        mut buffers: Vec<PlannedBuffer>,
    ) -> Result<Plan> {
        // If the sum of all sizes fits, every offset and height below does.
        buffers
            .iter()
            .try_fold(0usize, |acc, b| acc.checked_add(b.size))
            .ok_or_else(|| Error::SizeOverflow {
                buffer: "<slab>".to_owned(),
                shape: Vec::new(),
                what: "the total size of all buffers",
                limit: usize::MAX as u64,
            })?;

        // Buffers alive for the whole run can always sit below the rest
        // without raising the optimum, and keeping them contiguous makes the
        // slab's persistent part easy to guard and inspect.
        let mut persistent_bytes = 0;
        for b in buffers
            .iter_mut()
            .filter(|b| b.kind == LifetimeKind::Persistent)
        {
            b.offset = persistent_bytes;
            persistent_bytes += b.size;
        }
        let scoped: Vec<usize> = (0..buffers.len())
            .filter(|&i| buffers[i].kind != LifetimeKind::Persistent)
            .collect();
        let intervals: Vec<Interval> = scoped.iter().map(|&i| buffers[i].interval()).collect();
        let mut strategy = config.strategy;
        if let Some(capacity) = strategy.capacity {
            // The persistent part is fixed; the rest gets what is left.
            let Some(left) = capacity.checked_sub(persistent_bytes) else {
                return Err(Error::OverCapacity {
                    needed: persistent_bytes,
                    capacity,
                    lower_bound: persistent_bytes + placement::lower_bound(&intervals),
                    reason: "the persistent buffers alone exceed it",
                });
            };
            strategy.capacity = Some(left);
        }
        let solution = placement::solve(&intervals, &strategy)?;
        let lower_bound = persistent_bytes + solution.lower_bound;
        if let Some(capacity) = config.strategy.capacity
            && !solution.fits
        {
            return Err(Error::OverCapacity {
                needed: persistent_bytes + solution.height,
                capacity,
                lower_bound,
                reason: match solution.search_status {
                    Some(SearchStatus::Infeasible) => "proven: no placement fits",
                    Some(_) => "no placement within it was found in the time limit",
                    None => "greedy placement does not fit",
                },
            });
        }
        for (&i, off) in scoped.iter().zip(&solution.offsets) {
            buffers[i].offset = persistent_bytes + off;
        }
        let slab_bytes = buffers.iter().map(|b| b.offset + b.size).max().unwrap_or(0);
        for (m, mode) in modes.iter_mut().enumerate() {
            let mine: Vec<&PlannedBuffer> = buffers
                .iter()
                .filter(|b| b.mode.map(usize::from) == Some(m))
                .collect();
            let intervals: Vec<Interval> = mine.iter().map(|b| b.interval()).collect();
            mode.buffers = mine.len();
            mode.lower_bound = persistent_bytes + placement::lower_bound(&intervals);
            mode.footprint = mine
                .iter()
                .map(|b| b.offset + b.size)
                .max()
                .unwrap_or(0)
                .max(persistent_bytes);
        }
        let placement = PlacementSummary {
            greedy: solution.greedy,
            search_status: solution.search_status,
            optimal: solution.optimal,
        };
        Ok(Plan {
            id,
            config,
            modes,
            buffers,
            slab_bytes,
            lower_bound,
            persistent_bytes,
            placement,
        })
    }

    /// Every planned buffer, in declaration order.
    pub fn buffers(&self) -> &[PlannedBuffer] {
        &self.buffers
    }

    /// The planned buffer behind `id`, or an error if the handle comes from
    /// another planner (or was declared after this plan was made).
    pub fn buffer(&self, id: BufferId) -> Result<&PlannedBuffer> {
        self.check(id)?;
        Ok(&self.buffers[id.index()])
    }

    #[inline]
    pub(crate) fn check(&self, id: BufferId) -> Result<()> {
        if id.planner != self.id || id.index() >= self.buffers.len() {
            return Err(Error::ForeignHandle {
                index: id.index(),
                owner: "plan",
            });
        }
        Ok(())
    }

    /// Names of the default mode's phases, in order: every phase, unless
    /// modes were declared (see [`Plan::modes`]).
    pub fn phases(&self) -> &[String] {
        self.modes.first().map_or(&[], |m| m.phases.as_slice())
    }

    /// Every mode, the default one first (it exists even when unused; see
    /// [`PlannedMode::is_unused`]).
    pub fn modes(&self) -> &[PlannedMode] {
        &self.modes
    }

    /// The mode holding timeline slot `slot`.
    pub(crate) fn mode_of_slot(&self, slot: usize) -> Option<&PlannedMode> {
        self.modes.iter().find(|m| m.contains_slot(slot))
    }

    /// Whether modes were declared (beyond the default one).
    pub fn has_modes(&self) -> bool {
        self.modes.len() > 1
    }

    /// Name of the phase at timeline slot `slot` (`"step"` for the slot of
    /// a mode without phases).
    pub fn phase_name(&self, slot: usize) -> &str {
        self.mode_of_slot(slot)
            .and_then(|m| m.phases.get(slot - m.first_slot))
            .map_or("step", String::as_str)
    }

    /// Bytes of the one slab the plan needs.
    pub fn slab_bytes(&self) -> usize {
        self.slab_bytes
    }

    /// The largest total of bytes alive at one time: no placement of these
    /// buffers can be smaller.
    pub fn lower_bound(&self) -> usize {
        self.lower_bound
    }

    /// How the offsets were found.
    pub fn placement(&self) -> &PlacementSummary {
        &self.placement
    }

    /// Whether the slab is proven minimal for these buffers (persistent
    /// ones at the bottom): it equals the lower bound, or the search proved
    /// nothing lower exists.
    pub fn is_optimal(&self) -> bool {
        self.placement.optimal
    }

    /// Bytes of the persistent buffers (the bottom of the slab).
    pub fn persistent_bytes(&self) -> usize {
        self.persistent_bytes
    }

    /// Bytes added by rounding, device padding and alignment, summed over
    /// buffers: reserved size minus declared size.
    pub fn padding_waste(&self) -> usize {
        self.buffers
            .iter()
            .map(|b| b.size - b.shape.elements() * b.dtype.size())
            .sum()
    }

    /// Slab size over lower bound (1.0 is a perfect packing). With modes,
    /// the slab is the persistent bytes plus the largest mode's share, and
    /// the lower bound the largest mode's lower bound.
    pub fn footprint_ratio(&self) -> f64 {
        self.slab_bytes as f64 / self.lower_bound.max(1) as f64
    }

    /// Alignment of every offset and of the slab start.
    pub fn offset_align(&self) -> usize {
        self.config.offset_align
    }

    /// Checks the plan's invariants: offsets aligned, buffers alive together
    /// never share bytes, everything inside the slab.
    pub fn validate(&self) -> std::result::Result<(), placement::Violation> {
        if let Some(i) = self
            .buffers
            .iter()
            .position(|b| b.offset % self.config.offset_align != 0)
        {
            return Err(placement::Violation::Misaligned {
                item: i,
                align: self.config.offset_align,
            });
        }
        let items: Vec<Interval> = self.buffers.iter().map(PlannedBuffer::interval).collect();
        let offsets: Vec<usize> = self.buffers.iter().map(|b| b.offset).collect();
        placement::validate(&items, &offsets, Some(self.slab_bytes))
    }
}

#[cfg(test)]
mod tests {
    use crate::{Lifetime, Planner};

    #[test]
    fn persistent_buffers_sit_below_and_never_share() {
        let mut p = Planner::new();
        let a = p.phase("a").unwrap();
        let b = p.phase("b").unwrap();
        let w1 = p.persistent::<f32>("w1", &[100]).unwrap();
        let t1 = p.span::<f32>("t1", &[1000], a, a).unwrap();
        let w2 = p.persistent::<f32>("w2", &[100]).unwrap();
        let t2 = p.span::<f32>("t2", &[1000], b, b).unwrap();
        let plan = p.plan().unwrap();
        plan.validate().unwrap();
        let (w1, w2) = (plan.buffer(w1.id()).unwrap(), plan.buffer(w2.id()).unwrap());
        assert_eq!(w1.offset(), 0);
        assert_eq!(w2.offset(), w1.size());
        assert_eq!(plan.persistent_bytes(), w1.size() + w2.size());
        let (t1, t2) = (plan.buffer(t1.id()).unwrap(), plan.buffer(t2.id()).unwrap());
        assert_eq!(t1.offset(), plan.persistent_bytes());
        assert_eq!(t1.offset(), t2.offset());
        assert_eq!(plan.slab_bytes(), plan.lower_bound());
    }

    #[test]
    fn step_buffers_never_share() {
        let mut p = Planner::new();
        p.phase("only").unwrap();
        let x = p.step::<f32>("x", &[64]).unwrap();
        let y = p
            .declare::<f32>(crate::BufferSpec::of::<f32>("y", &[64]).lifetime(Lifetime::Step))
            .unwrap();
        let plan = p.plan().unwrap();
        let (x, y) = (plan.buffer(x.id()).unwrap(), plan.buffer(y.id()).unwrap());
        assert!(x.range().end <= y.range().start || y.range().end <= x.range().start);
    }

    #[test]
    fn padding_waste_and_ratio() {
        let mut p = Planner::new();
        p.step::<f32>("x", &[10]).unwrap(); // 40 declared bytes, 512 reserved
        let plan = p.plan().unwrap();
        assert_eq!(plan.padding_waste(), 512 - 40);
        assert_eq!(plan.footprint_ratio(), 1.0);
    }

    #[test]
    fn foreign_handles_are_rejected() {
        let mut p = Planner::new();
        p.step::<f32>("x", &[10]).unwrap();
        let plan = p.plan().unwrap();
        let late = p.step::<f32>("late", &[10]).unwrap();
        assert!(plan.buffer(late.id()).is_err());
        let mut q = Planner::new();
        let other = q.step::<f32>("x", &[10]).unwrap();
        assert!(plan.buffer(other.id()).is_err());
    }
}
