//! A lease: one buffer's bytes, held for part of a step, viewed with the
//! shape this step needs.

use std::marker::PhantomData;

use super::Arena;
use super::book::Slot;
use crate::device::{Device, Region, Slab};
use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::plan::{Buffer, BufferId, PlannedBuffer};
use crate::shape::{MAX_DIMS, check_view};

/// A typed view of one planned buffer, valid until it is dropped or its step
/// ends (the borrow checker enforces the latter).
///
/// Its capacity is the padded shape; its current shape is any shape whose
/// element count fits (like `resize_` in PyTorch; the one
/// [`ShapeRule`](crate::ShapeRule)), stored contiguously from the buffer's
/// first element. Kernels and copies work on the current shape
/// only, never on the padding.
///
/// On a host-accessible device the data is reachable as slices and ndarray
/// views (`as_slice`, `view_mut`, ...); on any device as a [`Region`] and a
/// raw device pointer for foreign kernels.
pub struct Lease<'s, T: Element, D: Device> {
    pub(crate) arena: &'s Arena<D>,
    pub(crate) slot: &'s Slot,
    /// Device address of element 0 (`slab base + offset`).
    pub(crate) ptr: *mut T,
    /// Current view shape `dims[..ndim]`; its product is `len`, at most
    /// `capacity`.
    pub(crate) dims: [usize; MAX_DIMS],
    pub(crate) ndim: u8,
    pub(crate) len: usize,
    _t: PhantomData<&'s mut [T]>,
}

impl<'s, T: Element, D: Device> Lease<'s, T, D> {
    /// Called by the step after the book has granted the lease.
    #[inline]
    pub(crate) fn new(arena: &'s Arena<D>, slot: &'s Slot) -> Lease<'s, T, D> {
        Lease {
            arena,
            slot,
            ptr: arena.slab.base().wrapping_add(slot.offset).cast::<T>(),
            dims: slot.dims,
            ndim: slot.ndim,
            len: slot.elements,
            _t: PhantomData,
        }
    }

    fn planned(&self) -> &PlannedBuffer {
        &self.arena.plan.buffers()[self.slot.index as usize]
    }

    /// The buffer's declared name.
    pub fn name(&self) -> &str {
        self.planned().name()
    }

    /// The typed handle this lease was made from.
    pub fn buffer(&self) -> Buffer<T> {
        Buffer::new(BufferId {
            planner: self.arena.plan.id,
            index: self.slot.index,
            dtype: T::DTYPE,
        })
    }

    /// Current view shape (initially the declared shape).
    pub fn shape(&self) -> &[usize] {
        &self.dims[..usize::from(self.ndim)]
    }

    /// Elements in the current view.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the current view has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Elements the buffer can hold (its padded shape).
    pub fn capacity(&self) -> usize {
        self.slot.capacity
    }

    /// The padded shape planned for this buffer.
    pub fn padded_shape(&self) -> &[usize] {
        self.planned().padded_shape()
    }

    /// Views the buffer with `shape`: any shape of 1 to [`MAX_DIMS`]
    /// dimensions whose element count fits the capacity (and, for a buffer
    /// that opted in to [`ShapeRule::Dims`](crate::ShapeRule::Dims), within
    /// the padded shape in every dimension). Nothing is allocated or moved;
    /// the data is reinterpreted in place.
    pub fn set_shape(&mut self, shape: &[usize]) -> Result<()> {
        let planned = self.planned();
        let elements = check_view(
            planned.name(),
            shape,
            self.slot.capacity,
            planned.padded_shape(),
            self.slot.rule,
        )?;
        self.dims[..shape.len()].copy_from_slice(shape);
        self.ndim = shape.len() as u8;
        self.len = elements;
        Ok(())
    }

    /// [`set_shape`](Lease::set_shape), by value, for chaining.
    pub fn with_shape(mut self, shape: &[usize]) -> Result<Self> {
        self.set_shape(shape)?;
        Ok(self)
    }

    /// Slab bytes of the current view.
    pub fn region(&self) -> Region {
        Region {
            offset: self.slot.offset,
            len: self.len * std::mem::size_of::<T>(),
        }
    }

    /// Slab bytes of the whole capacity.
    pub fn capacity_region(&self) -> Region {
        Region {
            offset: self.slot.offset,
            len: self.slot.capacity * std::mem::size_of::<T>(),
        }
    }

    /// Device address of the first element, for foreign kernels and
    /// collective libraries. Valid while the lease lives; dereferenceable on
    /// the host only for host-accessible devices.
    pub fn device_ptr(&self) -> *mut T {
        self.ptr
    }

    /// Copies `src` into the current view. `src.len()` must equal
    /// [`len`](Lease::len).
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<()> {
        self.check_len(src.len())?;
        let arena = self.arena;
        arena
            .device
            .write(&arena.slab, self.slot.offset, bytemuck::cast_slice(src))
    }

    /// Copies the current view into `dst`. `dst.len()` must equal
    /// [`len`](Lease::len).
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        self.check_len(dst.len())?;
        self.arena.device.read(
            &self.arena.slab,
            self.slot.offset,
            bytemuck::cast_slice_mut(dst),
        )
    }

    fn check_len(&self, given: usize) -> Result<()> {
        if given != self.len {
            return Err(Error::LengthMismatch {
                buffer: self.name().to_owned(),
                given,
                expected: self.len,
            });
        }
        Ok(())
    }
}

impl<T: Element, D: Device> Drop for Lease<'_, T, D> {
    #[inline]
    fn drop(&mut self) {
        if self.arena.options.checked {
            self.arena.on_release(self.slot, self.len);
        }
        self.arena.book.release(self.slot);
    }
}

impl<T: Element, D: Device> std::fmt::Debug for Lease<'_, T, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("buffer", &self.name())
            .field("dtype", &T::DTYPE)
            .field("shape", &self.shape())
            .field("capacity", &self.slot.capacity)
            .field("region", &self.region())
            .finish()
    }
}
