//! The allocator model: pools, segments, best fit, split, merge, retry.
//!
//! The structure follows `DeviceCachingAllocator::malloc` and `free` in
//! torch_npu's `NPUCachingAllocator.cpp` step by step, so that a reader can
//! hold the two side by side; the release paths live in `release.rs` and
//! expandable segments in `expand.rs`.

use super::block::{Block, Blocks, NONE, Pool};
use super::config::CachingConfig;
use super::config::Platform;
use super::expand::ExpandableSegment;
use super::rules::{K_ALIGN_ROUND_LARGE, K_MIN_BLOCK_SIZE, K_ROUND_LARGE, K_SMALL_SIZE};
use super::rules::{allocation_size, is_small, round_size_for};
use super::stats::CachingStats;
use crate::units::format_bytes;

/// A block handed out by [`CachingAllocator::malloc`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct BlockId {
    index: u32,
    generation: u32,
}

impl BlockId {
    pub(super) fn new(index: u32, generation: u32) -> BlockId {
        BlockId { index, generation }
    }
}

/// Why an allocation failed: torch's "NPU out of memory" error, with the
/// figures its message carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfMemory {
    /// Bytes asked for.
    pub requested: u64,
    /// The rounded block size.
    pub size: u64,
    /// Segment size the allocator tried to obtain ("Tried to allocate").
    pub segment: u64,
    /// Bytes allocated when it failed.
    pub allocated: u64,
    /// Bytes reserved when it failed, after releasing the cache.
    pub reserved: u64,
    /// The device capacity.
    pub capacity: Option<u64>,
}

impl std::fmt::Display for OutOfMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "NPU out of memory. Tried to allocate {} (",
            format_bytes(self.segment)
        )?;
        if let Some(cap) = self.capacity {
            write!(f, "{} total capacity; ", format_bytes(cap))?;
        }
        write!(
            f,
            "{} already allocated; {} reserved in total by the model)",
            format_bytes(self.allocated),
            format_bytes(self.reserved)
        )
    }
}

impl std::error::Error for OutOfMemory {}

/// A model of the torch_npu (and PyTorch) caching allocator.
///
/// Requests are rounded to 512 bytes after the 32-byte ACL pad; blocks up
/// to 1 MiB come from the small pool (2 MiB segments), larger ones from the
/// large pool (20 MiB segments for requests up to 10 MiB, else the request
/// rounded to 2 MiB). A request takes the best-fitting cached block of its
/// stream and pool (smallest size, then lowest address), split when the
/// pool's rule allows (small: at least 512 bytes remain; large: the request
/// is below `max_split_size` and more than 1 MiB remains). Freed blocks
/// merge with free neighbours. When no cached block fits and the device
/// refuses a new segment, the allocator frees oversize cached segments
/// (with `max_split_size`), then every unsplit cached segment, and retries
/// once; then it reports out of memory. With expandable segments, each pool
/// and stream has one segment that grows by mapping pages. With
/// `garbage_collection_threshold` and a capacity, a request that finds no
/// cached block first frees old whole cached large segments while the
/// reserved bytes exceed the threshold (see `garbage_collect_cached_blocks`
/// in `gc.rs`).
///
/// Addresses are modelled: segments are laid out from 0 upwards, 2 MiB
/// aligned. Not modelled: events from `record_stream` (a freed block is
/// reusable at once), graph pools, the options listed as not modelled by
/// [`CachingConfig::from_alloc_conf`] and the 1 GiB page option of newer
/// torch_npu.
///
/// ```
/// use tensor_arena::caching::{CachingAllocator, CachingConfig};
/// const MIB: u64 = 1 << 20;
/// let mut a = CachingAllocator::new(CachingConfig::default());
/// let x = a.malloc(3 * MIB)?; // a 20 MiB segment, split
/// let y = a.malloc(3 * MIB)?; // the rest of it
/// assert_eq!(a.stats().segment.current, 1);
/// assert_eq!(a.stats().reserved_bytes.current, 20 * MIB);
/// a.free(x);
/// a.free(y);
/// assert_eq!(a.stats().allocated_bytes.current, 0);
/// # Ok::<(), tensor_arena::caching::OutOfMemory>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct CachingAllocator {
    pub(super) config: CachingConfig,
    pub(super) blocks: Blocks,
    pub(super) small: Pool,
    pub(super) large: Pool,
    pub(super) expandable: Vec<ExpandableSegment>,
    pub(super) next_addr: u64,
    pub(super) stats: CachingStats,
    /// Contiguous mapped ranges of expandable segments (what a snapshot
    /// lists as their segments).
    pub(super) mapped_ranges: u64,
}

impl CachingAllocator {
    /// An empty allocator. The config is taken as given; check user input
    /// with [`CachingConfig::validate`] first.
    pub fn new(config: CachingConfig) -> CachingAllocator {
        CachingAllocator {
            config,
            ..CachingAllocator::default()
        }
    }

    /// The settings this allocator runs with.
    pub fn config(&self) -> &CachingConfig {
        &self.config
    }

    /// Continues with another device capacity: what a replay at a smaller
    /// capacity would have done, as long as the reserved bytes never went
    /// above it (and, with a garbage-collection threshold, never above the
    /// threshold either). Not for expandable segments, whose address space
    /// is sized from the capacity when they are made.
    pub(crate) fn set_capacity(&mut self, capacity: Option<u64>) {
        self.config.capacity = capacity;
    }

    /// Counters as of now.
    pub fn stats(&self) -> CachingStats {
        self.stats
    }

    /// Bytes in free blocks that are part of a split segment: cached memory
    /// that cannot be returned to the device (`inactive_split_bytes`).
    pub fn inactive_split_bytes(&self) -> u64 {
        self.stats.inactive_split_bytes.current
    }

    /// Segments as a memory snapshot lists them: `aclrtMalloc` segments
    /// plus each contiguous mapped range of an expandable segment.
    pub fn segment_count(&self) -> u64 {
        self.stats.segment.current + self.mapped_ranges
    }

    /// The largest cached free block, in bytes: the biggest request that
    /// can be served without asking the device.
    pub fn largest_free_block(&self) -> u64 {
        let last = |p: &Pool| p.blocks.iter().map(|k| k.1).max().unwrap_or(0);
        last(&self.small).max(last(&self.large))
    }

    /// Address of a live block (addresses are modelled, starting at 0).
    pub fn address(&self, id: BlockId) -> Option<u64> {
        self.get(id).map(|b| b.addr)
    }

    /// Rounded size of a live block.
    pub fn block_size(&self, id: BlockId) -> Option<u64> {
        self.get(id).map(|b| b.size)
    }

    /// Allocates `requested` bytes on stream 0.
    pub fn malloc(&mut self, requested: u64) -> Result<BlockId, OutOfMemory> {
        self.malloc_on(requested, 0)
    }

    /// Allocates `requested` bytes on `stream`. Freed blocks are reused only
    /// by the stream that allocated them, as in torch.
    pub fn malloc_on(&mut self, requested: u64, stream: u32) -> Result<BlockId, OutOfMemory> {
        let size = round_size_for(self.config.platform, requested);
        let small = is_small(size);
        let alloc_size = allocation_size(size);
        let mut found = self.get_free_block(small, stream, size);
        if found.is_none() {
            self.garbage_collect_cached_blocks();
            found = self.alloc_block(small, stream, size, alloc_size, false);
            if found.is_none() && self.release_available_cached_blocks(small, stream, size) {
                found = self.alloc_block(small, stream, size, alloc_size, false);
            }
        }
        if found.is_none() {
            self.release_cached_blocks();
            found = self.alloc_block(small, stream, size, alloc_size, true);
        }
        let Some(mut index) = found else {
            self.stats.num_ooms += 1;
            return Err(OutOfMemory {
                requested,
                size,
                segment: alloc_size,
                allocated: self.stats.allocated_bytes.current,
                reserved: self.stats.reserved_bytes.current,
                capacity: self.config.capacity,
            });
        };
        if size >= K_ROUND_LARGE
            && self.config.expandable_segments
            && self.config.platform == Platform::Npu
        {
            index = self.align_large_block(index, size);
        }
        let split = self.should_split(index, size);
        let index = self.alloc_found_block(index, size, requested, split);
        Ok(BlockId {
            index,
            generation: self.blocks[index].generation,
        })
    }

    /// Frees a block, merging it with free neighbours. Returns `false` for a
    /// handle that is not live (double free), changing nothing.
    pub fn free(&mut self, id: BlockId) -> bool {
        let Some(b) = self.get(id) else {
            return false;
        };
        let size = b.size;
        let index = id.index;
        let b = &mut self.blocks[index];
        b.allocated = false;
        // A stale handle to this slot must not free it again.
        b.generation = b.generation.wrapping_add(1);
        self.stats.allocation.sub(1);
        self.stats.allocated_bytes.sub(size);
        if size >= self.max_split() {
            self.stats.oversize_allocations.sub(1);
        }
        self.free_block(index);
        true
    }

    /// Frees every cached segment that is entirely free, and unmaps the
    /// free pages of expandable segments (`empty_cache()`).
    pub fn empty_cache(&mut self) {
        self.release_cached_blocks();
    }

    fn get(&self, id: BlockId) -> Option<&Block> {
        self.blocks
            .get(id.index)
            .filter(|b| b.allocated && b.generation == id.generation)
    }

    pub(super) fn pool(&self, small: bool) -> &Pool {
        if small { &self.small } else { &self.large }
    }

    pub(super) fn pool_mut(&mut self, small: bool) -> &mut Pool {
        if small {
            &mut self.small
        } else {
            &mut self.large
        }
    }

    pub(super) fn insert_free(&mut self, index: u32) {
        let b = &self.blocks[index];
        let (key, small) = (b.size_key(index), b.small);
        let pool = self.pool_mut(small);
        pool.blocks.insert(key);
        let calls = pool.gc_calls;
        self.blocks[index].gc_base = calls;
    }

    pub(super) fn remove_free(&mut self, index: u32) {
        let b = &self.blocks[index];
        let (key, small) = (b.size_key(index), b.small);
        self.pool_mut(small).blocks.remove(&key);
    }

    pub(super) fn insert_unmapped(&mut self, index: u32) {
        let b = &self.blocks[index];
        let (key, small) = (b.addr_key(index), b.small);
        self.pool_mut(small).unmapped.insert(key);
    }

    pub(super) fn remove_unmapped(&mut self, index: u32) {
        let b = &self.blocks[index];
        let (key, small) = (b.addr_key(index), b.small);
        self.pool_mut(small).unmapped.remove(&key);
    }

    pub(super) fn max_split(&self) -> u64 {
        self.config.max_split_size.unwrap_or(u64::MAX)
    }

    /// Address space for a new segment or reservation, 2 MiB aligned.
    pub(super) fn reserve_address(&mut self, bytes: u64) -> u64 {
        let addr = self.next_addr.next_multiple_of(K_ROUND_LARGE);
        self.next_addr = addr.saturating_add(bytes);
        addr
    }

    /// `get_free_block`: best fit in the pool, under the max_split_size
    /// rules; with expandable segments, a block whose growth room makes it
    /// look larger gives way to a tighter one.
    fn get_free_block(&mut self, small: bool, stream: u32, size: u64) -> Option<u32> {
        // Every search ages the pool's cached blocks by one (torch_npu
        // counts only while garbage collection is on; the ages are read
        // only then).
        self.pool_mut(small).gc_calls += 1;
        let pool = self.pool(small);
        let mut candidates = pool.blocks.range((stream, size, 0, 0)..);
        let mut key = *candidates.next()?;
        if key.0 != stream {
            return None;
        }
        if self.blocks[key.3].is_expandable() {
            let expandable_size = |i: u32| {
                let b = &self.blocks[i];
                let growth = match self.blocks.get(b.next) {
                    Some(n) if !n.mapped => n.size,
                    _ => 0,
                };
                b.size + growth
            };
            for next in candidates {
                let keep_going = self.blocks[key.3].is_expandable()
                    && next.0 == stream
                    && expandable_size(next.3) < expandable_size(key.3);
                if !keep_going {
                    break;
                }
                key = *next;
            }
        }
        let max_split = self.max_split();
        // An oversize block does not serve a request below max_split_size,
        // and serves larger requests only if it wastes less than 20 MiB.
        if size < max_split && key.1 >= max_split {
            return None;
        }
        if size >= max_split && key.1 >= size.saturating_add(super::rules::K_LARGE_BUFFER) {
            return None;
        }
        self.pool_mut(small).blocks.remove(&key);
        Some(key.3)
    }

    fn should_split(&self, index: u32, size: u64) -> bool {
        let b = &self.blocks[index];
        let remaining = b.size - size;
        if b.small || self.config.expandable_segments {
            remaining >= K_MIN_BLOCK_SIZE
        } else {
            size < self.max_split() && remaining > K_SMALL_SIZE
        }
    }

    /// `alloc_block`: a new segment from the device, or more pages of an
    /// expandable one. Counts a retry when `retry` is set.
    fn alloc_block(
        &mut self,
        small: bool,
        stream: u32,
        size: u64,
        alloc_size: u64,
        retry: bool,
    ) -> Option<u32> {
        if retry {
            self.stats.num_alloc_retries += 1;
        }
        if self.config.expandable_segments {
            return self.try_allocate_expandable_block(small, stream, size);
        }
        if let Some(cap) = self.config.capacity
            && self.stats.reserved_bytes.current.saturating_add(alloc_size) > cap
        {
            return None;
        }
        let addr = self.reserve_address(alloc_size);
        let s = &mut self.stats;
        s.segment.add(1);
        s.reserved_bytes.add(alloc_size);
        s.num_device_alloc += 1;
        if alloc_size >= self.max_split() {
            self.stats.oversize_segments.add(1);
        }
        Some(self.blocks.insert(Block {
            addr,
            size: alloc_size,
            requested: 0,
            stream,
            small,
            allocated: false,
            mapped: true,
            expandable: NONE,
            prev: NONE,
            next: NONE,
            generation: 0,
            live: true,
            gc_base: 0,
        }))
    }

    /// With expandable segments, blocks of 2 MiB or more start on a 16 KiB
    /// boundary: the bytes before it stay cached as a block of their own.
    fn align_large_block(&mut self, index: u32, size: u64) -> u32 {
        let b = &self.blocks[index];
        let misalign = b.addr % K_ALIGN_ROUND_LARGE;
        if misalign == 0 {
            return index;
        }
        let offset = K_ALIGN_ROUND_LARGE - misalign;
        if offset + size > b.size {
            return index;
        }
        let tail = Block {
            addr: b.addr + offset,
            size: b.size - offset,
            requested: 0,
            allocated: false,
            prev: index,
            ..b.clone()
        };
        let next = b.next;
        let tail = self.blocks.insert(tail);
        if next != NONE {
            self.blocks[next].prev = tail;
        }
        let b = &mut self.blocks[index];
        b.next = tail;
        b.size = offset;
        self.insert_free(index);
        tail
    }

    /// `alloc_found_block`: splits off the front of the found block when
    /// `split`, marks it allocated and counts it.
    fn alloc_found_block(&mut self, index: u32, size: u64, requested: u64, split: bool) -> u32 {
        let b = &self.blocks[index];
        let already_split = b.is_split();
        let expandable = b.is_expandable();
        let block = if split {
            // The found block stays as the free remainder; the allocation
            // is a new block in front of it.
            let prev = b.prev;
            let front = Block {
                size,
                prev,
                next: index,
                ..b.clone()
            };
            let front = self.blocks.insert(front);
            if prev != NONE {
                self.blocks[prev].next = front;
            }
            let rest = &mut self.blocks[index];
            rest.prev = front;
            rest.addr += size;
            rest.size -= size;
            let rest_size = rest.size;
            self.insert_free(index);
            if !expandable {
                if already_split {
                    self.stats.inactive_split_bytes.sub(size);
                } else {
                    self.stats.inactive_split_bytes.add(rest_size);
                    self.stats.inactive_split.add(1);
                }
            }
            front
        } else {
            if already_split && !expandable {
                self.stats.inactive_split_bytes.sub(b.size);
                self.stats.inactive_split.sub(1);
            }
            index
        };
        let b = &mut self.blocks[block];
        b.allocated = true;
        b.requested = requested;
        let block_size = b.size;
        let s = &mut self.stats;
        s.allocation.add(1);
        s.allocated_bytes.add(block_size);
        s.active.add(1);
        s.active_bytes.add(block_size);
        s.requested_bytes.add(requested);
        if block_size >= self.max_split() {
            self.stats.oversize_allocations.add(1);
        }
        block
    }

    /// `free_block`: merges with free neighbours and caches the result.
    fn free_block(&mut self, index: u32) {
        let b = &self.blocks[index];
        let (original, requested) = (b.size, b.requested);
        let neighbours = [b.prev, b.next];
        let (mut net_count, mut net_bytes) = (0i64, 0i64);
        for other in neighbours {
            let subsumed = self.try_merge_blocks(index, other);
            if subsumed > 0 {
                net_count -= 1;
                net_bytes -= subsumed as i64;
            }
        }
        self.insert_free(index);
        let b = &mut self.blocks[index];
        b.requested = 0;
        if b.is_split() {
            net_count += 1;
            net_bytes += b.size as i64;
        }
        // Fully free pages of expandable segments can always be returned,
        // so torch leaves them out of inactive_split.
        if !b.is_expandable() {
            self.stats.inactive_split.update(net_count);
            self.stats.inactive_split_bytes.update(net_bytes);
        }
        let s = &mut self.stats;
        s.active.sub(1);
        s.active_bytes.sub(original);
        s.requested_bytes.sub(requested);
    }

    /// `try_merge_blocks`: folds the free neighbour `src` into `dst`, which
    /// must not be in a pool set. Returns the bytes taken over, or 0.
    pub(super) fn try_merge_blocks(&mut self, dst: u32, src: u32) -> u64 {
        let Some(s) = self.blocks.get(src) else {
            return 0;
        };
        if s.allocated || s.mapped != self.blocks[dst].mapped {
            return 0;
        }
        let (s_addr, s_size, s_prev, s_next, s_mapped) = (s.addr, s.size, s.prev, s.next, s.mapped);
        if s_mapped {
            self.remove_free(src);
        } else {
            self.remove_unmapped(src);
        }
        if self.blocks[dst].prev == src {
            let d = &mut self.blocks[dst];
            d.addr = s_addr;
            d.prev = s_prev;
            if s_prev != NONE {
                self.blocks[s_prev].next = dst;
            }
        } else {
            self.blocks[dst].next = s_next;
            if s_next != NONE {
                self.blocks[s_next].prev = dst;
            }
        }
        self.blocks[dst].size += s_size;
        self.blocks.remove(src);
        s_size
    }
}
