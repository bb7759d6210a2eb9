//! The in-place kernels on site leases: the arena lease's own kernels once
//! frozen; the host reference on pool memory, with the recorder's random
//! stream, while recording. Both give the same bits, so recorded steps train
//! exactly as planned ones would.

use ndarray::{ArrayView, ArrayViewMut, Dimension};

use super::lease::{Inner, Pooled, SiteLease};
use super::step::Recorded;
use crate::arena::{DropoutBitMask, DropoutMask, LeaseOps};
use crate::device::{Device, HostAccessible, Kernels};
use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::ops::{self, Float, MaskElement, MaskFor, RngState};

impl<T: MaskElement> Pooled<'_, T> {
    /// Runs a random kernel at the recorder's stream position and moves the
    /// stream on by the view's length, as the arena does.
    fn random(&mut self, run: impl FnOnce(&mut [T], RngState) -> Result<()>) -> Result<RngState> {
        let cell = &self.shared.rng;
        let state = cell.get();
        let next = state.advanced(self.len)?;
        run(self.slice_mut(), state)?;
        cell.set(next);
        Ok(state)
    }
}

impl<T: MaskElement, D: Kernels> SiteLease<'_, T, D> {
    /// Fills the view with 1 (probability `p`) or 0; as [`Lease::bernoulli_`](crate::Lease::bernoulli_).
    ///
    /// ```
    /// use tensor_arena::{HostDevice, record::Recorder};
    /// let mut rec = Recorder::new(HostDevice::new());
    /// rec.set_seed(1234);
    /// rec.step(|s| {
    ///     let mut m = s.temp::<f32>("mask", &[16])?;
    ///     m.bernoulli_(0.5)?;
    ///     assert_eq!(&m.as_slice()[..4], &[1.0, 0.0, 1.0, 0.0]);
    ///     Ok::<_, tensor_arena::Error>(())
    /// })?;
    /// # Ok::<(), tensor_arena::Error>(())
    /// ```
    pub fn bernoulli_(&mut self, p: f32) -> Result<RngState> {
        match &mut self.inner {
            Inner::Planned(l) => l.bernoulli_(p),
            Inner::Pooled(x) => x.random(|s, rng| ops::bernoulli(s, p, rng)),
        }
    }
}

impl<T: Float, D: Kernels> SiteLease<'_, T, D> {
    /// Fused dropout in place; as [`Lease::dropout_`](crate::Lease::dropout_).
    pub fn dropout_(&mut self, p: f32) -> Result<DropoutMask> {
        match &mut self.inner {
            Inner::Planned(l) => l.dropout_(p),
            Inner::Pooled(x) => {
                let rng = x.random(|s, rng| ops::dropout(s, p, rng))?;
                Ok(DropoutMask { p, rng, len: x.len })
            }
        }
    }

    /// The forward pass's dropout mask, regenerated and applied to this
    /// gradient; as [`Lease::dropout_backward_`](crate::Lease::dropout_backward_).
    pub fn dropout_backward_(&mut self, mask: &DropoutMask) -> Result<()> {
        match &mut self.inner {
            Inner::Planned(l) => l.dropout_backward_(mask),
            Inner::Pooled(x) => {
                if mask.len != x.len {
                    return Err(Error::MaskLengthMismatch {
                        buffer: x.name.to_string(),
                        len: x.len,
                        expected: mask.len,
                    });
                }
                ops::dropout(x.slice_mut(), mask.p, mask.rng)
            }
        }
    }

    /// Dropout in place with its keep decisions stored in `bits`, one bit
    /// per element; as
    /// [`Lease::dropout_with_bits_`](crate::Lease::dropout_with_bits_).
    ///
    /// ```
    /// use tensor_arena::ops::bit_mask_bytes;
    /// use tensor_arena::{HostDevice, record::Recorder};
    /// let mut rec = Recorder::new(HostDevice::new());
    /// rec.set_seed(5);
    /// rec.step(|s| {
    ///     let mut h = s.temp::<f32>("h", &[100])?;
    ///     h.as_mut_slice().fill(1.0);
    ///     // 100 elements: 13 bytes of bits, learned like any temporary.
    ///     let mut bits = s.temp::<u8>("h.keep_bits", &[bit_mask_bytes(100)])?;
    ///     let mask = h.dropout_with_bits_(0.5, &mut bits)?;
    ///     let mut dh = s.temp::<f32>("dh", &[100])?;
    ///     dh.as_mut_slice().fill(1.0);
    ///     dh.dropout_backward_with_bits_(&mask, &bits)?;
    ///     assert_eq!(h.as_slice(), dh.as_slice());
    ///     Ok::<_, tensor_arena::Error>(())
    /// })?;
    /// # Ok::<(), tensor_arena::Error>(())
    /// ```
    pub fn dropout_with_bits_(
        &mut self,
        p: f32,
        bits: &mut SiteLease<'_, u8, D>,
    ) -> Result<DropoutBitMask> {
        let op = "dropout_with_bits_";
        match (&mut self.inner, &mut bits.inner) {
            (Inner::Planned(x), Inner::Planned(b)) => x.dropout_with_bits_(p, b),
            (Inner::Pooled(x), Inner::Pooled(b)) => {
                check_bits(op, x, x.len, b)?;
                let out = b.slice_mut();
                let rng = x.random(|s, rng| ops::dropout_bits(s, out, p, rng))?;
                Ok(DropoutBitMask { p, rng, len: x.len })
            }
            _ => Err(self.mixed(op, bits)),
        }
    }

    /// The forward's keep decisions, read from `bits`, applied to this
    /// gradient; as
    /// [`Lease::dropout_backward_with_bits_`](crate::Lease::dropout_backward_with_bits_).
    pub fn dropout_backward_with_bits_(
        &mut self,
        mask: &DropoutBitMask,
        bits: &SiteLease<'_, u8, D>,
    ) -> Result<()> {
        let op = "dropout_backward_with_bits_";
        match (&mut self.inner, &bits.inner) {
            (Inner::Planned(x), Inner::Planned(b)) => x.dropout_backward_with_bits_(mask, b),
            (Inner::Pooled(x), Inner::Pooled(b)) => {
                mask.check_gradient(op, &x.name, x.len)?;
                check_bits(op, x, mask.len, b)?;
                ops::apply_bits(x.slice_mut(), b.slice(), mask.scale())
            }
            _ => Err(self.mixed(op, bits)),
        }
    }

    /// `x = mask != 0 ? x * scale : 0`, the mask of `T` or `u8`; as
    /// [`Lease::apply_mask_`](crate::Lease::apply_mask_).
    pub fn apply_mask_<M: MaskFor<T>>(
        &mut self,
        mask: &SiteLease<'_, M, D>,
        scale: f32,
    ) -> Result<()> {
        let op = "apply_mask_";
        match (&mut self.inner, &mask.inner) {
            (Inner::Planned(x), Inner::Planned(m)) => x.apply_mask_(m, scale),
            (Inner::Pooled(x), Inner::Pooled(m)) => {
                check_operand(op, x, m)?;
                ops::apply_mask(x.slice_mut(), m.slice(), scale)
            }
            _ => Err(self.mixed(op, mask)),
        }
    }

    /// `x = x * other`; as [`Lease::mul_`](crate::Lease::mul_).
    pub fn mul_(&mut self, other: &SiteLease<'_, T, D>) -> Result<()> {
        let op = "mul_";
        match (&mut self.inner, &other.inner) {
            (Inner::Planned(x), Inner::Planned(y)) => x.mul_(y),
            (Inner::Pooled(x), Inner::Pooled(y)) => {
                check_operand(op, x, y)?;
                ops::mul(x.slice_mut(), y.slice())
            }
            _ => Err(self.mixed(op, other)),
        }
    }

    /// `x = x * s`.
    pub fn mul_scalar_(&mut self, s: f32) -> Result<()> {
        match &mut self.inner {
            Inner::Planned(l) => l.mul_scalar_(s),
            Inner::Pooled(x) => {
                ops::mul_scalar(x.slice_mut(), s);
                Ok(())
            }
        }
    }

    #[cold]
    fn mixed<U: Element>(&self, op: &'static str, other: &SiteLease<'_, U, D>) -> Error {
        Error::ArenaMismatch {
            op,
            buffer: self.name().to_owned(),
            other: other.name().to_owned(),
        }
    }
}

/// Both operands come from the same recorder and have the same shape.
fn check_operand<T: Element, U: Element>(
    op: &'static str,
    x: &Pooled<'_, T>,
    y: &Pooled<'_, U>,
) -> Result<()> {
    if !std::ptr::eq(x.shared, y.shared) {
        return Err(Error::ArenaMismatch {
            op,
            buffer: x.name.to_string(),
            other: y.name.to_string(),
        });
    }
    let (xs, ys) = (
        &x.dims[..usize::from(x.ndim)],
        &y.dims[..usize::from(y.ndim)],
    );
    if xs != ys {
        return Err(Error::ShapeMismatch {
            op,
            buffer: x.name.to_string(),
            shape: xs.to_vec(),
            other: y.name.to_string(),
            other_shape: ys.to_vec(),
        });
    }
    Ok(())
}

/// `bits` comes from the same recorder as `x` and holds the bit mask of
/// `elements` elements.
fn check_bits<T: Element>(
    op: &'static str,
    x: &Pooled<'_, T>,
    elements: usize,
    bits: &Pooled<'_, u8>,
) -> Result<()> {
    if !std::ptr::eq(x.shared, bits.shared) {
        return Err(Error::ArenaMismatch {
            op,
            buffer: x.name.to_string(),
            other: bits.name.to_string(),
        });
    }
    ops::check_bit_mask(op, &x.name, elements, &bits.name, bits.len)
}

impl<T: Element, D: Device> LeaseOps<T> for SiteLease<'_, T, D> {
    type Family = Recorded<D>;

    fn name(&self) -> &str {
        SiteLease::name(self)
    }
    fn shape(&self) -> &[usize] {
        SiteLease::shape(self)
    }
    fn len(&self) -> usize {
        SiteLease::len(self)
    }
    fn capacity(&self) -> usize {
        SiteLease::capacity(self)
    }
    fn set_shape(&mut self, shape: &[usize]) -> Result<()> {
        SiteLease::set_shape(self, shape)
    }
    fn copy_from_host(&mut self, src: &[T]) -> Result<()> {
        SiteLease::copy_from_host(self, src)
    }
    fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        SiteLease::copy_to_host(self, dst)
    }
    fn as_slice(&self) -> &[T]
    where
        D: HostAccessible,
    {
        SiteLease::as_slice(self)
    }
    fn as_mut_slice(&mut self) -> &mut [T]
    where
        D: HostAccessible,
    {
        SiteLease::as_mut_slice(self)
    }
    fn view<Dm: Dimension>(&self) -> Result<ArrayView<'_, T, Dm>>
    where
        D: HostAccessible,
    {
        SiteLease::view(self)
    }
    fn view_mut<Dm: Dimension>(&mut self) -> Result<ArrayViewMut<'_, T, Dm>>
    where
        D: HostAccessible,
    {
        SiteLease::view_mut(self)
    }
    fn bernoulli_(&mut self, p: f32) -> Result<RngState>
    where
        T: MaskElement,
        D: Kernels,
    {
        SiteLease::bernoulli_(self, p)
    }
    fn dropout_(&mut self, p: f32) -> Result<DropoutMask>
    where
        T: Float,
        D: Kernels,
    {
        SiteLease::dropout_(self, p)
    }
    fn dropout_backward_(&mut self, mask: &DropoutMask) -> Result<()>
    where
        T: Float,
        D: Kernels,
    {
        SiteLease::dropout_backward_(self, mask)
    }
    fn dropout_with_bits_(
        &mut self,
        p: f32,
        bits: &mut SiteLease<'_, u8, D>,
    ) -> Result<DropoutBitMask>
    where
        T: Float,
        D: Kernels,
    {
        SiteLease::dropout_with_bits_(self, p, bits)
    }
    fn dropout_backward_with_bits_(
        &mut self,
        mask: &DropoutBitMask,
        bits: &SiteLease<'_, u8, D>,
    ) -> Result<()>
    where
        T: Float,
        D: Kernels,
    {
        SiteLease::dropout_backward_with_bits_(self, mask, bits)
    }
    fn apply_mask_<M: MaskFor<T>>(&mut self, mask: &SiteLease<'_, M, D>, scale: f32) -> Result<()>
    where
        T: Float,
        D: Kernels,
    {
        SiteLease::apply_mask_(self, mask, scale)
    }
    fn mul_(&mut self, other: &SiteLease<'_, T, D>) -> Result<()>
    where
        T: Float,
        D: Kernels,
    {
        SiteLease::mul_(self, other)
    }
    fn mul_scalar_(&mut self, s: f32) -> Result<()>
    where
        T: Float,
        D: Kernels,
    {
        SiteLease::mul_scalar_(self, s)
    }
}
