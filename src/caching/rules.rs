//! Size rules of the torch_npu caching allocator
//! (`torch_npu/csrc/core/npu/NPUCachingAllocator.cpp` in Ascend/pytorch;
//! `docs/ascend.md#torch_npu-caching-allocator-size-rules`) and of
//! PyTorch's CUDA caching allocator (`c10/cuda/CUDACachingAllocator.cpp`),
//! which shares every constant here but the ACL pad and the 16 KiB
//! alignment of large blocks in expandable segments.
//!
//! CUDA, as of torch 2.0 to 2.9: `kMinBlockSize` 512, `kSmallSize` 1 MiB,
//! `kSmallBuffer` 2 MiB, `kLargeBuffer` 20 MiB, `kMinLargeAlloc` 10 MiB,
//! `kRoundLarge` 2 MiB; `round_size` rounds up to 512 bytes with no pad
//! (and by `roundup_power2_divisions` when set, which is not modelled);
//! `should_split` keeps a remainder of at least 512 bytes in the small
//! pool (and, from torch 2.1, in expandable segments) and of more than
//! 1 MiB in the large pool, below `max_split_size`; expandable segments
//! (torch 2.1 and later) map pages of `kSmallBuffer` / `kLargeBuffer`
//! (`segment_size = pool->is_small ? kSmallBuffer : kLargeBuffer` in
//! `get_expandable_segment`). The oversize rule of `get_free_block`
//! (a block of `max_split_size` or more serves only requests less than
//! `kLargeBuffer` smaller) is `max_non_split_rounding_size`, default
//! `kLargeBuffer`, from torch 2.5.

use super::config::Platform;

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

/// Block size for a request under PyTorch's CUDA allocator: rounded up
/// to a multiple of 512 bytes, with no pad (`round_size` in
/// `CUDACachingAllocator.cpp` without `roundup_power2_divisions`).
///
/// ```
/// use tensor_arena::caching::rules::cuda_round_size;
/// assert_eq!(cuda_round_size(1), 512);
/// assert_eq!(cuda_round_size(512), 512); // no pad
/// assert_eq!(cuda_round_size(513), 1024);
/// ```
pub fn cuda_round_size(requested: u64) -> u64 {
    requested.div_ceil(K_MIN_BLOCK_SIZE).max(1) * K_MIN_BLOCK_SIZE
}

/// Block size for a request on `platform`: [`round_size`] (torch_npu) or
/// [`cuda_round_size`] (CUDA).
pub fn round_size_for(platform: Platform, requested: u64) -> u64 {
    match platform {
        Platform::Npu => round_size(requested),
        Platform::Cuda => cuda_round_size(requested),
    }
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
        assert_eq!(cuda_round_size(0), 512);
        assert_eq!(cuda_round_size(512 << 20), 512 << 20);
        assert_eq!(round_size_for(Platform::Npu, 512 << 20), (512 << 20) + 512);
        assert!(is_small(cuda_round_size(1 << 20)));
        assert!(!is_small(round_size((1 << 20) - 31)));
    }
}
