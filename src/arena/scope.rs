//! One step API: [`StepScope`], implemented by the planned [`Step`] and the
//! recording step ([`RecordStep`](crate::RecordStep)), with the lease
//! operations behind [`LeaseOps`], so a model is written once and runs on a
//! planned arena and on a recorder alike.
//!
//! Static dispatch only: every method is a direct call to the lease type's
//! own method, monomorphised per step type; nothing is boxed or allocated.

use std::marker::PhantomData;

use ndarray::{ArrayView, ArrayViewMut, Dimension};

use super::{DropoutBitMask, DropoutMask, Lease, Step};
use crate::device::{Device, HostAccessible, Kernels};
use crate::dtype::Element;
use crate::error::Result;
use crate::ops::{Float, MaskElement, MaskFor, RngState};
use crate::plan::{Buffer, Phase};

/// A family of lease types, one per element type: the arena's
/// [`Lease`] ([`Planned`]) or the recorder's
/// [`SiteLease`](crate::SiteLease) ([`Recorded`](crate::record::Recorded)).
/// Binary kernels take an operand of the same family, which is how a
/// generic model passes a `u8` mask to an `f32` lease.
pub trait Leases: Sized {
    /// The device whose slab the leases view.
    type Device: Device;
    /// The lease of an element of type `T`, borrowing its step for `'s`.
    type Lease<'s, T: Element>: LeaseOps<T, Family = Self>
    where
        Self: 's;
}

/// The lease type of step scope `S` for elements of `T`.
pub type LeaseOf<'s, S, T> = <<S as StepScope>::Family as Leases>::Lease<'s, T>;

/// The device of the lease family `F`.
type DeviceOf<F> = <F as Leases>::Device;

/// The step API shared by planned and recorded steps: [`Step`] and
/// [`RecordStep`](crate::RecordStep) implement it, and their leases
/// [`LeaseOps`], so a model step is written once, generic over the step
/// type. Static dispatch only: nothing is boxed or allocated.
///
/// ```
/// use tensor_arena::{
///     Arena, Error, HostDevice, Kernels, LeaseOf, LeaseOps, Phase, Planner, Recorder, StepScope,
/// };
///
/// /// One forward and backward pass, written once.
/// fn step<S: StepScope>(s: &S, bwd: Phase, batch: usize) -> Result<f32, Error>
/// where
///     S::Device: Kernels + tensor_arena::HostAccessible,
/// {
///     let mut h: LeaseOf<'_, S, f32> = s.temp("h", &[batch, 64])?;
///     h.as_mut_slice().fill(2.0);
///     let mut keep = s.temp::<u8>("keep", &[batch, 64])?;
///     keep.bernoulli_(0.5)?;
///     h.apply_mask_(&keep, 2.0)?;
///     drop(keep);
///     s.enter(bwd)?;
///     let mut g = s.temp::<f32>("g", &[batch, 64])?;
///     g.as_mut_slice().copy_from_slice(h.as_slice());
///     Ok(g.as_slice().iter().sum())
/// }
///
/// // On a planned arena: declared by hand.
/// let mut p = Planner::new();
/// let fwd = p.phase("forward")?;
/// let bwd = p.phase("backward")?;
/// p.span::<f32>("h", &[32, 64], fwd, bwd)?;
/// p.span::<u8>("keep", &[32, 64], fwd, fwd)?;
/// p.span::<f32>("g", &[32, 64], bwd, bwd)?;
/// let mut arena = Arena::new(HostDevice::new(), p.plan()?)?;
/// arena.set_seed(3);
/// let planned = arena.step(|s| step(s, bwd, 32))?;
///
/// // On a recorder: learned by name, then frozen into the same plan.
/// let mut rec = Recorder::new(HostDevice::new());
/// rec.phase("forward")?;
/// let rbwd = rec.phase("backward")?;
/// rec.set_seed(3);
/// let recorded = rec.step(|s| step(s, rbwd, 32))?;
/// assert_eq!(planned, recorded);
/// assert_eq!(rec.freeze()?.slab_bytes(), arena.plan().slab_bytes());
/// # let _ = fwd;
/// # Ok::<(), Error>(())
/// ```
pub trait StepScope {
    /// The device holding the slab.
    type Device: Device;
    /// The family of the leases this step hands out.
    type Family: Leases<Device = Self::Device>;

    /// The step-scoped buffer called `name` in the step's mode, viewed with
    /// `shape` (by the one [`ShapeRule`](crate::ShapeRule)):
    /// [`Step::temp`] or [`RecordStep::temp`](crate::RecordStep::temp).
    fn temp<T: Element>(&self, name: &str, shape: &[usize]) -> Result<LeaseOf<'_, Self, T>>;

    /// A buffer by handle (on a recorder, a persistent buffer it declared),
    /// viewed with its declared shape.
    fn lease<T: Element>(&self, buffer: Buffer<T>) -> Result<LeaseOf<'_, Self, T>>;

    /// Moves the step to `phase`, a phase of its mode.
    fn enter(&self, phase: Phase) -> Result<()>;

    /// Name of the current phase.
    fn phase(&self) -> &str;

    /// Whether the step is being recorded (served from a recorder's pool).
    fn is_recording(&self) -> bool {
        false
    }
}

/// What every lease can do, whichever step made it: its shape, host
/// copies, host views (on host-accessible devices) and the in-place
/// kernels (on devices that run them). Each method is the lease type's own
/// method of the same name; see [`Lease`] for their documentation.
pub trait LeaseOps<T: Element>: Sized {
    /// The family this lease belongs to (its operands' family).
    type Family: Leases;

    /// The buffer's (or site's) name.
    fn name(&self) -> &str;
    /// Current view shape.
    fn shape(&self) -> &[usize];
    /// Elements in the current view.
    fn len(&self) -> usize;
    /// Whether the current view has no elements.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Elements the lease can hold.
    fn capacity(&self) -> usize;
    /// Views the memory with `shape`.
    fn set_shape(&mut self, shape: &[usize]) -> Result<()>;
    /// [`set_shape`](LeaseOps::set_shape), by value.
    fn with_shape(mut self, shape: &[usize]) -> Result<Self> {
        self.set_shape(shape)?;
        Ok(self)
    }
    /// Copies `src` (of the view's length) into the view.
    fn copy_from_host(&mut self, src: &[T]) -> Result<()>;
    /// Copies the view into `dst` (of the view's length).
    fn copy_to_host(&self, dst: &mut [T]) -> Result<()>;

    /// The view as a slice.
    fn as_slice(&self) -> &[T]
    where
        DeviceOf<Self::Family>: HostAccessible;
    /// The view as a mutable slice.
    fn as_mut_slice(&mut self) -> &mut [T]
    where
        DeviceOf<Self::Family>: HostAccessible;
    /// The view as an ndarray view.
    fn view<Dm: Dimension>(&self) -> Result<ArrayView<'_, T, Dm>>
    where
        DeviceOf<Self::Family>: HostAccessible;
    /// The view as a mutable ndarray view.
    fn view_mut<Dm: Dimension>(&mut self) -> Result<ArrayViewMut<'_, T, Dm>>
    where
        DeviceOf<Self::Family>: HostAccessible;

    /// 1 (probability `p`) or 0 into the view.
    fn bernoulli_(&mut self, p: f32) -> Result<RngState>
    where
        T: MaskElement,
        DeviceOf<Self::Family>: Kernels;
    /// Fused dropout in place.
    fn dropout_(&mut self, p: f32) -> Result<DropoutMask>
    where
        T: Float,
        DeviceOf<Self::Family>: Kernels;
    /// The forward dropout mask, regenerated, applied to a gradient.
    fn dropout_backward_(&mut self, mask: &DropoutMask) -> Result<()>
    where
        T: Float,
        DeviceOf<Self::Family>: Kernels;
    /// Dropout in place, its keep decisions stored in `bits`, one bit per
    /// element.
    fn dropout_with_bits_(
        &mut self,
        p: f32,
        bits: &mut <Self::Family as Leases>::Lease<'_, u8>,
    ) -> Result<DropoutBitMask>
    where
        T: Float,
        DeviceOf<Self::Family>: Kernels;
    /// The forward's keep decisions, read from `bits`, applied to a
    /// gradient.
    fn dropout_backward_with_bits_(
        &mut self,
        mask: &DropoutBitMask,
        bits: &<Self::Family as Leases>::Lease<'_, u8>,
    ) -> Result<()>
    where
        T: Float,
        DeviceOf<Self::Family>: Kernels;
    /// `x = mask != 0 ? x * scale : 0`, the mask of `T` or `u8`.
    fn apply_mask_<M: MaskFor<T>>(
        &mut self,
        mask: &<Self::Family as Leases>::Lease<'_, M>,
        scale: f32,
    ) -> Result<()>
    where
        T: Float,
        DeviceOf<Self::Family>: Kernels;
    /// `x = x * other`.
    fn mul_(&mut self, other: &<Self::Family as Leases>::Lease<'_, T>) -> Result<()>
    where
        T: Float,
        DeviceOf<Self::Family>: Kernels;
    /// `x = x * s`.
    fn mul_scalar_(&mut self, s: f32) -> Result<()>
    where
        T: Float,
        DeviceOf<Self::Family>: Kernels;
}

/// The lease family of a planned arena on device `D`: [`Lease`].
#[derive(Debug)]
pub struct Planned<D>(PhantomData<D>);

impl<D: Device> Leases for Planned<D> {
    type Device = D;
    type Lease<'s, T: Element>
        = Lease<'s, T, D>
    where
        Self: 's;
}

impl<'a, D: Device> StepScope for Step<'a, D> {
    type Device = D;
    type Family = Planned<D>;

    #[inline]
    fn temp<T: Element>(&self, name: &str, shape: &[usize]) -> Result<Lease<'_, T, D>> {
        Step::temp(self, name, shape)
    }

    #[inline]
    fn lease<T: Element>(&self, buffer: Buffer<T>) -> Result<Lease<'_, T, D>> {
        Step::lease(self, buffer)
    }

    fn enter(&self, phase: Phase) -> Result<()> {
        Step::enter(self, phase)
    }

    fn phase(&self) -> &str {
        Step::phase(self)
    }
}

impl<T: Element, D: Device> LeaseOps<T> for Lease<'_, T, D> {
    type Family = Planned<D>;

    fn name(&self) -> &str {
        Lease::name(self)
    }
    fn shape(&self) -> &[usize] {
        Lease::shape(self)
    }
    fn len(&self) -> usize {
        Lease::len(self)
    }
    fn capacity(&self) -> usize {
        Lease::capacity(self)
    }
    fn set_shape(&mut self, shape: &[usize]) -> Result<()> {
        Lease::set_shape(self, shape)
    }
    fn copy_from_host(&mut self, src: &[T]) -> Result<()> {
        Lease::copy_from_host(self, src)
    }
    fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        Lease::copy_to_host(self, dst)
    }
    fn as_slice(&self) -> &[T]
    where
        D: HostAccessible,
    {
        Lease::as_slice(self)
    }
    fn as_mut_slice(&mut self) -> &mut [T]
    where
        D: HostAccessible,
    {
        Lease::as_mut_slice(self)
    }
    fn view<Dm: Dimension>(&self) -> Result<ArrayView<'_, T, Dm>>
    where
        D: HostAccessible,
    {
        Lease::view(self)
    }
    fn view_mut<Dm: Dimension>(&mut self) -> Result<ArrayViewMut<'_, T, Dm>>
    where
        D: HostAccessible,
    {
        Lease::view_mut(self)
    }
    fn bernoulli_(&mut self, p: f32) -> Result<RngState>
    where
        T: MaskElement,
        D: Kernels,
    {
        Lease::bernoulli_(self, p)
    }
    fn dropout_(&mut self, p: f32) -> Result<DropoutMask>
    where
        T: Float,
        D: Kernels,
    {
        Lease::dropout_(self, p)
    }
    fn dropout_backward_(&mut self, mask: &DropoutMask) -> Result<()>
    where
        T: Float,
        D: Kernels,
    {
        Lease::dropout_backward_(self, mask)
    }
    fn dropout_with_bits_(&mut self, p: f32, bits: &mut Lease<'_, u8, D>) -> Result<DropoutBitMask>
    where
        T: Float,
        D: Kernels,
    {
        Lease::dropout_with_bits_(self, p, bits)
    }
    fn dropout_backward_with_bits_(
        &mut self,
        mask: &DropoutBitMask,
        bits: &Lease<'_, u8, D>,
    ) -> Result<()>
    where
        T: Float,
        D: Kernels,
    {
        Lease::dropout_backward_with_bits_(self, mask, bits)
    }
    fn apply_mask_<M: MaskFor<T>>(&mut self, mask: &Lease<'_, M, D>, scale: f32) -> Result<()>
    where
        T: Float,
        D: Kernels,
    {
        Lease::apply_mask_(self, mask, scale)
    }
    fn mul_(&mut self, other: &Lease<'_, T, D>) -> Result<()>
    where
        T: Float,
        D: Kernels,
    {
        Lease::mul_(self, other)
    }
    fn mul_scalar_(&mut self, s: f32) -> Result<()>
    where
        T: Float,
        D: Kernels,
    {
        Lease::mul_scalar_(self, s)
    }
}
