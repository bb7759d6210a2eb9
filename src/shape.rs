//! Shapes, the rounding policy that pads them, and checked byte arithmetic.
//!
//! Every size computation here is checked: an overflow is an
//! [`Error::SizeOverflow`] naming the buffer, never a wrapped value.

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use crate::error::{Error, Result};

/// The most dimensions a buffer or a view may have.
pub const MAX_DIMS: usize = 8;

/// Dimensions stored inline: a shape never touches the heap.
pub type Dims = SmallVec<[usize; MAX_DIMS]>;

/// A validated shape: 1 to [`MAX_DIMS`] dimensions, none zero, whose element
/// count fits in `usize`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Shape(Dims);

impl Shape {
    /// Validates `dims` for the buffer called `buffer` (the name only feeds
    /// error messages).
    pub fn new(buffer: &str, dims: &[usize]) -> Result<Shape> {
        if dims.len() > MAX_DIMS {
            return Err(Error::TooManyDims {
                buffer: buffer.to_owned(),
                shape: dims.to_vec(),
                ndim: dims.len(),
                max: MAX_DIMS,
            });
        }
        if dims.is_empty() || dims.contains(&0) {
            return Err(Error::EmptyShape {
                buffer: buffer.to_owned(),
                shape: dims.to_vec(),
            });
        }
        element_count(buffer, dims)?;
        Ok(Shape(dims.iter().copied().collect()))
    }

    /// The dimensions.
    pub fn dims(&self) -> &[usize] {
        &self.0
    }

    /// Number of elements (cannot overflow: checked at construction).
    pub fn elements(&self) -> usize {
        self.0.iter().product()
    }

    /// The shape padded by `rounding`, with overflow checked.
    pub fn rounded(&self, buffer: &str, rounding: Rounding) -> Result<Shape> {
        let mut dims = self.0.clone();
        let (count, multiple) = match rounding {
            Rounding::None => (0, 1),
            Rounding::Inner16 => (1, 16),
            Rounding::Inner32 => (1, 32),
            Rounding::Tile16 => (2, 16),
            Rounding::Tile32 => (2, 32),
        };
        let ndim = dims.len();
        for d in dims.iter_mut().skip(ndim.saturating_sub(count)) {
            *d = align_up(*d, multiple).ok_or_else(|| Error::SizeOverflow {
                buffer: buffer.to_owned(),
                shape: self.0.to_vec(),
                what: "the padded shape",
                limit: usize::MAX as u64,
            })?;
        }
        element_count(buffer, &dims)?;
        Ok(Shape(dims))
    }
}

impl std::ops::Deref for Shape {
    type Target = [usize];
    fn deref(&self) -> &[usize] {
        &self.0
    }
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// How a declared shape is padded before planning.
///
/// Padding to 16- or 32-element multiples keeps device kernels on their
/// tail-free path (AscendC moves data in 32-byte units and compares in
/// 256-byte units) and lets one buffer serve every shape up to its maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Rounding {
    /// Keep the shape as declared.
    None,
    /// Pad the innermost dimension to a multiple of 16 (the default).
    #[default]
    Inner16,
    /// Pad the innermost dimension to a multiple of 32.
    Inner32,
    /// Pad the last two dimensions to multiples of 16 (matrix tiles).
    Tile16,
    /// Pad the last two dimensions to multiples of 32 (matrix tiles).
    Tile32,
}

impl Rounding {
    /// Lower-case name, as used in reports and spec files.
    pub const fn name(self) -> &'static str {
        match self {
            Rounding::None => "none",
            Rounding::Inner16 => "inner16",
            Rounding::Inner32 => "inner32",
            Rounding::Tile16 => "tile16",
            Rounding::Tile32 => "tile32",
        }
    }

    /// Parses a name written by [`Rounding::name`].
    pub fn from_name(name: &str) -> Option<Rounding> {
        [
            Rounding::None,
            Rounding::Inner16,
            Rounding::Inner32,
            Rounding::Tile16,
            Rounding::Tile32,
        ]
        .into_iter()
        .find(|r| r.name() == name)
    }
}

/// Which view shapes a buffer accepts: the crate's one shape rule, the same
/// for planned buffers ([`Lease::set_shape`](crate::Lease::set_shape),
/// [`Step::temp`](crate::Step::temp)) and recorded sites
/// ([`RecordStep::temp`](crate::RecordStep::temp)).
///
/// By default a view fits when its element count fits the buffer's padded
/// capacity: that is all the memory needs, so a `[b, s, s]` buffer planned
/// for `[32, 128, 128]` also serves `[2, 700, 16]` or a flattened
/// `[b * s, 64]`. A buffer (or recorded site) can opt in to per-dimension
/// limits, for code that relies on them: then a view must also keep the
/// number of dimensions and stay within the padded shape in every
/// dimension. Errors say which rule refused.
///
/// ```
/// use tensor_arena::{Arena, BufferSpec, HostDevice, Planner, ShapeRule};
/// let mut p = Planner::new();
/// let any = p.step::<f32>("any", &[4, 16])?;
/// let dims = p.declare::<f32>(BufferSpec::of::<f32>("dims", &[4, 16]).shape_rule(ShapeRule::Dims))?;
/// let mut arena = Arena::new(HostDevice::new(), p.plan()?)?;
/// arena.step(|s| {
///     assert!(s.lease(any)?.with_shape(&[2, 32]).is_ok()); // 64 elements fit
///     let err = s.lease(dims)?.with_shape(&[2, 32]).unwrap_err();
///     assert!(err.to_string().contains("per-dimension"), "{err}");
///     Ok::<_, tensor_arena::Error>(())
/// })?;
/// # Ok::<(), tensor_arena::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShapeRule {
    /// A view fits when its element count fits the padded capacity (the
    /// default).
    #[default]
    Elements,
    /// Also per dimension: same number of dimensions as the declared
    /// shape, and no dimension beyond the padded one.
    Dims,
}

impl ShapeRule {
    /// Lower-case name, as used in spec files.
    pub const fn name(self) -> &'static str {
        match self {
            ShapeRule::Elements => "elements",
            ShapeRule::Dims => "dims",
        }
    }

    /// Parses a name written by [`ShapeRule::name`].
    pub fn from_name(name: &str) -> Option<ShapeRule> {
        [ShapeRule::Elements, ShapeRule::Dims]
            .into_iter()
            .find(|r| r.name() == name)
    }
}

/// Checks a view shape under `rule` for a buffer of `capacity` elements
/// (padded shape `padded`): 1 to [`MAX_DIMS`] dimensions, an element count
/// that neither overflows nor exceeds the capacity, and, for
/// [`ShapeRule::Dims`], the padded shape's number of dimensions and no
/// dimension beyond it. Returns the element count. Shared by every lease
/// type, so they all refuse the same shapes with the same messages.
pub(crate) fn check_view(
    buffer: &str,
    shape: &[usize],
    capacity: usize,
    padded: &[usize],
    rule: ShapeRule,
) -> Result<usize> {
    let elements = view_elements(buffer, shape, capacity, padded)?;
    if rule == ShapeRule::Dims {
        check_dims(buffer, shape, padded)?;
    }
    Ok(elements)
}

/// The per-dimension part of [`ShapeRule::Dims`]: same rank as `padded`,
/// no dimension beyond it.
pub(crate) fn check_dims(buffer: &str, shape: &[usize], padded: &[usize]) -> Result<()> {
    let bad = if shape.len() != padded.len() {
        Some(None)
    } else {
        shape.iter().zip(padded).position(|(s, p)| s > p).map(Some)
    };
    match bad {
        None => Ok(()),
        Some(dim) => Err(Error::ViewExceedsDims {
            buffer: buffer.to_owned(),
            shape: shape.to_vec(),
            padded: padded.to_vec(),
            dim,
        }),
    }
}

/// Checks a view shape by the element-count rule alone (see
/// [`check_view`]).
pub(crate) fn view_elements(
    buffer: &str,
    shape: &[usize],
    capacity: usize,
    padded: &[usize],
) -> Result<usize> {
    let invalid = |reason| Error::InvalidView {
        buffer: buffer.to_owned(),
        shape: shape.to_vec(),
        reason,
    };
    if shape.is_empty() {
        return Err(invalid("a view needs at least one dimension"));
    }
    if shape.len() > MAX_DIMS {
        return Err(invalid("more dimensions than MAX_DIMS"));
    }
    let elements = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| invalid("the element count overflows"))?;
    if elements > capacity {
        return Err(Error::ViewTooLarge {
            buffer: buffer.to_owned(),
            shape: shape.to_vec(),
            elements,
            capacity,
            padded: padded.to_vec(),
        });
    }
    Ok(elements)
}

/// The message for a view whose data does not fit its shape (which the
/// lease types rule out before building ndarray views).
pub(crate) const VIEW_MISMATCH: &str = "the view shape does not match its data";

/// The ndarray dimension `Dm` (`Ix1`, `Ix2`, ..., `IxDyn`) of `shape`, or
/// an error naming `buffer` if the number of dimensions differs. Fixed
/// dimensions never allocate.
pub(crate) fn ndarray_dim<Dm: ndarray::Dimension>(buffer: &str, shape: &[usize]) -> Result<Dm> {
    if Dm::NDIM.is_some_and(|n| n != shape.len()) {
        return Err(Error::InvalidView {
            buffer: buffer.to_owned(),
            shape: shape.to_vec(),
            reason: "the view's number of dimensions differs from the requested array dimension",
        });
    }
    let mut dim = Dm::zeros(shape.len());
    dim.slice_mut().copy_from_slice(shape);
    Ok(dim)
}

/// `x` rounded up to a multiple of `multiple` (> 0), or `None` on overflow.
pub fn align_up(x: usize, multiple: usize) -> Option<usize> {
    debug_assert!(multiple > 0);
    match x % multiple {
        0 => Some(x),
        r => x.checked_add(multiple - r),
    }
}

/// Product of `dims`, checked.
pub(crate) fn element_count(buffer: &str, dims: &[usize]) -> Result<usize> {
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| Error::SizeOverflow {
            buffer: buffer.to_owned(),
            shape: dims.to_vec(),
            what: "the element count",
            limit: usize::MAX as u64,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_shapes() {
        assert!(matches!(
            Shape::new("x", &[]),
            Err(Error::EmptyShape { .. })
        ));
        assert!(matches!(
            Shape::new("x", &[3, 0]),
            Err(Error::EmptyShape { .. })
        ));
        assert!(matches!(
            Shape::new("x", &[1; MAX_DIMS + 1]),
            Err(Error::TooManyDims { ndim: 9, .. })
        ));
        assert!(matches!(
            Shape::new("x", &[usize::MAX, 2]),
            Err(Error::SizeOverflow { .. })
        ));
    }

    #[test]
    fn rounding_pads_the_chosen_dims() {
        let s = Shape::new("x", &[3, 5, 17]).unwrap();
        assert_eq!(s.rounded("x", Rounding::None).unwrap().dims(), &[3, 5, 17]);
        assert_eq!(
            s.rounded("x", Rounding::Inner16).unwrap().dims(),
            &[3, 5, 32]
        );
        assert_eq!(
            s.rounded("x", Rounding::Inner32).unwrap().dims(),
            &[3, 5, 32]
        );
        assert_eq!(
            s.rounded("x", Rounding::Tile16).unwrap().dims(),
            &[3, 16, 32]
        );
        assert_eq!(
            s.rounded("x", Rounding::Tile32).unwrap().dims(),
            &[3, 32, 32]
        );
        let v = Shape::new("v", &[33]).unwrap();
        assert_eq!(v.rounded("v", Rounding::Tile16).unwrap().dims(), &[48]);
    }

    #[test]
    fn rounding_overflow_is_an_error() {
        let s = Shape::new("big", &[usize::MAX - 3]).unwrap();
        let err = s.rounded("big", Rounding::Inner16).unwrap_err();
        assert!(err.to_string().contains("big"), "{err}");
        let t = Shape::new("t", &[1 << 40, (1 << 24) - 1]).unwrap();
        assert!(matches!(
            t.rounded("t", Rounding::Inner32),
            Err(Error::SizeOverflow { .. })
        ));
    }

    #[test]
    fn one_rule_for_every_view() {
        let padded = [4, 16];
        // Element count: any shape whose count fits.
        assert_eq!(
            check_view("x", &[2, 32], 64, &padded, ShapeRule::Elements).unwrap(),
            64
        );
        assert_eq!(
            check_view("x", &[64], 64, &padded, ShapeRule::Elements).unwrap(),
            64
        );
        let e = check_view("x", &[5, 16], 64, &padded, ShapeRule::Elements).unwrap_err();
        assert!(matches!(e, Error::ViewTooLarge { elements: 80, .. }), "{e}");
        assert!(e.to_string().contains("element-count rule"), "{e}");
        // Per dimension, opted in: rank and every dimension.
        check_view("x", &[4, 3], 64, &padded, ShapeRule::Dims).unwrap();
        let e = check_view("x", &[2, 32], 64, &padded, ShapeRule::Dims).unwrap_err();
        assert!(
            matches!(e, Error::ViewExceedsDims { dim: Some(1), .. }),
            "{e}"
        );
        let e = check_view("x", &[64], 64, &padded, ShapeRule::Dims).unwrap_err();
        assert!(matches!(e, Error::ViewExceedsDims { dim: None, .. }), "{e}");
        assert!(e.to_string().contains("number of dimensions"), "{e}");
        // The element count is checked first, under both rules.
        let e = check_view("x", &[5, 16], 64, &padded, ShapeRule::Dims).unwrap_err();
        assert!(matches!(e, Error::ViewTooLarge { .. }), "{e}");
        for r in [ShapeRule::Elements, ShapeRule::Dims] {
            assert_eq!(ShapeRule::from_name(r.name()), Some(r));
        }
    }

    #[test]
    fn align_up_is_checked() {
        assert_eq!(align_up(0, 32), Some(0));
        assert_eq!(align_up(33, 32), Some(64));
        assert_eq!(align_up(usize::MAX, 32), None);
    }
}
