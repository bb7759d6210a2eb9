//! Size rules of the torch_npu caching allocator
//! (`torch_npu/csrc/core/npu/NPUCachingAllocator.cpp` in Ascend/pytorch;
//! `docs/ascend.md#torch_npu-caching-allocator-size-rules`).

/// Every block is rounded to at least 512 bytes.
pub const K_MIN_BLOCK_SIZE: u64 = 512;
/// Largest request served from the small pool.
pub const K_SMALL_SIZE: u64 = 1 << 20;
/// Segment size of the small pool, and its page size with expandable
/// segments.
pub const K_SMALL_BUFFER: u64 = 2 << 20;
/// Segment size for requests between 1 and 10 MiB, and the large pool's
/// page size with expandable segments. Oversize cached blocks serve
/// requests up to this much smaller than themselves.
pub const K_LARGE_BUFFER: u64 = 20 << 20;
/// Requests from this size get a segment of their own size.
pub const K_MIN_LARGE_ALLOC: u64 = 10 << 20;
/// Large segments are rounded to this.
pub const K_ROUND_LARGE: u64 = 2 << 20;
/// With expandable segments, blocks of at least [`K_ROUND_LARGE`] start at
/// a multiple of this (`kAlignRoundLarge`, `base_addr_aligned_kb`).
pub const K_ALIGN_ROUND_LARGE: u64 = 16 << 10;
/// The ACL pad added to every block.
pub const ACL_PAD: u64 = 32;
/// `max_split_size_mb` must be above this many MiB (`kLargeBuffer` in MiB).
pub const MIN_MAX_SPLIT_SIZE_MB: u64 = K_LARGE_BUFFER >> 20;

/// Block size for a request: the 32-byte ACL pad added, then rounded up to
/// a multiple of 512 bytes (`round_size`).
///
/// ```
/// use tensor_arena::caching::rules::round_size;
/// assert_eq!(round_size(1), 512);
/// assert_eq!(round_size(512), 1024); // 512 + 32 pad
/// ```
pub fn round_size(requested: u64) -> u64 {
    let padded = requested.saturating_add(ACL_PAD);
    padded.div_ceil(K_MIN_BLOCK_SIZE).max(1) * K_MIN_BLOCK_SIZE
}

/// Whether a block of `size` bytes (already rounded) comes from the small
/// pool.
pub fn is_small(size: u64) -> bool {
    size <= K_SMALL_SIZE
}

/// Segment size the allocator asks the device for when no cached block
/// fits a block of `size` bytes (`get_allocation_size`).
///
/// ```
/// use tensor_arena::caching::rules::allocation_size;
/// const MIB: u64 = 1 << 20;
/// assert_eq!(allocation_size(4096), 2 * MIB);
/// assert_eq!(allocation_size(3 * MIB), 20 * MIB);
/// assert_eq!(allocation_size(11 * MIB), 12 * MIB);
/// ```
pub fn allocation_size(size: u64) -> u64 {
    if size <= K_SMALL_SIZE {
        K_SMALL_BUFFER
    } else if size < K_MIN_LARGE_ALLOC {
        K_LARGE_BUFFER
    } else {
        size.div_ceil(K_ROUND_LARGE).saturating_mul(K_ROUND_LARGE)
    }
}

/// Page size of an expandable segment of the small or large pool.
pub fn expandable_page_size(small: bool) -> u64 {
    if small {
        K_SMALL_BUFFER
    } else {
        K_LARGE_BUFFER
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_and_segment_sizes() {
        assert_eq!(round_size(0), 512);
        assert_eq!(round_size(480), 512);
        assert_eq!(round_size(481), 1024);
        assert_eq!(
            round_size(512),
            1024,
            "the pad pushes an exact multiple over"
        );
        assert_eq!(allocation_size(512), 2 << 20);
        assert_eq!(allocation_size(1 << 20), 2 << 20, "1 MiB is still small");
        assert_eq!(allocation_size((1 << 20) + 512), 20 << 20);
        assert_eq!(allocation_size((10 << 20) - 512), 20 << 20);
        assert_eq!(allocation_size(10 << 20), 10 << 20);
        assert_eq!(allocation_size((10 << 20) + 512), 12 << 20);
        assert!(is_small(round_size((1 << 20) - 32)));
        assert!(!is_small(round_size((1 << 20) - 31)));
    }
}
