//! The planner: collects declarations at startup and turns them into a
//! [`Plan`].

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};

use super::layout::{self, BufferLayout};
use super::placement::Strategy;
use super::planned::{LifetimeKind, Plan, PlannedBuffer};
use super::spec::{Buffer, BufferId, BufferSpec, Lifetime, Phase};
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
pub(crate) fn next_owner_id() -> u64 {
    NEXT_PLANNER_ID.fetch_add(1, Ordering::Relaxed)
}

/// Collects phases and buffer specs, then assigns every buffer an offset in
/// one slab.
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
    phases: Vec<String>,
    specs: Vec<Declared>,
    names: HashSet<String>,
}

/// A spec that passed validation, with its byte layout computed.
#[derive(Debug, Clone)]
struct Declared {
    spec: BufferSpec,
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
            phases: Vec::new(),
            specs: Vec::new(),
            names: HashSet::new(),
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

    /// Declares the next phase of a step. Phases run in declaration order.
    pub fn phase(&mut self, name: &str) -> Result<Phase> {
        self.check_name(name)?;
        let index = u16::try_from(self.phases.len()).map_err(|_| Error::SizeOverflow {
            buffer: name.to_owned(),
            shape: Vec::new(),
            what: "the number of phases",
            limit: u64::from(u16::MAX),
        })?;
        self.names.insert(name.to_owned());
        self.phases.push(name.to_owned());
        Ok(Phase {
            planner: self.id,
            index,
        })
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
        self.check_name(&spec.name)?;
        self.check_lifetime(&spec)?;
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
        self.names.insert(spec.name.clone());
        self.specs.push(Declared {
            spec,
            shape,
            layout,
        });
        Ok(id)
    }

    /// Declares a persistent buffer (weights, optimizer state).
    pub fn persistent<T: Element>(&mut self, name: &str, max_shape: &[usize]) -> Result<Buffer<T>> {
        self.declare(BufferSpec::of::<T>(name, max_shape).lifetime(Lifetime::Persistent))
    }

    /// Declares a buffer that lives for a whole step.
    pub fn step<T: Element>(&mut self, name: &str, max_shape: &[usize]) -> Result<Buffer<T>> {
        self.declare(BufferSpec::of::<T>(name, max_shape).lifetime(Lifetime::Step))
    }

    /// Declares a buffer that lives in phases `first..=last` of each step.
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
        let phase_count = self.phases.len().max(1);
        let buffers: Vec<PlannedBuffer> = self
            .specs
            .iter()
            .map(|d| {
                let (kind, first, last) = match d.spec.lifetime {
                    Lifetime::Persistent => (LifetimeKind::Persistent, 0, phase_count - 1),
                    Lifetime::Step => (LifetimeKind::Step, 0, phase_count - 1),
                    Lifetime::Phases { first, last } => {
                        (LifetimeKind::Phases, first.index(), last.index())
                    }
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
                    recorded_steps: d.spec.recorded_steps,
                }
            })
            .collect();
        let config = PlannerConfig {
            strategy,
            ..self.config
        };
        Plan::build(self.id, config, self.phases.clone(), buffers)
    }

    fn check_name(&self, name: &str) -> Result<()> {
        if name.is_empty() {
            return Err(Error::EmptyName);
        }
        if self.names.contains(name) {
            return Err(Error::DuplicateName {
                name: name.to_owned(),
            });
        }
        Ok(())
    }

    fn check_lifetime(&self, spec: &BufferSpec) -> Result<()> {
        let Lifetime::Phases { first, last } = spec.lifetime else {
            return Ok(());
        };
        let name_of = |p: Phase| {
            if p.planner == self.id {
                self.phases
                    .get(p.index())
                    .cloned()
                    .unwrap_or_else(|| format!("#{}", p.index))
            } else {
                format!("#{} of another planner", p.index)
            }
        };
        let reason = if first.planner != self.id || last.planner != self.id {
            Some("a phase belongs to another planner")
        } else if first.index > last.index {
            Some("the first phase comes after the last")
        } else {
            None
        };
        match reason {
            None => Ok(()),
            Some(reason) => Err(Error::InvalidPhaseSpan {
                buffer: spec.name.clone(),
                first: name_of(first),
                last: name_of(last),
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
