//! The allocator's segments and blocks as a memory snapshot lists them,
//! for diagnostics that need more than the counters.

use serde::Serialize;

use super::block::NONE;
use super::model::{BlockId, CachingAllocator};

/// What a block of a segment holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum BlockState {
    /// Handed out: the handle [`CachingAllocator::malloc`] returned.
    Allocated(BlockId),
    /// Cached free memory, backed by the device.
    Free,
    /// Address space of an expandable segment with no pages behind it.
    Unmapped,
}

/// One block of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BlockView {
    /// Modelled address.
    pub address: u64,
    /// Bytes.
    pub size: u64,
    /// Allocated, free or unmapped.
    pub state: BlockState,
}

/// One segment: an `aclrtMalloc` allocation, or the whole address range of
/// an expandable segment, with its blocks in address order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SegmentView {
    /// Stream the segment serves.
    pub stream: u32,
    /// Whether it belongs to the small pool (blocks up to 1 MiB).
    pub small: bool,
    /// Page size of an expandable segment; `None` for a plain segment.
    pub page: Option<u64>,
    /// Blocks in address order; they tile the segment.
    pub blocks: Vec<BlockView>,
}

impl SegmentView {
    /// Bytes backed by the device (every block but the unmapped ones).
    pub fn mapped_bytes(&self) -> u64 {
        self.blocks
            .iter()
            .filter(|b| b.state != BlockState::Unmapped)
            .map(|b| b.size)
            .sum()
    }

    /// Bytes in allocated blocks.
    pub fn allocated_bytes(&self) -> u64 {
        self.blocks
            .iter()
            .filter(|b| matches!(b.state, BlockState::Allocated(_)))
            .map(|b| b.size)
            .sum()
    }
}

impl CachingAllocator {
    /// Every live segment with its blocks, in address order. Takes time
    /// linear in the number of blocks.
    ///
    /// ```
    /// use tensor_arena::caching::{BlockState, CachingAllocator, CachingConfig};
    /// let mut a = CachingAllocator::new(CachingConfig::default());
    /// let x = a.malloc(3 << 20)?;
    /// let segments = a.segments();
    /// assert_eq!(segments.len(), 1);
    /// assert_eq!(segments[0].blocks[0].state, BlockState::Allocated(x));
    /// assert_eq!(segments[0].blocks[1].state, BlockState::Free);
    /// assert_eq!(segments[0].mapped_bytes(), 20 << 20);
    /// # Ok::<(), tensor_arena::caching::OutOfMemory>(())
    /// ```
    pub fn segments(&self) -> Vec<SegmentView> {
        let mut out: Vec<SegmentView> = self
            .blocks
            .iter()
            .filter(|(_, b)| b.prev == NONE)
            .map(|(first, b)| {
                let page = b
                    .is_expandable()
                    .then(|| self.expandable[b.expandable as usize].page);
                let mut blocks = Vec::new();
                let mut i = first;
                while i != NONE {
                    let b = &self.blocks[i];
                    let state = if b.allocated {
                        BlockState::Allocated(BlockId::new(i, b.generation))
                    } else if b.mapped {
                        BlockState::Free
                    } else {
                        BlockState::Unmapped
                    };
                    blocks.push(BlockView {
                        address: b.addr,
                        size: b.size,
                        state,
                    });
                    i = b.next;
                }
                SegmentView {
                    stream: b.stream,
                    small: b.small,
                    page,
                    blocks,
                }
            })
            .collect();
        out.sort_by_key(|s| s.blocks.first().map_or(0, |b| b.address));
        out
    }
}
