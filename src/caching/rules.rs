//! Size rules of the torch_npu caching allocator
//! (`NPUCachingAllocator.cpp`; see ASCEND.md).

/// Every block is rounded to at least 512 bytes.
pub const K_MIN_BLOCK_SIZE: u64 = 512;
/// Largest request served from the small pool.
pub const K_SMALL_SIZE: u64 = 1 << 20;
/// Segment size of the small pool.
pub const K_SMALL_BUFFER: u64 = 2 << 20;
/// Segment size for requests between 1 and 10 MiB.
pub const K_LARGE_BUFFER: u64 = 20 << 20;
/// Requests from this size get a segment of their own size.
pub const K_MIN_LARGE_ALLOC: u64 = 10 << 20;
/// Large segments are rounded to this.
pub const K_ROUND_LARGE: u64 = 2 << 20;
/// The ACL pad added to every block.
pub const ACL_PAD: u64 = 32;

/// Block size for a request: the 32-byte ACL pad added, then rounded up to
/// a multiple of 512 bytes.
pub fn round_size(requested: u64) -> u64 {
    let padded = requested.saturating_add(ACL_PAD);
    padded.div_ceil(K_MIN_BLOCK_SIZE).max(1) * K_MIN_BLOCK_SIZE
}

/// Segment size the allocator asks the device for when no cached block
/// fits a block of `size` bytes.
pub fn allocation_size(size: u64) -> u64 {
    if size <= K_SMALL_SIZE {
        K_SMALL_BUFFER
    } else if size < K_MIN_LARGE_ALLOC {
        K_LARGE_BUFFER
    } else {
        size.div_ceil(K_ROUND_LARGE) * K_ROUND_LARGE
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
        assert_eq!(allocation_size((1 << 20) + 512), 20 << 20);
        assert_eq!(allocation_size((10 << 20) + 512), 12 << 20);
    }
}
