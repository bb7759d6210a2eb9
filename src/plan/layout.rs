//! Bytes a buffer takes in the slab, by the device rules.
//!
//! ACL: a piece carved from one `aclrtMalloc` allocation needs
//! `ALIGN_UP(len, 32) + 32` bytes and a 64-byte aligned start (`docs/ascend.md#acl-allocation-and-carving-rule`).
//! Sizes are further rounded to the offset alignment, so that every offset
//! the placement produces is aligned without alignment-aware search.

use super::planner::PlannerConfig;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::{Shape, align_up};

/// The ACL allocation granule.
pub const ACL_GRANULE: usize = 32;

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
    let size = align_up(bytes, ACL_GRANULE)
        .and_then(|b| b.checked_add(ACL_GRANULE))
        .and_then(|b| align_up(b, config.offset_align))
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
