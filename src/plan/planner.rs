//! The planner: collects declarations at startup and turns them into a
//! [`Plan`].

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};

use super::layout::{self, BufferLayout};
use super::placement::Strategy;
use super::planned::{LifetimeKind, Plan, PlannedBuffer, PlannedMode};
use super::spec::{Buffer, BufferId, BufferSpec, Lifetime, Mode, Phase};
use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::shape::{Rounding, Shape};

/// Offsets are never aligned below this (the ACL rule for a 64-byte aligned
/// start of every piece carved from one allocation).
pub const MIN_OFFSET_ALIGN: usize = 64;

/// The default offset alignment: torch_npu rounds every block to 512 bytes.
pub const DEFAULT_OFFSET_ALIGN: usize = 512;

/// Planner settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannerConfig {
    /// Alignment of every buffer offset and of the slab start, in bytes: a
    /// power of two, at least [`MIN_OFFSET_ALIGN`].
    pub offset_align: usize,
    /// Rounding for specs that do not choose their own.
    pub default_rounding: Rounding,
    /// How offsets are assigned ([`Strategy::auto`] by default: best of the
    /// greedy orders, and the search only when `capacity` is set and greedy
    /// misses it). A capacity covers the whole slab, persistent buffers
    /// included.
    pub strategy: Strategy,
}

impl Default for PlannerConfig {
    fn default() -> Self {
        PlannerConfig {
            offset_align: DEFAULT_OFFSET_ALIGN,
            default_rounding: Rounding::default(),
            strategy: Strategy::auto(),
        }
    }
}

static NEXT_PLANNER_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh identity for a planner or for anything that hands out phase and
/// buffer handles of its own (a recorder), so handles never cross owners.
/// The index a new mode `name` takes after `declared` modes (`taken`:
/// whether one of them has that name): the checks every declaration of a
/// mode makes, in the planner and in the recorder's
/// [`SiteBook`](crate::record::SiteBook).
pub(crate) fn new_mode_index(name: &str, taken: bool, declared: usize) -> Result<u16> {
    if name.is_empty() {
        return Err(Error::EmptyName);
    }
    if taken {
        return Err(Error::DuplicateName {
            name: name.to_owned(),
        });
    }
    u16::try_from(declared).map_err(|_| Error::SizeOverflow {
        buffer: name.to_owned(),
        shape: Vec::new(),
        what: "the number of modes",
        limit: u64::from(u16::MAX),
    })
}

pub(crate) fn next_owner_id() -> u64 {
    NEXT_PLANNER_ID.fetch_add(1, Ordering::Relaxed)
}

/// The name of the mode every planner starts with.
pub const DEFAULT_MODE: &str = "default";

/// Collects modes, phases and buffer specs, then assigns every buffer an
/// offset in one slab.
///
/// Names: a mode's phases and step-scoped buffers have names unique within
/// the mode (two modes may both have a `forward` phase and an `h` buffer);
/// persistent buffers, which every mode shares, have names unique across
/// all modes.
///
/// ```
/// use tensor_arena::{Lifetime, Planner};
/// let mut planner = Planner::new();
/// let fwd = planner.phase("forward")?;
/// let bwd = planner.phase("backward")?;
/// let w = planner.persistent::<f32>("w", &[128, 64])?;
/// let h = planner.span::<f32>("h", &[32, 64], fwd, fwd)?;
/// let g = planner.span::<f32>("g", &[32, 64], bwd, bwd)?;
/// let plan = planner.plan()?;
/// // h and g are never alive together, so they share bytes.
/// assert_eq!(plan.buffer(h.id())?.offset(), plan.buffer(g.id())?.offset());
/// assert!(plan.slab_bytes() >= plan.lower_bound());
/// # let _ = w;
/// # Ok::<(), tensor_arena::Error>(())
/// ```
#[derive(Debug)]
pub struct Planner {
    id: u64,
    config: PlannerConfig,
    /// Mode 0 is the default mode.
    modes: Vec<ModeDecl>,
    specs: Vec<Declared>,
    /// Names of persistent buffers (unique across every mode).
    persistent_names: HashSet<String>,
}

/// A declared mode: its name, phases, and the names used in it.
#[derive(Debug, Clone)]
struct ModeDecl {
    name: String,
    phases: Vec<String>,
    /// Phase and step-scoped buffer names of the mode.
    names: HashSet<String>,
}

impl ModeDecl {
    fn new(name: &str) -> ModeDecl {
        ModeDecl {
            name: name.to_owned(),
            phases: Vec::new(),
            names: HashSet::new(),
        }
    }
}

/// A spec that passed validation, with its byte layout computed.
#[derive(Debug, Clone)]
struct Declared {
    spec: BufferSpec,
    /// The buffer's mode; `None` for persistent buffers.
    mode: Option<u16>,
    shape: Shape,
    layout: BufferLayout,
}

impl Default for Planner {
    fn default() -> Self {
        Planner::new()
    }
}

impl Planner {
    /// A planner with the default settings (512-byte offsets, innermost
    /// dimension padded to 16).
    pub fn new() -> Planner {
        Planner {
            id: next_owner_id(),
            config: PlannerConfig::default(),
            modes: vec![ModeDecl::new(DEFAULT_MODE)],
            specs: Vec::new(),
            persistent_names: HashSet::new(),
        }
    }

    /// A planner with the given settings.
    pub fn with_config(config: PlannerConfig) -> Result<Planner> {
        if !config.offset_align.is_power_of_two() || config.offset_align < MIN_OFFSET_ALIGN {
            return Err(Error::InvalidAlignment {
                align: config.offset_align,
                min: MIN_OFFSET_ALIGN,
            });
        }
        Ok(Planner {
            config,
            ..Planner::new()
        })
    }

    /// The settings in use.
    pub fn config(&self) -> &PlannerConfig {
        &self.config
    }

    /// Declares a mode: a kind of step with its own phases and step-scoped
    /// buffers, sharing the persistent ones (see [`Mode`]). Steps of a mode
    /// open with [`Arena::step_in`](crate::Arena::step_in).
    ///
    /// ```
    /// use tensor_arena::{Arena, HostDevice, Planner};
    /// let mut p = Planner::new();
    /// let train = p.mode("train")?;
    /// let eval = p.mode("eval")?;
    /// let fwd = p.phase_in(train, "forward")?;
    /// let bwd = p.phase_in(train, "backward")?;
    /// let w = p.persistent::<f32>("w", &[64, 64])?;
    /// let h = p.span::<f32>("h", &[32, 64], fwd, bwd)?;
    /// let eh = p.step_in::<f32>(eval, "h", &[256, 64])?; // a larger eval batch
    /// let plan = p.plan()?;
    /// // One slab: the persistent buffers plus the larger of the two modes.
    /// let (t, e) = (&plan.modes()[1], &plan.modes()[2]);
    /// assert_eq!(plan.slab_bytes(), t.footprint().max(e.footprint()));
    /// let mut arena = Arena::new(HostDevice::new(), plan)?;
    /// arena.step_in(eval, |s| {
    ///     let _w = s.lease(w)?;
    ///     let _h = s.lease(eh)?;
    ///     assert!(s.lease(h).is_err()); // a train buffer in an eval step
    ///     Ok::<_, tensor_arena::Error>(())
    /// })?;
    /// # Ok::<(), tensor_arena::Error>(())
    /// ```
    pub fn mode(&mut self, name: &str) -> Result<Mode> {
        let taken = self.modes.iter().any(|m| m.name == name);
        let index = new_mode_index(name, taken, self.modes.len())?;
        self.modes.push(ModeDecl::new(name));
        Ok(Mode {
            planner: self.id,
            index,
        })
    }

    /// The default mode: the one [`Arena::step`](crate::Arena::step) runs
    /// in and [`phase`](Planner::phase) declares phases of.
    pub fn default_mode(&self) -> Mode {
        Mode {
            planner: self.id,
            index: 0,
        }
    }

    /// Declares the next phase of a step of the default mode. Phases run in
    /// declaration order.
    pub fn phase(&mut self, name: &str) -> Result<Phase> {
        self.phase_in(self.default_mode(), name)
    }

    /// Declares the next phase of a step of `mode`.
    pub fn phase_in(&mut self, mode: Mode, name: &str) -> Result<Phase> {
        let m = self.mode_index(mode)?;
        self.check_name(Some(m), name)?;
        let decl = &mut self.modes[usize::from(m)];
        let index = u16::try_from(decl.phases.len()).map_err(|_| Error::SizeOverflow {
            buffer: name.to_owned(),
            shape: Vec::new(),
            what: "the number of phases",
            limit: u64::from(u16::MAX),
        })?;
        decl.names.insert(name.to_owned());
        decl.phases.push(name.to_owned());
        Ok(Phase {
            planner: self.id,
            mode: m,
            index,
        })
    }

    fn mode_index(&self, mode: Mode) -> Result<u16> {
        if mode.planner != self.id || mode.index() >= self.modes.len() {
            return Err(Error::ForeignMode {
                index: mode.index(),
                owner: "planner",
            });
        }
        Ok(mode.index)
    }

    /// Declares a buffer of `T`. Fails, leaving the planner unchanged, if the
    /// spec is invalid or its element type is not `T`.
    pub fn declare<T: Element>(&mut self, spec: BufferSpec) -> Result<Buffer<T>> {
        if spec.dtype != T::DTYPE {
            return Err(Error::DTypeMismatch {
                buffer: spec.name,
                declared: spec.dtype.name(),
                requested: T::DTYPE.name(),
            });
        }
        self.declare_dyn(spec).map(Buffer::new)
    }

    /// Declares a buffer whose element type is only known at run time.
    pub fn declare_dyn(&mut self, spec: BufferSpec) -> Result<BufferId> {
        let mode = self.mode_of(&spec)?;
        self.check_name(mode, &spec.name)?;
        let shape = Shape::new(&spec.name, &spec.shape)?;
        let rounding = spec.rounding.unwrap_or(self.config.default_rounding);
        let padded = shape.rounded(&spec.name, rounding)?;
        let layout = layout::buffer_layout(&spec.name, &padded, spec.dtype, &self.config)?;
        let index = u32::try_from(self.specs.len()).map_err(|_| Error::SizeOverflow {
            buffer: spec.name.clone(),
            shape: shape.to_vec(),
            what: "the number of buffers",
            limit: u64::from(u32::MAX),
        })?;
        let id = BufferId {
            planner: self.id,
            index,
            dtype: spec.dtype,
        };
        match mode {
            None => self.persistent_names.insert(spec.name.clone()),
            Some(m) => self.modes[usize::from(m)].names.insert(spec.name.clone()),
        };
        self.specs.push(Declared {
            spec,
            mode,
            shape,
            layout,
        });
        Ok(id)
    }

    /// Declares a persistent buffer (weights, optimizer state).
    pub fn persistent<T: Element>(&mut self, name: &str, max_shape: &[usize]) -> Result<Buffer<T>> {
        self.declare(BufferSpec::of::<T>(name, max_shape).lifetime(Lifetime::Persistent))
    }

    /// Declares a buffer that lives for a whole step of the default mode.
    pub fn step<T: Element>(&mut self, name: &str, max_shape: &[usize]) -> Result<Buffer<T>> {
        self.declare(BufferSpec::of::<T>(name, max_shape).lifetime(Lifetime::Step))
    }

    /// Declares a buffer that lives for a whole step of `mode`.
    pub fn step_in<T: Element>(
        &mut self,
        mode: Mode,
        name: &str,
        max_shape: &[usize],
    ) -> Result<Buffer<T>> {
        self.declare(
            BufferSpec::of::<T>(name, max_shape)
                .lifetime(Lifetime::Step)
                .mode(mode),
        )
    }

    /// Declares a buffer that lives in phases `first..=last` of each step
    /// of their mode.
    pub fn span<T: Element>(
        &mut self,
        name: &str,
        max_shape: &[usize],
        first: Phase,
        last: Phase,
    ) -> Result<Buffer<T>> {
        self.declare(BufferSpec::of::<T>(name, max_shape).lifetime(Lifetime::span(first, last)))
    }

    /// Number of declared buffers.
    pub fn len(&self) -> usize {
        self.specs.len()
    }

    /// Whether no buffer has been declared.
    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }

    /// Assigns offsets: persistent buffers first, each on its own bytes, then
    /// the step-scoped ones above them, placed by the configured
    /// [`Strategy`] so that buffers never alive together may share bytes.
    ///
    /// Fails with [`Error::OverCapacity`] when the strategy has a capacity
    /// and no placement within it was found.
    pub fn plan(&self) -> Result<Plan> {
        self.plan_with(self.config.strategy)
    }

    /// Like [`Planner::plan`] with another placement strategy.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tensor_arena::Planner;
    /// use tensor_arena::plan::placement::Strategy;
    /// let mut p = Planner::new();
    /// let a = p.phase("a")?;
    /// let b = p.phase("b")?;
    /// p.span::<f32>("x", &[256], a, a)?;
    /// p.span::<f32>("y", &[256], a, b)?;
    /// p.span::<f32>("z", &[512], b, b)?;
    /// let strategy = Strategy::search().with_time_limit(Duration::from_millis(200));
    /// let plan = p.plan_with(strategy)?;
    /// assert_eq!(plan.slab_bytes(), plan.lower_bound());
    /// assert!(plan.is_optimal());
    /// # Ok::<(), tensor_arena::Error>(())
    /// ```
    pub fn plan_with(&self, strategy: Strategy) -> Result<Plan> {
        if self.specs.is_empty() {
            return Err(Error::EmptyPlan);
        }
        // One timeline, mode after mode: every mode takes as many slots as
        // it has phases (one when it has none), so buffers of different
        // modes are never alive at the same time.
        let mut modes = Vec::with_capacity(self.modes.len());
        let mut next = 0;
        for m in &self.modes {
            let slots = m.phases.len().max(1);
            modes.push(PlannedMode::new(&m.name, m.phases.clone(), next, slots));
            next += slots;
        }
        let timeline = next;
        let buffers: Vec<PlannedBuffer> = self
            .specs
            .iter()
            .map(|d| {
                let base = |m: Option<u16>| m.map_or(0, |m| modes[usize::from(m)].first_slot());
                let (kind, first, last) = match (d.spec.lifetime, d.mode) {
                    (Lifetime::Persistent, _) => (LifetimeKind::Persistent, 0, timeline - 1),
                    (Lifetime::Step, m) => {
                        let slots = m.map_or(1, |m| modes[usize::from(m)].slots());
                        (LifetimeKind::Step, base(m), base(m) + slots - 1)
                    }
                    (Lifetime::Phases { first, last }, m) => (
                        LifetimeKind::Phases,
                        base(m) + first.index(),
                        base(m) + last.index(),
                    ),
                };
                PlannedBuffer {
                    name: d.spec.name.clone(),
                    dtype: d.spec.dtype,
                    shape: d.shape.clone(),
                    padded: d.layout.padded.clone(),
                    bytes: d.layout.bytes,
                    size: d.layout.size,
                    offset: 0,
                    kind,
                    first_phase: first,
                    last_phase: last,
                    mode: d.mode,
                    rule: d.spec.rule,
                    recorded_steps: d.spec.recorded_steps,
                }
            })
            .collect();
        let config = PlannerConfig {
            strategy,
            ..self.config
        };
        Plan::build(self.id, config, modes, buffers)
    }

    /// Checks that `name` is free: in mode `mode` (a phase or step-scoped
    /// buffer: not used in the mode, not a persistent buffer), or, for a
    /// persistent buffer (`None`), in no mode at all.
    fn check_name(&self, mode: Option<u16>, name: &str) -> Result<()> {
        if name.is_empty() {
            return Err(Error::EmptyName);
        }
        let taken = self.persistent_names.contains(name)
            || match mode {
                Some(m) => self.modes[usize::from(m)].names.contains(name),
                None => self.modes.iter().any(|m| m.names.contains(name)),
            };
        if taken {
            return Err(Error::DuplicateName {
                name: name.to_owned(),
            });
        }
        Ok(())
    }

    /// The mode a spec's buffer lives in (`None`: persistent), checking its
    /// mode and phase handles.
    fn mode_of(&self, spec: &BufferSpec) -> Result<Option<u16>> {
        match spec.lifetime {
            Lifetime::Persistent => Ok(None),
            Lifetime::Step => spec.mode.map_or(Ok(0), |m| self.mode_index(m)).map(Some),
            Lifetime::Phases { first, last } => {
                self.check_span(spec, first, last)?;
                if let Some(m) = spec.mode {
                    let m = self.mode_index(m)?;
                    if m != first.mode {
                        return Err(Error::PhaseOfAnotherMode {
                            buffer: spec.name.clone(),
                            mode: self.modes[usize::from(m)].name.clone(),
                            phase: self.phase_label(first),
                            phase_mode: self.modes[usize::from(first.mode)].name.clone(),
                        });
                    }
                }
                Ok(Some(first.mode))
            }
        }
    }

    fn phase_label(&self, p: Phase) -> String {
        if p.planner != self.id {
            return format!("#{} of another planner", p.index);
        }
        self.modes
            .get(usize::from(p.mode))
            .and_then(|m| m.phases.get(p.index()))
            .cloned()
            .unwrap_or_else(|| format!("#{}", p.index))
    }

    fn check_span(&self, spec: &BufferSpec, first: Phase, last: Phase) -> Result<()> {
        let known = |p: Phase| {
            p.planner == self.id
                && self
                    .modes
                    .get(usize::from(p.mode))
                    .is_some_and(|m| p.index() < m.phases.len())
        };
        let reason = if !known(first) || !known(last) {
            Some("a phase belongs to another planner")
        } else if first.mode != last.mode {
            Some("the phases belong to different modes")
        } else if first.index > last.index {
            Some("the first phase comes after the last")
        } else {
            None
        };
        match reason {
            None => Ok(()),
            Some(reason) => Err(Error::InvalidPhaseSpan {
                buffer: spec.name.clone(),
                first: self.phase_label(first),
                last: self.phase_label(last),
                reason,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;

    #[test]
    fn failed_declarations_leave_the_planner_unchanged() {
        let mut p = Planner::new();
        p.step::<f32>("a", &[4]).unwrap();
        assert!(matches!(
            p.step::<f32>("a", &[4]),
            Err(Error::DuplicateName { .. })
        ));
        assert!(matches!(p.step::<f32>("", &[4]), Err(Error::EmptyName)));
        assert!(matches!(
            p.step::<f32>("z", &[0]),
            Err(Error::EmptyShape { .. })
        ));
        assert!(matches!(
            p.declare::<f16>(BufferSpec::of::<f32>("w", &[4])),
            Err(Error::DTypeMismatch { .. })
        ));
        assert!(matches!(
            p.step::<f32>("huge", &[usize::MAX / 2, 2]),
            Err(Error::SizeOverflow { .. })
        ));
        assert_eq!(p.len(), 1);
        // Names of failed declarations stay free.
        p.step::<f32>("z", &[1]).unwrap();
        p.step::<f32>("huge", &[1]).unwrap();
    }

    use half::f16;

    #[test]
    fn phase_spans_are_checked() {
        let mut p = Planner::new();
        let a = p.phase("a").unwrap();
        let b = p.phase("b").unwrap();
        let err = p.span::<f32>("x", &[4], b, a).unwrap_err();
        assert!(
            err.to_string().contains("'x'") && err.to_string().contains("b..=a"),
            "{err}"
        );
        let mut other = Planner::new();
        let c = other.phase("c").unwrap();
        assert!(matches!(
            p.span::<f32>("y", &[4], a, c),
            Err(Error::InvalidPhaseSpan { .. })
        ));
        assert!(matches!(p.phase("a"), Err(Error::DuplicateName { .. })));
    }

    #[test]
    fn alignment_config_is_validated() {
        for align in [0, 32, 100, 63] {
            let cfg = PlannerConfig {
                offset_align: align,
                ..PlannerConfig::default()
            };
            assert!(matches!(
                Planner::with_config(cfg),
                Err(Error::InvalidAlignment { .. })
            ));
        }
        let cfg = PlannerConfig {
            offset_align: 64,
            ..PlannerConfig::default()
        };
        assert_eq!(Planner::with_config(cfg).unwrap().config().offset_align, 64);
    }

    #[test]
    fn names_are_scoped_by_mode() {
        let mut p = Planner::new();
        let train = p.mode("train").unwrap();
        let eval = p.mode("eval").unwrap();
        assert!(matches!(p.mode("eval"), Err(Error::DuplicateName { .. })));
        assert!(matches!(
            p.mode(DEFAULT_MODE),
            Err(Error::DuplicateName { .. })
        ));
        let f1 = p.phase_in(train, "forward").unwrap();
        let f2 = p.phase_in(eval, "forward").unwrap();
        assert_eq!((f1.index(), f2.index()), (0, 0));
        assert_eq!((f1.mode(), f2.mode()), (train, eval));
        p.span::<f32>("h", &[4], f1, f1).unwrap();
        p.span::<f32>("h", &[8], f2, f2).unwrap();
        assert!(matches!(
            p.span::<f32>("h", &[8], f2, f2),
            Err(Error::DuplicateName { .. })
        ));
        // Persistent names are unique across every mode.
        assert!(matches!(
            p.persistent::<f32>("h", &[4]),
            Err(Error::DuplicateName { .. })
        ));
        p.persistent::<f32>("w", &[4]).unwrap();
        assert!(matches!(
            p.step_in::<f32>(eval, "w", &[4]),
            Err(Error::DuplicateName { .. })
        ));
        // Spans stay in one mode; a mode given must be the phases' mode.
        let e = p.span::<f32>("x", &[4], f1, f2).unwrap_err();
        assert!(e.to_string().contains("different modes"), "{e}");
        let e = p
            .declare::<f32>(
                BufferSpec::of::<f32>("y", &[4])
                    .lifetime(Lifetime::phase(f1))
                    .mode(eval),
            )
            .unwrap_err();
        assert!(matches!(e, Error::PhaseOfAnotherMode { .. }), "{e}");
        let other = Planner::new().default_mode();
        assert!(matches!(
            p.step_in::<f32>(other, "z", &[4]),
            Err(Error::ForeignMode { .. })
        ));
        let plan = p.plan().unwrap();
        let modes: Vec<_> = plan.modes().iter().map(|m| m.name().to_owned()).collect();
        assert_eq!(modes, ["default", "train", "eval"]);
    }

    #[test]
    fn empty_plan_is_an_error() {
        assert_eq!(Planner::new().plan().unwrap_err(), Error::EmptyPlan);
    }

    #[test]
    fn dyn_declarations_carry_their_dtype() {
        let mut p = Planner::new();
        let id = p
            .declare_dyn(BufferSpec::new("m", DType::U8, &[100]))
            .unwrap();
        assert!(id.typed::<u8>().is_some());
        assert!(id.typed::<f32>().is_none());
    }
}
