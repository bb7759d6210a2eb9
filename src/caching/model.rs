//! The allocator model: pools, segments, best fit, split, merge, retry.

use std::collections::BTreeSet;

use super::rules::{K_LARGE_BUFFER, K_MIN_BLOCK_SIZE, K_SMALL_SIZE, allocation_size, round_size};

/// Settings of the modelled allocator (`PYTORCH_NPU_ALLOC_CONF`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CachingConfig {
    /// Device memory available to the allocator; `None` is unlimited.
    pub capacity: Option<u64>,
    /// `max_split_size_mb` in bytes: cached blocks at least this large are
    /// never split, and only serve requests of similar size.
    pub max_split_size: Option<u64>,
}

/// Counters named as in `torch.npu.memory_stats()`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CachingStats {
    /// Bytes in blocks handed out (rounded sizes), now.
    pub allocated_bytes: u64,
    /// Highest `allocated_bytes`.
    pub peak_allocated_bytes: u64,
    /// Bytes the caller asked for, now.
    pub requested_bytes: u64,
    /// Bytes of segments obtained from the device, now.
    pub reserved_bytes: u64,
    /// Highest `reserved_bytes`.
    pub peak_reserved_bytes: u64,
    /// Segments held now.
    pub segments: u64,
    /// Highest `segments`.
    pub peak_segments: u64,
    /// Blocks handed out now.
    pub allocations: u64,
    /// Device allocation calls (`aclrtMalloc`), in total.
    pub device_mallocs: u64,
    /// Device free calls (`aclrtFree`), in total.
    pub device_frees: u64,
    /// Allocations that only succeeded after freeing every cached block.
    pub num_alloc_retries: u64,
    /// Allocations that failed.
    pub num_ooms: u64,
}

/// A block handed out by [`CachingAllocator::malloc`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockId {
    index: u32,
    generation: u32,
}

/// Why an allocation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfMemory {
    /// Bytes asked for.
    pub requested: u64,
    /// Segment size the allocator tried to obtain.
    pub segment: u64,
    /// Bytes allocated when it failed.
    pub allocated: u64,
    /// Bytes reserved when it failed.
    pub reserved: u64,
}

const NONE: u32 = u32::MAX;

#[derive(Debug, Clone)]
struct Block {
    addr: u64,
    size: u64,
    requested: u64,
    allocated: bool,
    small: bool,
    prev: u32,
    next: u32,
    generation: u32,
    in_use: bool,
}

impl Block {
    fn is_split(&self) -> bool {
        self.prev != NONE || self.next != NONE
    }
}

/// A model of the PyTorch / torch_npu caching allocator for one stream:
/// requests rounded to 512 bytes (plus the 32-byte ACL pad), small
/// (<= 1 MiB) and large pools, 2 MiB and 20 MiB segments, large requests
/// rounded to 2 MiB, best fit over size-ordered free blocks, splitting by
/// the pool's rule, merging freed neighbours, and on failure freeing cached
/// segments and retrying.
#[derive(Debug, Clone, Default)]
pub struct CachingAllocator {
    config: CachingConfig,
    blocks: Vec<Block>,
    vacant: Vec<u32>,
    // Free blocks as (size, addr, index): the first one at or above a size
    // is the best fit, ties broken by address as in PyTorch.
    small_free: BTreeSet<(u64, u64, u32)>,
    large_free: BTreeSet<(u64, u64, u32)>,
    next_addr: u64,
    stats: CachingStats,
}

impl CachingAllocator {
    /// An empty allocator.
    pub fn new(config: CachingConfig) -> CachingAllocator {
        CachingAllocator {
            config,
            ..CachingAllocator::default()
        }
    }

    /// Counters as of now.
    pub fn stats(&self) -> CachingStats {
        self.stats
    }

    /// Bytes in free blocks that are part of a split segment: cached memory
    /// that cannot be returned to the device (`inactive_split_bytes`).
    pub fn inactive_split_bytes(&self) -> u64 {
        self.small_free
            .iter()
            .chain(self.large_free.iter())
            .filter(|&&(_, _, i)| self.blocks[i as usize].is_split())
            .map(|&(size, _, _)| size)
            .sum()
    }

    /// Address of a live block (addresses are modelled, starting at 0).
    pub fn address(&self, id: BlockId) -> Option<u64> {
        self.get(id).map(|b| b.addr)
    }

    /// Allocates `requested` bytes.
    pub fn malloc(&mut self, requested: u64) -> Result<BlockId, OutOfMemory> {
        let size = round_size(requested);
        let small = size <= K_SMALL_SIZE;
        let segment = allocation_size(size);
        let found = self
            .take_free_block(small, size)
            .or_else(|| self.new_segment(small, segment))
            .or_else(|| {
                self.release_oversize(small, size)
                    .then(|| self.new_segment(small, segment))
                    .flatten()
            })
            .or_else(|| {
                self.release_cached();
                self.stats.num_alloc_retries += 1;
                self.new_segment(small, segment)
            });
        let Some(index) = found else {
            self.stats.num_ooms += 1;
            return Err(OutOfMemory {
                requested,
                segment,
                allocated: self.stats.allocated_bytes,
                reserved: self.stats.reserved_bytes,
            });
        };
        if self.should_split(index, size) {
            let b = &self.blocks[index as usize];
            let (addr, rest, next) = (b.addr + size, b.size - size, b.next);
            let tail = self.new_block(Block {
                addr,
                size: rest,
                requested: 0,
                allocated: false,
                small,
                prev: index,
                next,
                generation: 0,
                in_use: true,
            });
            if next != NONE {
                self.blocks[next as usize].prev = tail;
            }
            let b = &mut self.blocks[index as usize];
            b.next = tail;
            b.size = size;
            self.insert_free(tail);
        }
        let b = &mut self.blocks[index as usize];
        b.allocated = true;
        b.requested = requested;
        let (block_size, generation) = (b.size, b.generation);
        let s = &mut self.stats;
        s.allocated_bytes += block_size;
        s.peak_allocated_bytes = s.peak_allocated_bytes.max(s.allocated_bytes);
        s.requested_bytes += requested;
        s.allocations += 1;
        Ok(BlockId { index, generation })
    }

    /// Frees a block, merging it with free neighbours. Returns `false` for a
    /// handle that is not live (double free), changing nothing.
    pub fn free(&mut self, id: BlockId) -> bool {
        let Some(b) = self.get(id) else {
            return false;
        };
        let (size, requested) = (b.size, b.requested);
        let index = id.index;
        let b = &mut self.blocks[index as usize];
        b.allocated = false;
        b.generation = b.generation.wrapping_add(1);
        let s = &mut self.stats;
        s.allocated_bytes -= size;
        s.requested_bytes -= requested;
        s.allocations -= 1;
        for neighbour in [
            self.blocks[index as usize].prev,
            self.blocks[index as usize].next,
        ] {
            self.merge(index, neighbour);
        }
        self.insert_free(index);
        true
    }

    /// Frees every cached segment that is entirely free (`empty_cache()`).
    pub fn empty_cache(&mut self) {
        self.release_cached();
    }

    fn get(&self, id: BlockId) -> Option<&Block> {
        self.blocks
            .get(id.index as usize)
            .filter(|b| b.in_use && b.allocated && b.generation == id.generation)
    }

    fn pool(&mut self, small: bool) -> &mut BTreeSet<(u64, u64, u32)> {
        if small {
            &mut self.small_free
        } else {
            &mut self.large_free
        }
    }

    fn insert_free(&mut self, index: u32) {
        let b = &self.blocks[index as usize];
        let key = (b.size, b.addr, index);
        let small = b.small;
        self.pool(small).insert(key);
    }

    fn remove_free(&mut self, index: u32) {
        let b = &self.blocks[index as usize];
        let key = (b.size, b.addr, index);
        let small = b.small;
        self.pool(small).remove(&key);
    }

    fn max_split(&self) -> u64 {
        self.config.max_split_size.unwrap_or(u64::MAX)
    }

    /// Best fit: the smallest free block of at least `size`, unless the
    /// max_split_size rules forbid it.
    fn take_free_block(&mut self, small: bool, size: u64) -> Option<u32> {
        let max_split = self.max_split();
        let &(found, _, index) = self.pool(small).range((size, 0, 0)..).next()?;
        if size < max_split && found >= max_split {
            return None;
        }
        if size >= max_split && found >= size + K_LARGE_BUFFER {
            return None;
        }
        self.remove_free(index);
        Some(index)
    }

    fn should_split(&self, index: u32, size: u64) -> bool {
        let b = &self.blocks[index as usize];
        let remaining = b.size - size;
        if b.small {
            remaining >= K_MIN_BLOCK_SIZE
        } else {
            size < self.max_split() && remaining > K_SMALL_SIZE
        }
    }

    fn new_segment(&mut self, small: bool, bytes: u64) -> Option<u32> {
        if let Some(cap) = self.config.capacity
            && self.stats.reserved_bytes + bytes > cap
        {
            return None;
        }
        let addr = self.next_addr;
        self.next_addr += bytes;
        let s = &mut self.stats;
        s.reserved_bytes += bytes;
        s.peak_reserved_bytes = s.peak_reserved_bytes.max(s.reserved_bytes);
        s.segments += 1;
        s.peak_segments = s.peak_segments.max(s.segments);
        s.device_mallocs += 1;
        Some(self.new_block(Block {
            addr,
            size: bytes,
            requested: 0,
            allocated: false,
            small,
            prev: NONE,
            next: NONE,
            generation: 0,
            in_use: true,
        }))
    }

    fn new_block(&mut self, block: Block) -> u32 {
        match self.vacant.pop() {
            Some(i) => {
                let generation = self.blocks[i as usize].generation.wrapping_add(1);
                self.blocks[i as usize] = Block {
                    generation,
                    ..block
                };
                i
            }
            None => {
                self.blocks.push(block);
                (self.blocks.len() - 1) as u32
            }
        }
    }

    /// Merges free neighbour `other` into block `index`.
    fn merge(&mut self, index: u32, other: u32) {
        if other == NONE || self.blocks[other as usize].allocated {
            return;
        }
        self.remove_free(other);
        let o = self.blocks[other as usize].clone();
        let b = &mut self.blocks[index as usize];
        if o.next == index {
            b.addr = o.addr;
            b.prev = o.prev;
            if o.prev != NONE {
                self.blocks[o.prev as usize].next = index;
            }
        } else {
            b.next = o.next;
            if o.next != NONE {
                self.blocks[o.next as usize].prev = index;
            }
        }
        self.blocks[index as usize].size += o.size;
        self.blocks[other as usize].in_use = false;
        self.vacant.push(other);
    }

    fn release_segment(&mut self, index: u32) {
        self.remove_free(index);
        let size = self.blocks[index as usize].size;
        self.blocks[index as usize].in_use = false;
        self.vacant.push(index);
        let s = &mut self.stats;
        s.reserved_bytes -= size;
        s.segments -= 1;
        s.device_frees += 1;
    }

    /// With max_split_size set: frees oversize cached segments, the
    /// smallest that covers the request or else the largest ones, as PyTorch
    /// does before retrying.
    fn release_oversize(&mut self, small: bool, size: u64) -> bool {
        let max_split = self.max_split();
        if max_split == u64::MAX {
            return false;
        }
        let key = size.max(max_split);
        let unsplit = |s: &Self, i: u32| !s.blocks[i as usize].is_split();
        let pool: Vec<(u64, u64, u32)> = self.pool(small).iter().copied().collect();
        if let Some(&(_, _, i)) = pool
            .iter()
            .find(|&&(sz, _, i)| sz >= key && unsplit(self, i))
        {
            self.release_segment(i);
            return true;
        }
        let mut released = 0;
        for &(sz, _, i) in pool.iter().rev() {
            if released >= key || sz < max_split {
                break;
            }
            if unsplit(self, i) {
                released += sz;
                self.release_segment(i);
            }
        }
        released >= key
    }

    /// Frees every cached segment that is not split.
    fn release_cached(&mut self) {
        let whole: Vec<u32> = self
            .small_free
            .iter()
            .chain(self.large_free.iter())
            .map(|&(_, _, i)| i)
            .filter(|&i| !self.blocks[i as usize].is_split())
            .collect();
        for i in whole {
            self.release_segment(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const MIB: u64 = 1 << 20;

    #[test]
    fn small_requests_share_a_2mib_segment() {
        let mut a = CachingAllocator::default();
        let x = a.malloc(1000).unwrap();
        let y = a.malloc(1000).unwrap();
        let s = a.stats();
        assert_eq!(s.segments, 1);
        assert_eq!(s.reserved_bytes, 2 * MIB);
        assert_eq!(s.allocated_bytes, 2 * 1536, "1000 + 32 rounds to 1536");
        assert_eq!(a.address(y), Some(1536));
        assert!(a.free(x) && a.free(y));
        assert!(!a.free(x), "double free is refused");
        // Freed blocks merged back into one whole, unsplit segment.
        assert_eq!(a.inactive_split_bytes(), 0);
        assert_eq!(a.small_free.len(), 1);
    }

    #[test]
    fn large_blocks_split_only_above_1mib_remaining() {
        let mut a = CachingAllocator::default();
        // 5 MiB -> 20 MiB segment, 15 MiB remains and is split off.
        let x = a.malloc(5 * MIB).unwrap();
        assert_eq!(a.stats().reserved_bytes, 20 * MIB);
        let y = a.malloc(14 * MIB + MIB / 2).unwrap();
        // 15 MiB - (14.5 MiB + 512) < 1 MiB: not split, the block is handed out whole.
        assert_eq!(a.stats().segments, 1);
        assert_eq!(a.stats().allocated_bytes, 20 * MIB);
        a.free(x);
        a.free(y);
        assert_eq!(a.stats().allocated_bytes, 0);
    }

    #[test]
    fn oom_after_retry_at_capacity() {
        let mut a = CachingAllocator::new(CachingConfig {
            capacity: Some(40 * MIB),
            ..CachingConfig::default()
        });
        let x = a.malloc(12 * MIB).unwrap(); // 12 MiB + pad -> 14 MiB segment
        let _y = a.malloc(12 * MIB).unwrap();
        a.free(x);
        // 20 MiB does not fit in the cached 14 MiB block nor in the 12 MiB
        // left: the cache is emptied, then the retry succeeds.
        let z = a.malloc(20 * MIB);
        assert!(z.is_ok());
        assert_eq!(a.stats().num_alloc_retries, 1);
        let w = a.malloc(20 * MIB);
        assert!(w.is_err());
        assert_eq!(a.stats().num_ooms, 1);
    }
}
