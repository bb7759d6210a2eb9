//! Bytes a buffer takes in the slab, by the device rules.
//!
//! ACL: a piece carved from one `aclrtMalloc` allocation needs
//! `ALIGN_UP(len, 32) + 32` bytes and a 64-byte aligned start (`docs/ascend.md#acl-allocation-and-carving-rule`).
//! Sizes are further rounded to the offset alignment, so that every offset
//! the placement produces is aligned without alignment-aware search.

use super::planner::PlannerConfig;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::Shape;

/// The ACL allocation granule.
pub const ACL_GRANULE: usize = 32;

/// Bytes a piece of `bytes` bytes takes in the slab: the ACL rule
/// `ALIGN_UP(len, 32) + 32`, rounded up to `offset_align` (a power of two,
/// as the planner checks). `None` on overflow. The planner sizes every
/// buffer with it, and the trace replay every allocation; with the default
/// 512-byte alignment it equals the caching allocator's block size
/// ([`crate::caching::rules::round_size`]).
///
/// ```
/// use tensor_arena::plan::layout::slot_size;
/// assert_eq!(slot_size(480, 512), Some(512));
/// assert_eq!(slot_size(512, 512), Some(1024)); // an exact multiple still pays the pad
/// assert_eq!(slot_size(1, 64), Some(64));
/// assert_eq!(slot_size(u64::MAX, 512), None);
/// ```
pub fn slot_size(bytes: u64, offset_align: u64) -> Option<u64> {
    let granule = ACL_GRANULE as u64;
    bytes
        .checked_next_multiple_of(granule)?
        .checked_add(granule)?
        .checked_next_multiple_of(offset_align.max(1))
}

/// Bytes one buffer needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BufferLayout {
    /// The padded shape.
    pub padded: Shape,
    /// `elements(padded) * dtype.size()`.
    pub bytes: usize,
    /// Bytes reserved in the slab: `align_up(align_up(bytes, 32) + 32, offset_align)`.
    pub size: usize,
}

/// Computes the layout of a buffer whose padded shape is `padded`.
pub(crate) fn buffer_layout(
    buffer: &str,
    padded: &Shape,
    dtype: DType,
    config: &PlannerConfig,
) -> Result<BufferLayout> {
    let overflow = |what| Error::SizeOverflow {
        buffer: buffer.to_owned(),
        shape: padded.to_vec(),
        what,
        limit: usize::MAX as u64,
    };
    let bytes = padded
        .elements()
        .checked_mul(dtype.size())
        .ok_or_else(|| overflow("its size in bytes"))?;
    let size = slot_size(bytes as u64, config.offset_align as u64)
        .and_then(|s| usize::try_from(s).ok())
        .ok_or_else(|| overflow("its aligned size in the slab"))?;
    Ok(BufferLayout {
        padded: padded.clone(),
        bytes,
        size,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(dims: &[usize], dtype: DType, align: usize) -> BufferLayout {
        let cfg = PlannerConfig {
            offset_align: align,
            ..PlannerConfig::default()
        };
        buffer_layout("b", &Shape::new("b", dims).unwrap(), dtype, &cfg).unwrap()
    }

    #[test]
    fn acl_pad_then_offset_alignment() {
        // 16 f32 = 64 bytes -> 64 + 32 = 96 -> 512
        assert_eq!(layout(&[16], DType::F32, 512).size, 512);
        // 480 bytes -> 480 + 32 = 512: fits exactly
        assert_eq!(layout(&[120], DType::F32, 512).size, 512);
        // 512 bytes -> 512 + 32 = 544 -> 1024: an exact multiple still pays the pad
        assert_eq!(layout(&[128], DType::F32, 512).size, 1024);
        // with 64-byte offsets: 1 byte -> 32 + 32 = 64
        assert_eq!(layout(&[1], DType::U8, 64).size, 64);
        // 33 bytes -> 64 + 32 = 96 -> 128
        assert_eq!(layout(&[33], DType::U8, 64).size, 128);
    }

    #[test]
    fn byte_overflow_is_an_error() {
        let cfg = PlannerConfig::default();
        let shape = Shape::new("b", &[usize::MAX / 2]).unwrap();
        let err = buffer_layout("b", &shape, DType::F32, &cfg).unwrap_err();
        assert!(matches!(err, Error::SizeOverflow { .. }));
        let shape = Shape::new("b", &[usize::MAX - 40]).unwrap();
        let err = buffer_layout("b", &shape, DType::U8, &cfg).unwrap_err();
        assert!(err.to_string().contains("aligned size"), "{err}");
    }
}
