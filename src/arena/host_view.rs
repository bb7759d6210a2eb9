//! Slices and ndarray views of leases on host-accessible devices.
//!
//! This is the one place leases are turned into Rust references, so the
//! argument for why that is sound lives here, next to the `unsafe`.

use ndarray::{ArrayView, ArrayViewMut, Dimension};

use super::Lease;
use crate::device::HostAccessible;
use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::shape::{VIEW_MISMATCH, ndarray_dim};

impl<T: Element, D: HostAccessible> Lease<'_, T, D> {
    /// The current view as a slice.
    pub fn as_slice(&self) -> &[T] {
        // SAFETY: `ptr` is slab base + the buffer's offset, and the plan puts
        // `capacity * size_of::<T>()` bytes there inside the slab; `len <=
        // capacity`. `HostAccessible` promises initialised host memory that
        // lives as long as the slab, which outlives the lease (the lease
        // borrows the step, which borrows the arena that owns the slab).
        // `T: Pod`, so every bit pattern is valid, and the slab is aligned
        // to at least 64 bytes at offsets that are multiples of 64, which
        // covers `align_of::<T>()`. No `&mut` to these bytes exists: the
        // book never grants two live leases sharing bytes, the arena's own
        // copies need `&mut Arena`, and this lease is borrowed shared here.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The current view as a mutable slice.
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as in `as_slice`; the lease is borrowed exclusively, and
        // no other live lease shares these bytes, so this is the only
        // reference to them.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// The current view as an ndarray view with dimension `Dm`
    /// (`Ix1`, `Ix2`, ... or `IxDyn`). Fails if the view's number of
    /// dimensions differs from `Dm`'s. Fixed dimensions never allocate.
    pub fn view<Dm: Dimension>(&self) -> Result<ArrayView<'_, T, Dm>> {
        let dim = self.dimension::<Dm>()?;
        ArrayView::from_shape(dim, self.as_slice()).map_err(|_| self.bad_dim(VIEW_MISMATCH))
    }

    /// Mutable ndarray view; see [`view`](Lease::view).
    pub fn view_mut<Dm: Dimension>(&mut self) -> Result<ArrayViewMut<'_, T, Dm>> {
        // Checked through a shared view first, so the error can name the
        // buffer without borrowing it while the mutable view exists (and
        // without building the error, which allocates, on success).
        self.view::<Dm>()?;
        let dim = self.dimension::<Dm>()?;
        ArrayViewMut::from_shape(dim, self.as_mut_slice()).map_err(|_| Error::InvalidView {
            buffer: String::new(),
            shape: Vec::new(),
            reason: VIEW_MISMATCH,
        })
    }

    fn dimension<Dm: Dimension>(&self) -> Result<Dm> {
        ndarray_dim(self.name(), self.shape())
    }

    fn bad_dim(&self, reason: &'static str) -> Error {
        Error::InvalidView {
            buffer: self.name().to_owned(),
            shape: self.shape().to_vec(),
            reason,
        }
    }
}
