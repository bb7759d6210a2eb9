//! Expandable segments ("Note [Expandable Segments]" in
//! `NPUCachingAllocator.cpp`): one large address range per pool and
//! stream, backed by physical pages (2 MiB small pool, 20 MiB large pool)
//! mapped as allocations need them and unmapped when the cache is
//! released.

use super::block::{Block, NONE};
use super::model::CachingAllocator;
use super::rules::expandable_page_size;

/// Device size assumed for the address space of an expandable segment when
/// the model has no capacity: torch reserves 1 1/8 of the device.
pub const UNLIMITED_DEVICE_BYTES: u64 = 1 << 40;

/// Address range of an expandable segment and which of its pages are
/// mapped.
#[derive(Debug, Clone)]
pub(super) struct ExpandableSegment {
    pub base: u64,
    pub page: u64,
    /// Pages of address space (`max_handles_`).
    pub pages: u64,
    /// Mapped flag per page, grown as pages are first mapped.
    pub mapped: Vec<bool>,
    pub live: bool,
}

impl ExpandableSegment {
    fn is_mapped(&self, page: u64) -> bool {
        self.mapped.get(page as usize).copied().unwrap_or(false)
    }

    /// Marks pages `[begin, end)` and returns the change in the number of
    /// contiguous mapped ranges.
    fn set(&mut self, begin: u64, end: u64, mapped: bool) -> i64 {
        let left = begin > 0 && self.is_mapped(begin - 1);
        let right = self.is_mapped(end);
        if self.mapped.len() < end as usize {
            self.mapped.resize(end as usize, false);
        }
        self.mapped[begin as usize..end as usize].fill(mapped);
        let joined = i64::from(left) + i64::from(right);
        if mapped { 1 - joined } else { joined - 1 }
    }
}

impl CachingAllocator {
    /// `find_expandable_block`: the lowest-address unmapped range of this
    /// pool and stream that, with the free block before it, has room for
    /// `size`; or a new segment's whole address range.
    fn find_expandable_block(&mut self, small: bool, stream: u32, size: u64) -> u32 {
        let blocks = &self.blocks;
        let allocatable = |i: u32| blocks.get(i).is_some_and(|b| !b.allocated);
        let has_room = |mut i: u32| {
            let mut bytes = 0u64;
            while bytes < size && allocatable(i) {
                bytes += blocks[i].size;
                i = blocks[i].next;
            }
            bytes >= size
        };
        let found = self
            .pool(small)
            .unmapped
            .range((stream, 0, 0)..)
            .take_while(|k| k.0 == stream)
            .find_map(|&(_, _, i)| {
                let prev = blocks[i].prev;
                let c = if allocatable(prev) { prev } else { i };
                has_room(c).then_some(c)
            });
        if let Some(c) = found {
            return c;
        }
        let page = expandable_page_size(small);
        let total = self.config.capacity.unwrap_or(UNLIMITED_DEVICE_BYTES);
        let pages = total.saturating_add(total / 8).div_ceil(page).max(1);
        let bytes = pages.saturating_mul(page);
        let base = self.reserve_address(bytes);
        self.expandable.push(ExpandableSegment {
            base,
            page,
            pages,
            mapped: Vec::new(),
            live: true,
        });
        let index = self.blocks.insert(Block {
            addr: base,
            size: bytes,
            requested: 0,
            stream,
            small,
            allocated: false,
            mapped: false,
            expandable: (self.expandable.len() - 1) as u32,
            prev: NONE,
            next: NONE,
            generation: 0,
            live: true,
            gc_base: 0,
        });
        self.insert_unmapped(index);
        index
    }

    /// `map_block`: backs the first `size` bytes of the unmapped block
    /// `index` with pages, merging it with free neighbours. Fails, mapping
    /// nothing, when the pages do not fit in the capacity.
    fn map_block(&mut self, index: u32, size: u64) -> bool {
        let b = &self.blocks[index];
        if b.mapped || size == 0 || size > b.size {
            return false;
        }
        let seg = &self.expandable[b.expandable as usize];
        let begin = (b.addr - seg.base) / seg.page;
        let end = (b.addr + size - seg.base).div_ceil(seg.page);
        let bytes = (end - begin) * seg.page;
        if let Some(cap) = self.config.capacity
            && self.stats.reserved_bytes.current.saturating_add(bytes) > cap
        {
            return false;
        }
        let seg_index = b.expandable as usize;
        let change = self.expandable[seg_index].set(begin, end, true);
        self.mapped_ranges = self.mapped_ranges.saturating_add_signed(change);
        self.stats.num_device_alloc += end - begin;
        self.remove_unmapped(index);
        let b = &mut self.blocks[index];
        b.mapped = true;
        if bytes < b.size {
            let rest = Block {
                addr: b.addr + bytes,
                size: b.size - bytes,
                mapped: false,
                prev: index,
                ..b.clone()
            };
            b.size = bytes;
            let next = rest.next;
            let rest = self.blocks.insert(rest);
            if next != NONE {
                self.blocks[next].prev = rest;
            }
            self.blocks[index].next = rest;
            self.insert_unmapped(rest);
        }
        let (prev, next) = (self.blocks[index].prev, self.blocks[index].next);
        self.try_merge_blocks(index, prev);
        self.try_merge_blocks(index, next);
        self.insert_free(index);
        self.stats.reserved_bytes.add(bytes);
        true
    }

    /// `try_allocate_expandable_block`: maps pages until a free block of at
    /// least `size` bytes exists, and takes it out of the pool.
    pub(super) fn try_allocate_expandable_block(
        &mut self,
        small: bool,
        stream: u32,
        size: u64,
    ) -> Option<u32> {
        let mut candidate = self.find_expandable_block(small, stream, size);
        let c = &self.blocks[candidate];
        if !c.mapped && !self.map_block(candidate, c.size.min(size)) {
            return None;
        }
        while self.blocks[candidate].size < size {
            // Invariant: a free block followed by unmapped space; mapping
            // it merges the two.
            let remaining = size - self.blocks[candidate].size;
            let next = self.blocks[candidate].next;
            let next_size = self.blocks.get(next)?.size;
            if !self.map_block(next, remaining.min(next_size)) {
                return None;
            }
            candidate = next;
        }
        self.remove_free(candidate);
        Some(candidate)
    }

    /// `unmap_block`: returns the whole pages inside the free block `index`
    /// to the device; the partial pages at either end stay cached.
    pub(super) fn unmap_block(&mut self, index: u32) {
        let b = &self.blocks[index];
        let seg = &self.expandable[b.expandable as usize];
        let begin = (b.addr - seg.base).div_ceil(seg.page);
        let end = (b.addr + b.size - seg.base) / seg.page;
        if begin >= end {
            return;
        }
        let (ptr, bytes) = (seg.base + begin * seg.page, (end - begin) * seg.page);
        self.remove_free(index);
        let b = self.blocks[index].clone();
        let before = ptr - b.addr;
        if before > 0 {
            let piece = self.blocks.insert(Block {
                size: before,
                next: index,
                ..b.clone()
            });
            if b.prev != NONE {
                self.blocks[b.prev].next = piece;
            }
            self.blocks[index].prev = piece;
            self.insert_free(piece);
        }
        let after = b.size - before - bytes;
        if after > 0 {
            let piece = self.blocks.insert(Block {
                addr: ptr + bytes,
                size: after,
                prev: index,
                ..b.clone()
            });
            if b.next != NONE {
                self.blocks[b.next].prev = piece;
            }
            self.blocks[index].next = piece;
            self.insert_free(piece);
        }
        let u = &mut self.blocks[index];
        u.addr = ptr;
        u.size = bytes;
        u.mapped = false;
        let (prev, next) = (u.prev, u.next);
        self.try_merge_blocks(index, prev);
        self.try_merge_blocks(index, next);
        self.insert_unmapped(index);
        let seg_index = b.expandable as usize;
        let change = self.expandable[seg_index].set(begin, end, false);
        self.mapped_ranges = self.mapped_ranges.saturating_add_signed(change);
        self.stats.num_device_free += end - begin;
        self.stats.reserved_bytes.sub(bytes);
    }

    /// `release_expandable_segment`: drops a segment whose address range
    /// is one unmapped block.
    pub(super) fn release_expandable_segment(&mut self, index: u32) {
        self.remove_unmapped(index);
        let seg = &mut self.expandable[self.blocks[index].expandable as usize];
        seg.live = false;
        seg.mapped = Vec::new();
        self.blocks.remove(index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_count_changes() {
        let mut s = ExpandableSegment {
            base: 0,
            page: 1,
            pages: 10,
            mapped: Vec::new(),
            live: true,
        };
        assert_eq!(s.set(0, 2, true), 1); // [0,2)
        assert_eq!(s.set(4, 5, true), 1); // [0,2) [4,5)
        assert_eq!(s.set(2, 4, true), -1); // [0,5)
        assert_eq!(s.set(1, 2, false), 1); // [0,1) [2,5)
        assert_eq!(s.set(0, 1, false), -1); // [2,5)
    }
}
