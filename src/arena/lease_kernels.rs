//! In-place kernels as lease methods: the arena's RNG state, operand checks,
//! and dispatch to the device's kernels.

use super::lease::Lease;
use crate::device::{Kernels, Region};
use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::ops::{
    Float, Kernel, MaskElement, MaskFor, RngState, apply_mask_kernel, bit_mask_bytes,
    check_bit_mask,
};

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

/// What [`dropout_with_bits_`](Lease::dropout_with_bits_) used, kept for
/// the backward pass: the keep decisions themselves are in the bit mask it
/// wrote (`bytes()` bytes), which
/// [`dropout_backward_with_bits_`](Lease::dropout_backward_with_bits_)
/// reads instead of regenerating the random stream.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DropoutBitMask {
    /// Drop probability.
    pub p: f32,
    /// Stream position of the forward call's element 0.
    pub rng: RngState,
    /// Elements of the forward call.
    pub len: usize,
}

impl DropoutBitMask {
    /// Bytes of the bit mask: [`bit_mask_bytes`]`(len)`.
    pub fn bytes(&self) -> usize {
        bit_mask_bytes(self.len)
    }

    /// The factor kept elements get, `1 / (1 - p)` computed in f32 as the
    /// forward computed it.
    pub fn scale(&self) -> f32 {
        1.0 / (1.0 - self.p)
    }

    /// The record of the same forward call's regenerating form: the same
    /// `(p, rng, len)`, so `dropout_backward_` with it gives the backward
    /// bit for bit without the mask (when its bytes are gone).
    pub fn regenerating(&self) -> DropoutMask {
        DropoutMask {
            p: self.p,
            rng: self.rng,
            len: self.len,
        }
    }

    /// Checks that the gradient `buffer` of `len` elements has the
    /// forward's length.
    pub(crate) fn check_gradient(&self, op: &'static str, buffer: &str, len: usize) -> Result<()> {
        if self.len != len {
            return Err(Error::BitMaskElements {
                op,
                buffer: buffer.to_owned(),
                len,
                expected: self.len,
            });
        }
        Ok(())
    }
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
        self.random(|rng| Kernel::Bernoulli { p, rng }, None)
    }

    fn random(
        &mut self,
        make: impl FnOnce(RngState) -> Kernel,
        other: Option<Region>,
    ) -> Result<RngState> {
        let cell = &self.arena.rng;
        let state = cell.get();
        let next = state.advanced(self.len())?;
        self.launch(&make(state), other)?;
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
    /// [`dropout_backward_`](Lease::dropout_backward_), which regenerates
    /// it from the random stream: the memory-free form (for models bound
    /// by memory). [`dropout_with_bits_`](Lease::dropout_with_bits_) stores
    /// the mask in `n / 8` bytes instead and makes the backward a
    /// memory-bound pass (see `docs/kernels.md` for which to choose).
    pub fn dropout_(&mut self, p: f32) -> Result<DropoutMask> {
        let rng = self.random(|rng| Kernel::Dropout { p, rng }, None)?;
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

    /// Dropout in place that also stores its keep decisions in `bits`, one
    /// bit per element: this view exactly as [`dropout_`](Lease::dropout_)
    /// leaves it (the same stream elements, so the same bits; the stream
    /// advances the same way), and bit `e % 8` of byte `e / 8` of `bits` set
    /// where element `e` was kept. `bits` is a `u8` lease whose view holds
    /// [`bit_mask_bytes`]`(self.len())` bytes (ceil(n / 8); an
    /// [`Error::BitMaskBytes`] otherwise). Keep the returned
    /// [`DropoutBitMask`] and the bits for
    /// [`dropout_backward_with_bits_`](Lease::dropout_backward_with_bits_),
    /// a pass bounded by memory bandwidth where the regenerating backward
    /// recomputes the random stream.
    ///
    /// ```
    /// use tensor_arena::ops::bit_mask_bytes;
    /// use tensor_arena::{Arena, HostDevice, Planner};
    /// let mut p = Planner::new();
    /// let fwd = p.phase("forward")?;
    /// let bwd = p.phase("backward")?;
    /// let h = p.span::<f32>("h", &[64, 16], fwd, fwd)?;
    /// // 1024 elements: 128 bytes of bits, alive from forward to backward.
    /// let bits = p.span::<u8>("h.keep_bits", &[bit_mask_bytes(64 * 16)], fwd, bwd)?;
    /// let dh = p.span::<f32>("dh", &[64, 16], bwd, bwd)?;
    /// let mut arena = Arena::new(HostDevice::new(), p.plan()?)?;
    /// arena.step(|s| {
    ///     let mut bits = s.lease(bits)?;
    ///     let mut h = s.lease(h)?;
    ///     h.as_mut_slice().fill(1.0);
    ///     let mask = h.dropout_with_bits_(0.25, &mut bits)?;
    ///     let kept: Vec<bool> = h.as_slice().iter().map(|&v| v != 0.0).collect();
    ///     drop(h);
    ///     s.enter(bwd)?;
    ///     let mut dh = s.lease(dh)?;
    ///     dh.as_mut_slice().fill(3.0);
    ///     dh.dropout_backward_with_bits_(&mask, &bits)?;
    ///     for (g, k) in dh.as_slice().iter().zip(kept) {
    ///         assert_eq!(*g, if k { 3.0 / 0.75 } else { 0.0 });
    ///     }
    ///     Ok::<_, tensor_arena::Error>(())
    /// })?;
    /// # Ok::<(), tensor_arena::Error>(())
    /// ```
    pub fn dropout_with_bits_(
        &mut self,
        p: f32,
        bits: &mut Lease<'_, u8, D>,
    ) -> Result<DropoutBitMask> {
        let region = self.bits_operand("dropout_with_bits_", self.len(), bits)?;
        let rng = self.random(|rng| Kernel::DropoutBits { p, rng }, Some(region))?;
        Ok(DropoutBitMask {
            p,
            rng,
            len: self.len(),
        })
    }

    /// Applies the forward pass's keep decisions, read from the bit mask
    /// [`dropout_with_bits_`](Lease::dropout_with_bits_) wrote, to this
    /// gradient: `x = bit ? x * (1 / (1 - p)) : 0`, bit for bit what
    /// [`dropout_backward_`](Lease::dropout_backward_) gives, with no random
    /// numbers. The arena's stream does not move. Errors: a view of another
    /// length than the forward's ([`Error::BitMaskElements`]), bits of
    /// another length than [`DropoutBitMask::bytes`]
    /// ([`Error::BitMaskBytes`]).
    pub fn dropout_backward_with_bits_(
        &mut self,
        mask: &DropoutBitMask,
        bits: &Lease<'_, u8, D>,
    ) -> Result<()> {
        let op = "dropout_backward_with_bits_";
        mask.check_gradient(op, self.name(), self.len())?;
        let region = self.bits_operand(op, mask.len, bits)?;
        self.launch(
            &Kernel::ApplyBits {
                scale: mask.scale(),
            },
            Some(region),
        )
    }

    /// `bits`' region, after checking it is of this arena and holds the bit
    /// mask of `elements` elements.
    fn bits_operand(
        &self,
        op: &'static str,
        elements: usize,
        bits: &Lease<'_, u8, D>,
    ) -> Result<Region> {
        if !std::ptr::eq(self.arena, bits.arena) {
            return Err(Error::ArenaMismatch {
                op,
                buffer: self.name().to_owned(),
                other: bits.name().to_owned(),
            });
        }
        check_bit_mask(op, self.name(), elements, bits.name(), bits.len())?;
        Ok(bits.region())
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
