//! [`TensorView`]: an aclnn operand described over a lease's bytes (or over
//! nothing, for workspace queries). Pure data: the FFI that turns it into
//! an `aclTensor` is in `call`. Views of leases come from `Lease::tensor`
//! (in the arena, which depends on this module, never the reverse).

use std::marker::PhantomData;

use crate::dtype::DType;
use crate::error::{Error, Result};

/// Most dimensions a view may have (the crate's shape limit).
pub const MAX_VIEW_DIMS: usize = crate::shape::MAX_DIMS;

/// Where a view's elements are: which arena, the buffer's slab offset and
/// its capacity in elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Place {
    pub(super) arena: usize,
    pub(super) offset: usize,
    pub(super) capacity: usize,
}

/// An operand of an aclnn operator: element type, shape and strides (in
/// elements) over a lease's bytes, or over nothing for workspace queries
/// ([`TensorView::detached`]).
#[derive(Debug, Clone, Copy)]
pub struct TensorView<'a> {
    pub(super) place: Option<Place>,
    pub(super) dtype: DType,
    pub(super) ndim: u8,
    pub(super) dims: [i64; MAX_VIEW_DIMS],
    pub(super) strides: [i64; MAX_VIEW_DIMS],
    _lease: PhantomData<&'a ()>,
}

impl<'a> TensorView<'a> {
    /// A row-major view of `shape` over `capacity` elements at slab
    /// `offset` of the slab owned by `owner` (an identity the caller
    /// compares, never dereferenced). Made by `Lease::tensor`.
    pub(crate) fn on_slab(
        owner: usize,
        offset: usize,
        capacity: usize,
        dtype: DType,
        shape: &[usize],
    ) -> TensorView<'a> {
        let place = Place {
            arena: owner,
            offset,
            capacity,
        };
        TensorView::contiguous(Some(place), dtype, shape)
    }

    fn contiguous(place: Option<Place>, dtype: DType, shape: &[usize]) -> TensorView<'a> {
        let mut v = TensorView {
            place,
            dtype,
            ndim: shape.len().min(MAX_VIEW_DIMS) as u8,
            dims: [0; MAX_VIEW_DIMS],
            strides: [0; MAX_VIEW_DIMS],
            _lease: PhantomData,
        };
        let mut stride = 1i64;
        for i in (0..usize::from(v.ndim)).rev() {
            v.dims[i] = shape[i] as i64;
            v.strides[i] = stride;
            stride = stride.saturating_mul(shape[i] as i64);
        }
        v
    }

    fn invalid(&self, shape: &[usize], reason: &'static str) -> Error {
        Error::InvalidView {
            buffer: format!("aclnn tensor {:?}", self.shape()),
            shape: shape.to_vec(),
            reason,
        }
    }

    /// A view of no memory with `shape`, for
    /// [`AscendDevice::workspace_size`]; operators refuse to run on it.
    ///
    /// ```
    /// use tensor_arena::device::ascend::TensorView;
    /// let v = TensorView::detached(tensor_arena::DType::F32, &[4, 3])?;
    /// assert_eq!(v.shape(), [4, 3]);
    /// assert_eq!(v.t()?.strides(), [1, 3]);
    /// assert!(TensorView::detached(tensor_arena::DType::F32, &[]).is_err());
    /// # Ok::<(), tensor_arena::Error>(())
    /// ```
    pub fn detached(dtype: DType, shape: &[usize]) -> Result<TensorView<'static>> {
        let v = TensorView::contiguous(None, dtype, &[]);
        if shape.is_empty() || shape.len() > MAX_VIEW_DIMS {
            return Err(v.invalid(shape, "a tensor has 1 to 8 dimensions"));
        }
        if shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .is_none_or(|n| n > i64::MAX as usize)
        {
            return Err(v.invalid(shape, "the element count overflows"));
        }
        Ok(TensorView::contiguous(None, dtype, shape))
    }

    /// The same elements with another row-major shape of equal element
    /// count (only for row-major views).
    pub fn reshape(self, shape: &[usize]) -> Result<TensorView<'a>> {
        if shape.is_empty() || shape.len() > MAX_VIEW_DIMS {
            return Err(self.invalid(shape, "a tensor has 1 to 8 dimensions"));
        }
        if !self.is_row_major() {
            return Err(self.invalid(shape, "only a row-major view can be reshaped"));
        }
        let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        if n != Some(self.elements()) {
            return Err(self.invalid(shape, "a reshape keeps the element count"));
        }
        Ok(TensorView::contiguous(self.place, self.dtype, shape))
    }

    /// The transpose of a 2-D view (strides swapped, no data moved).
    pub fn t(self) -> Result<TensorView<'a>> {
        if self.ndim != 2 {
            return Err(self.invalid(&[], "only a 2-D view can be transposed"));
        }
        let mut v = self;
        v.dims.swap(0, 1);
        v.strides.swap(0, 1);
        Ok(v)
    }

    /// The shape.
    pub fn shape(&self) -> &[i64] {
        &self.dims[..usize::from(self.ndim)]
    }

    /// The strides, in elements.
    pub fn strides(&self) -> &[i64] {
        &self.strides[..usize::from(self.ndim)]
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Elements in the view.
    pub fn elements(&self) -> usize {
        self.shape().iter().map(|&d| d as usize).product()
    }

    /// Elements of storage the view spans (largest index + 1).
    pub(super) fn extent(&self) -> usize {
        if self.elements() == 0 {
            return 0;
        }
        1 + self
            .shape()
            .iter()
            .zip(self.strides())
            .map(|(&d, &s)| (d as usize - 1) * s as usize)
            .sum::<usize>()
    }

    fn is_row_major(&self) -> bool {
        let mut stride = 1i64;
        for i in (0..usize::from(self.ndim)).rev() {
            if self.dims[i] != 1 && self.strides[i] != stride {
                return false;
            }
            stride *= self.dims[i];
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_know_their_extent() {
        let v = TensorView::detached(DType::F32, &[4, 3]).unwrap();
        assert_eq!((v.elements(), v.extent()), (12, 12));
        let t = v.t().unwrap();
        assert_eq!(
            (t.shape(), t.strides(), t.extent()),
            (&[3i64, 4][..], &[1i64, 3][..], 12)
        );
        assert!(!t.is_row_major());
        assert!(t.reshape(&[12]).is_err());
        let r = v.reshape(&[2, 6, 1]).unwrap();
        assert_eq!(r.strides(), [6, 1, 1]);
        assert!(v.reshape(&[5, 2]).is_err());
        assert!(r.t().is_err());
    }
}
