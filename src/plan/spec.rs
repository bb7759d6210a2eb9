//! What a user declares: buffer specs, lifetimes, phases, and the typed
//! handles a declaration returns.

use std::marker::PhantomData;

use crate::dtype::{DType, Element};
use crate::shape::{Dims, Rounding, ShapeRule};

/// A kind of step (for example `train`, `eval`, `generate`), declared on
/// the [`Planner`](crate::Planner) with [`mode`](crate::Planner::mode).
///
/// Each mode has its own phases and step-scoped buffers; persistent buffers
/// belong to every mode. A step runs in one mode
/// ([`Arena::step_in`](crate::Arena::step_in)), so step-scoped buffers of
/// different modes are never alive together and may share slab bytes. A
/// planner that declares no mode has one, the default mode (named
/// `default`), which [`Arena::step`](crate::Arena::step) runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mode {
    pub(crate) planner: u64,
    pub(crate) index: u16,
}

impl Mode {
    /// Position of the mode in declaration order; the default mode is 0.
    pub fn index(self) -> usize {
        usize::from(self.index)
    }
}

/// A named point in a step's timeline (for example `forward`, `backward`,
/// `update`), declared on the [`Planner`](crate::Planner) in order, in one
/// [`Mode`].
///
/// Buffers whose phase spans do not intersect may share slab bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Phase {
    pub(crate) planner: u64,
    pub(crate) mode: u16,
    pub(crate) index: u16,
}

impl Phase {
    /// Position of the phase in its mode, in declaration order (0-based).
    pub fn index(self) -> usize {
        usize::from(self.index)
    }

    /// The mode the phase belongs to.
    pub fn mode(self) -> Mode {
        Mode {
            planner: self.planner,
            index: self.mode,
        }
    }
}

/// How long a buffer's contents must survive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Lifetime {
    /// Lives for the whole run (weights, optimizer state), in every mode.
    /// Never shares bytes.
    Persistent,
    /// Lives for a whole step of its mode ([`BufferSpec::mode`], the
    /// default mode unless set); contents are not kept across steps.
    #[default]
    Step,
    /// Lives from the start of the first phase to the end of the last one
    /// (inclusive) within each step of their mode.
    Phases {
        /// First phase in which the buffer may be leased.
        first: Phase,
        /// Last phase in which the buffer may be leased.
        last: Phase,
    },
}

impl Lifetime {
    /// The span `first..=last`.
    pub fn span(first: Phase, last: Phase) -> Lifetime {
        Lifetime::Phases { first, last }
    }

    /// A single phase.
    pub fn phase(phase: Phase) -> Lifetime {
        Lifetime::Phases {
            first: phase,
            last: phase,
        }
    }
}

/// One buffer to plan: name, element type, largest shape, lifetime, mode,
/// rounding policy and shape rule.
///
/// ```
/// use tensor_arena::{BufferSpec, Lifetime, Rounding, ShapeRule};
/// let spec = BufferSpec::of::<f32>("logits", &[256, 10])
///     .lifetime(Lifetime::Step)
///     .rounding(Rounding::Inner32)
///     .shape_rule(ShapeRule::Dims);
/// assert_eq!(spec.name(), "logits");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct BufferSpec {
    pub(crate) name: String,
    pub(crate) dtype: DType,
    pub(crate) shape: Dims,
    pub(crate) lifetime: Lifetime,
    pub(crate) rounding: Option<Rounding>,
    /// The mode of a step-scoped buffer (`None`: the mode of its phases, or
    /// the default mode).
    pub(crate) mode: Option<Mode>,
    pub(crate) rule: ShapeRule,
    /// Number of recorded steps the spec was learned from (`None`: declared
    /// by hand).
    pub(crate) recorded_steps: Option<u64>,
}

impl BufferSpec {
    /// A step-scoped spec with the planner's default rounding.
    pub fn new(name: impl Into<String>, dtype: DType, max_shape: &[usize]) -> BufferSpec {
        BufferSpec {
            name: name.into(),
            dtype,
            shape: max_shape.iter().copied().collect(),
            lifetime: Lifetime::Step,
            rounding: None,
            mode: None,
            rule: ShapeRule::Elements,
            recorded_steps: None,
        }
    }

    /// Like [`BufferSpec::new`] with the element type taken from `T`.
    pub fn of<T: Element>(name: impl Into<String>, max_shape: &[usize]) -> BufferSpec {
        BufferSpec::new(name, T::DTYPE, max_shape)
    }

    /// Sets the lifetime.
    pub fn lifetime(mut self, lifetime: Lifetime) -> BufferSpec {
        self.lifetime = lifetime;
        self
    }

    /// Sets the rounding policy (otherwise the planner's default applies).
    pub fn rounding(mut self, rounding: Rounding) -> BufferSpec {
        self.rounding = Some(rounding);
        self
    }

    /// Sets the mode of a step-scoped buffer. A phase span implies its
    /// phases' mode (setting another one is an error when declared); a
    /// [`Lifetime::Step`] buffer without a mode lives in the default mode.
    /// Persistent buffers belong to every mode and ignore it.
    pub fn mode(mut self, mode: Mode) -> BufferSpec {
        self.mode = Some(mode);
        self
    }

    /// Sets the [`ShapeRule`]: by element count (the default) or, opted
    /// in, per dimension too.
    pub fn shape_rule(mut self, rule: ShapeRule) -> BufferSpec {
        self.rule = rule;
        self
    }

    /// The shape rule views of this buffer are checked by.
    pub fn rule(&self) -> ShapeRule {
        self.rule
    }

    /// Marks the spec as learned from `steps` recorded steps (see
    /// [`Recorder`](crate::record::Recorder)); the plan report shows it.
    pub fn recorded(mut self, steps: u64) -> BufferSpec {
        self.recorded_steps = Some(steps);
        self
    }

    /// Steps the spec was learned from, or `None` if it was declared by hand.
    pub fn recorded_steps(&self) -> Option<u64> {
        self.recorded_steps
    }

    /// The buffer's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The largest shape the buffer must hold.
    pub fn max_shape(&self) -> &[usize] {
        &self.shape
    }
}

/// An untyped handle to a declared buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BufferId {
    pub(crate) planner: u64,
    pub(crate) index: u32,
    pub(crate) dtype: DType,
}

impl BufferId {
    /// Position of the buffer in declaration order (0-based).
    pub fn index(self) -> usize {
        self.index as usize
    }

    /// The declared element type.
    pub fn dtype(self) -> DType {
        self.dtype
    }

    /// The typed handle, if `T` is the declared element type.
    pub fn typed<T: Element>(self) -> Option<Buffer<T>> {
        (self.dtype == T::DTYPE).then_some(Buffer {
            id: self,
            _t: PhantomData,
        })
    }
}

/// A typed, `Copy` handle to a declared buffer of `T`.
///
/// Lease it inside a step with [`Step::lease`](crate::Step::lease); no string
/// is looked up on that path.
pub struct Buffer<T: Element> {
    pub(crate) id: BufferId,
    _t: PhantomData<fn() -> T>,
}

impl<T: Element> Buffer<T> {
    pub(crate) fn new(id: BufferId) -> Buffer<T> {
        Buffer {
            id,
            _t: PhantomData,
        }
    }

    /// The untyped handle.
    pub fn id(self) -> BufferId {
        self.id
    }
}

impl<T: Element> Clone for Buffer<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Element> Copy for Buffer<T> {}
impl<T: Element> PartialEq for Buffer<T> {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}
impl<T: Element> Eq for Buffer<T> {}
impl<T: Element> std::fmt::Debug for Buffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buffer<{}>#{}", T::DTYPE, self.id.index)
    }
}
