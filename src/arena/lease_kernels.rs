//! In-place kernels as lease methods: the arena's RNG state, operand checks,
//! and dispatch to the device's kernels.

use super::lease::Lease;
use crate::device::{Kernels, Region};
use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::ops::{Float, Kernel, MaskElement, MaskFor, RngState, apply_mask_kernel};

/// What `dropout_` used, kept for the backward pass: replaying the same
/// `(seed, offset)` regenerates the mask, so no mask buffer exists.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DropoutMask {
    /// Drop probability.
    pub p: f32,
    /// Stream position of the forward call's element 0.
    pub rng: RngState,
    /// Elements of the forward call.
    pub len: usize,
}

impl<T: MaskElement, D: Kernels> Lease<'_, T, D> {
    /// Fills the view with 1 (probability `p`) or 0, from the arena's random
    /// stream, and advances the stream. Returns the state it drew from.
    /// Float leases get 1.0 / 0.0; `u8` leases get 1 / 0, the same
    /// decisions in a quarter of an f32 mask's bytes.
    ///
    /// ```
    /// use tensor_arena::{Arena, HostDevice, Planner};
    /// let mut p = Planner::new();
    /// let m = p.step::<f32>("mask", &[16])?;
    /// let mut arena = Arena::new(HostDevice::new(), p.plan()?)?;
    /// arena.set_seed(1234);
    /// arena.step(|s| {
    ///     let mut m = s.lease(m)?;
    ///     m.bernoulli_(0.5)?;
    ///     assert_eq!(&m.as_slice()[..4], &[1.0, 0.0, 1.0, 0.0]);
    ///     Ok::<_, tensor_arena::Error>(())
    /// })?;
    /// # Ok::<(), tensor_arena::Error>(())
    /// ```
    pub fn bernoulli_(&mut self, p: f32) -> Result<RngState> {
        self.random(|rng| Kernel::Bernoulli { p, rng })
    }

    fn random(&mut self, make: impl FnOnce(RngState) -> Kernel) -> Result<RngState> {
        let cell = &self.arena.rng;
        let state = cell.get();
        let next = state.advanced(self.len())?;
        self.launch(&make(state), None)?;
        cell.set(next);
        Ok(state)
    }

    fn launch(&mut self, kernel: &Kernel, other: Option<Region>) -> Result<()> {
        let arena = self.arena;
        arena
            .device
            .launch(&arena.slab, kernel, T::DTYPE, self.region(), other)
    }
}

impl<T: Float, D: Kernels> Lease<'_, T, D> {
    /// Fused dropout in place: each element is kept with probability
    /// `1 - p` and scaled by `1 / (1 - p)`, or set to 0. No mask is stored;
    /// keep the returned [`DropoutMask`] for
    /// [`dropout_backward_`](Lease::dropout_backward_).
    pub fn dropout_(&mut self, p: f32) -> Result<DropoutMask> {
        let rng = self.random(|rng| Kernel::Dropout { p, rng })?;
        Ok(DropoutMask {
            p,
            rng,
            len: self.len(),
        })
    }

    /// Applies the forward pass's dropout mask to this gradient, regenerated
    /// from the saved `(seed, offset)`: bit for bit the mask `dropout_`
    /// used. The arena's stream does not move.
    pub fn dropout_backward_(&mut self, mask: &DropoutMask) -> Result<()> {
        if mask.len != self.len() {
            return Err(Error::MaskLengthMismatch {
                buffer: self.name().to_owned(),
                len: self.len(),
                expected: mask.len,
            });
        }
        self.launch(
            &Kernel::Dropout {
                p: mask.p,
                rng: mask.rng,
            },
            None,
        )
    }

    /// `x = mask != 0 ? x * scale : 0`, elementwise; `mask` has this view's
    /// shape, and this lease's element type or `u8`.
    ///
    /// ```
    /// use tensor_arena::{Arena, HostDevice, Planner};
    /// let mut p = Planner::new();
    /// let x = p.step::<f32>("x", &[64])?;
    /// let keep = p.step::<u8>("keep", &[64])?; // 64 bytes instead of 256
    /// let mut arena = Arena::new(HostDevice::new(), p.plan()?)?;
    /// arena.step(|s| {
    ///     let mut x = s.lease(x)?;
    ///     x.as_mut_slice().fill(1.0);
    ///     let mut keep = s.lease(keep)?;
    ///     keep.bernoulli_(0.75)?;
    ///     x.apply_mask_(&keep, 1.0 / 0.75)?;
    ///     for (v, k) in x.as_slice().iter().zip(keep.as_slice()) {
    ///         assert_eq!(*v, if *k == 1 { 1.0 / 0.75 } else { 0.0 });
    ///     }
    ///     Ok::<_, tensor_arena::Error>(())
    /// })?;
    /// # Ok::<(), tensor_arena::Error>(())
    /// ```
    pub fn apply_mask_<M: MaskFor<T>>(&mut self, mask: &Lease<'_, M, D>, scale: f32) -> Result<()> {
        let other = self.operand("apply_mask_", mask)?;
        self.launch(&apply_mask_kernel::<M>(scale), Some(other))
    }

    /// `x = x * other`, elementwise; `other` has this view's shape.
    ///
    /// Passing the lease itself as `other` does not compile (it is borrowed
    /// mutably), so the two operands are always distinct buffers.
    pub fn mul_(&mut self, other: &Lease<'_, T, D>) -> Result<()> {
        let o = self.operand("mul_", other)?;
        self.launch(&Kernel::Mul, Some(o))
    }

    /// `x = x * s`.
    pub fn mul_scalar_(&mut self, s: f32) -> Result<()> {
        self.launch(&Kernel::MulScalar { s }, None)
    }

    fn operand<U: Element>(&self, op: &'static str, other: &Lease<'_, U, D>) -> Result<Region> {
        if !std::ptr::eq(self.arena, other.arena) {
            return Err(Error::ArenaMismatch {
                op,
                buffer: self.name().to_owned(),
                other: other.name().to_owned(),
            });
        }
        if self.shape() != other.shape() {
            return Err(Error::ShapeMismatch {
                op,
                buffer: self.name().to_owned(),
                shape: self.shape().to_vec(),
                other: other.name().to_owned(),
                other_shape: other.shape().to_vec(),
            });
        }
        Ok(other.region())
    }
}
