//! A site lease: while recording, memory from the recorder's pool; once
//! frozen, an arena [`Lease`]. One type, so a step is written once.

use std::marker::PhantomData;
use std::sync::Arc;

use ndarray::{ArrayView, ArrayViewMut, Dimension};

use super::shared_state::SharedState;
use super::site_book::Granted;
use crate::arena::Lease;
use crate::device::{Device, HostAccessible};
use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::shape::{MAX_DIMS, Shape, ShapeRule, VIEW_MISMATCH, check_view, ndarray_dim};

/// A typed view of one site's memory, valid until it is dropped or its
/// step ends, with the same methods as an arena [`Lease`]: shape and view,
/// slices and ndarray views on the host, and the in-place kernels
/// (`bernoulli_`, `dropout_`, `mul_`, ...).
///
/// While the recorder records, the memory comes from its host pool and the
/// kernels run the host reference ([`crate::ops`]) on the recorder's random
/// stream, bit for bit what the device kernels compute. Once it is frozen,
/// the lease is an arena [`Lease`] of the planned buffer
/// ([`as_lease`](SiteLease::as_lease)).
pub struct SiteLease<'s, T: Element, D: Device> {
    pub(crate) inner: Inner<'s, T, D>,
}

pub(crate) enum Inner<'s, T: Element, D: Device> {
    Planned(Lease<'s, T, D>),
    Pooled(Pooled<'s, T>),
}

/// A lease of pool memory: the site's buffer, taken out of the table while
/// the lease lives and put back when it drops.
pub(crate) struct Pooled<'s, T: Element> {
    pub shared: &'s SharedState,
    pub index: usize,
    pub name: Arc<str>,
    /// The site's memory, at least `capacity` elements of `T`.
    pub data: Vec<u64>,
    /// The request's shape after rounding: the lease's capacity.
    pub padded: Shape,
    /// The site's shape rule.
    pub rule: ShapeRule,
    pub dims: [usize; MAX_DIMS],
    pub ndim: u8,
    pub len: usize,
    _t: PhantomData<fn() -> T>,
}

impl<'s, T: Element> Pooled<'s, T> {
    /// Called with the site marked live and `data`, its memory, large
    /// enough for the granted padded shape.
    pub fn new(
        shared: &'s SharedState,
        name: Arc<str>,
        data: Vec<u64>,
        granted: Granted,
        shape: &[usize],
    ) -> Pooled<'s, T> {
        let mut dims = [0; MAX_DIMS];
        // The book validated `shape` (at most MAX_DIMS dimensions).
        dims[..shape.len()].copy_from_slice(shape);
        Pooled {
            shared,
            index: granted.index,
            name,
            data,
            padded: granted.padded,
            rule: granted.rule,
            dims,
            ndim: shape.len() as u8,
            len: shape.iter().product(),
            _t: PhantomData,
        }
    }

    pub fn slice(&self) -> &[T] {
        // Cannot fail: `u64` is aligned for every element type and its
        // size is a multiple of theirs.
        &bytemuck::cast_slice::<u64, T>(&self.data)[..self.len]
    }

    pub fn slice_mut(&mut self) -> &mut [T] {
        &mut bytemuck::cast_slice_mut::<u64, T>(&mut self.data)[..self.len]
    }

    fn shape(&self) -> &[usize] {
        &self.dims[..usize::from(self.ndim)]
    }

    fn dimension<Dm: Dimension>(&self) -> Result<Dm> {
        ndarray_dim(&self.name, self.shape())
    }

    #[cold]
    fn bad_dim(&self, reason: &'static str) -> Error {
        Error::InvalidView {
            buffer: self.name.to_string(),
            shape: self.shape().to_vec(),
            reason,
        }
    }
}

impl<T: Element> Drop for Pooled<'_, T> {
    fn drop(&mut self) {
        self.shared
            .release(self.index, std::mem::take(&mut self.data));
    }
}

impl<'s, T: Element, D: Device> SiteLease<'s, T, D> {
    pub(crate) fn planned(lease: Lease<'s, T, D>) -> Self {
        SiteLease {
            inner: Inner::Planned(lease),
        }
    }

    pub(crate) fn pooled(pooled: Pooled<'s, T>) -> Self {
        SiteLease {
            inner: Inner::Pooled(pooled),
        }
    }

    /// The site's name.
    pub fn name(&self) -> &str {
        match &self.inner {
            Inner::Planned(l) => l.name(),
            Inner::Pooled(p) => &p.name,
        }
    }

    /// Whether the memory comes from the recording pool (the recorder was
    /// recording when the lease was made).
    pub fn is_recording(&self) -> bool {
        matches!(self.inner, Inner::Pooled(_))
    }

    /// The arena lease behind it, once the recorder is frozen: for device
    /// pointers, regions and foreign kernels.
    pub fn as_lease(&self) -> Option<&Lease<'s, T, D>> {
        match &self.inner {
            Inner::Planned(l) => Some(l),
            Inner::Pooled(_) => None,
        }
    }

    /// Mutable access to the arena lease, once frozen.
    pub fn as_lease_mut(&mut self) -> Option<&mut Lease<'s, T, D>> {
        match &mut self.inner {
            Inner::Planned(l) => Some(l),
            Inner::Pooled(_) => None,
        }
    }

    /// Current view shape (initially the shape requested).
    pub fn shape(&self) -> &[usize] {
        match &self.inner {
            Inner::Planned(l) => l.shape(),
            Inner::Pooled(p) => p.shape(),
        }
    }

    /// Elements in the current view.
    pub fn len(&self) -> usize {
        match &self.inner {
            Inner::Planned(l) => l.len(),
            Inner::Pooled(p) => p.len,
        }
    }

    /// Whether the current view has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Elements the lease can hold: the planned capacity once frozen; while
    /// recording, the capacity of the request's own padded shape, so that
    /// whatever works while recording also works on the plan.
    pub fn capacity(&self) -> usize {
        match &self.inner {
            Inner::Planned(l) => l.capacity(),
            Inner::Pooled(p) => p.padded.elements(),
        }
    }

    /// Views the memory with `shape` (any 1 to [`MAX_DIMS`] dimensions whose
    /// element count fits the capacity, by the site's
    /// [`ShapeRule`](crate::ShapeRule)), as [`Lease::set_shape`].
    pub fn set_shape(&mut self, shape: &[usize]) -> Result<()> {
        let p = match &mut self.inner {
            Inner::Planned(l) => return l.set_shape(shape),
            Inner::Pooled(p) => p,
        };
        let elements = check_view(&p.name, shape, p.padded.elements(), &p.padded, p.rule)?;
        p.dims[..shape.len()].copy_from_slice(shape);
        p.ndim = shape.len() as u8;
        p.len = elements;
        Ok(())
    }

    /// [`set_shape`](SiteLease::set_shape), by value, for chaining.
    pub fn with_shape(mut self, shape: &[usize]) -> Result<Self> {
        self.set_shape(shape)?;
        Ok(self)
    }

    /// Copies `src` into the current view; `src.len()` must equal
    /// [`len`](SiteLease::len).
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<()> {
        match &mut self.inner {
            Inner::Planned(l) => l.copy_from_host(src),
            Inner::Pooled(p) => {
                check_len(p, src.len())?;
                p.slice_mut().copy_from_slice(src);
                Ok(())
            }
        }
    }

    /// Copies the current view into `dst`; `dst.len()` must equal
    /// [`len`](SiteLease::len).
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        match &self.inner {
            Inner::Planned(l) => l.copy_to_host(dst),
            Inner::Pooled(p) => {
                check_len(p, dst.len())?;
                dst.copy_from_slice(p.slice());
                Ok(())
            }
        }
    }
}

fn check_len<T: Element>(p: &Pooled<'_, T>, given: usize) -> Result<()> {
    if given != p.len {
        return Err(Error::LengthMismatch {
            buffer: p.name.to_string(),
            given,
            expected: p.len,
        });
    }
    Ok(())
}

impl<T: Element, D: HostAccessible> SiteLease<'_, T, D> {
    /// The current view as a slice.
    pub fn as_slice(&self) -> &[T] {
        match &self.inner {
            Inner::Planned(l) => l.as_slice(),
            Inner::Pooled(p) => p.slice(),
        }
    }

    /// The current view as a mutable slice.
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        match &mut self.inner {
            Inner::Planned(l) => l.as_mut_slice(),
            Inner::Pooled(p) => p.slice_mut(),
        }
    }

    /// The current view as an ndarray view, as [`Lease::view`].
    pub fn view<Dm: Dimension>(&self) -> Result<ArrayView<'_, T, Dm>> {
        match &self.inner {
            Inner::Planned(l) => l.view(),
            Inner::Pooled(p) => {
                let dim = p.dimension::<Dm>()?;
                ArrayView::from_shape(dim, p.slice()).map_err(|_| p.bad_dim(VIEW_MISMATCH))
            }
        }
    }

    /// Mutable ndarray view, as [`Lease::view_mut`].
    pub fn view_mut<Dm: Dimension>(&mut self) -> Result<ArrayViewMut<'_, T, Dm>> {
        match &mut self.inner {
            Inner::Planned(l) => l.view_mut(),
            Inner::Pooled(p) => {
                // Checked through a shared view first, so the error can name
                // the site without borrowing it while the mutable view exists.
                let dim = p.dimension::<Dm>()?;
                ArrayView::from_shape(dim.clone(), p.slice())
                    .map_err(|_| p.bad_dim(VIEW_MISMATCH))?;
                ArrayViewMut::from_shape(dim, p.slice_mut()).map_err(|_| Error::InvalidView {
                    buffer: String::new(),
                    shape: Vec::new(),
                    reason: VIEW_MISMATCH,
                })
            }
        }
    }
}

impl<T: Element, D: Device> std::fmt::Debug for SiteLease<'_, T, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SiteLease")
            .field("site", &self.name())
            .field("dtype", &T::DTYPE)
            .field("shape", &self.shape())
            .field("capacity", &self.capacity())
            .field("recording", &self.is_recording())
            .finish()
    }
}
