//! A self-check of the model's bookkeeping, for tests and debugging.

use super::block::NONE;
use super::model::CachingAllocator;

impl CachingAllocator {
    /// Walks every block and checks the model's invariants: segment chains
    /// are linked both ways and contiguous; every free block is in its pool
    /// and every unmapped range in its set, and nothing else is; no two
    /// free mapped neighbours are left unmerged; and the counters
    /// (allocated, reserved, segments, inactive split, mapped ranges) match
    /// a recount. Takes time linear in the number of blocks.
    ///
    /// ```
    /// use tensor_arena::caching::{CachingAllocator, CachingConfig};
    /// let mut a = CachingAllocator::new(CachingConfig::default());
    /// let x = a.malloc(5000).unwrap();
    /// a.malloc(7000).unwrap();
    /// a.free(x);
    /// assert_eq!(a.check_consistency(), Ok(()));
    /// ```
    pub fn check_consistency(&self) -> Result<(), String> {
        let (mut allocated, mut allocations, mut plain_reserved, mut segments) = (0, 0, 0, 0);
        let (mut split_count, mut split_bytes, mut mapped_bytes) = (0, 0, 0);
        let (mut free_blocks, mut unmapped_blocks) = (0, 0);
        for (i, b) in self.blocks.iter() {
            let pool = self.pool(b.small);
            if b.next != NONE {
                let n = self
                    .blocks
                    .get(b.next)
                    .ok_or(format!("block {i}: next {} is dead", b.next))?;
                if n.prev != i || n.addr != b.addr + b.size {
                    return Err(format!("block {i} and its next {} disagree", b.next));
                }
                if n.mapped && b.mapped && !n.allocated && !b.allocated {
                    return Err(format!("free blocks {i} and {} were not merged", b.next));
                }
            }
            if b.prev == NONE && !b.is_expandable() {
                segments += 1;
                let mut j = i;
                while j != NONE {
                    plain_reserved += self.blocks[j].size;
                    j = self.blocks[j].next;
                }
            }
            if b.allocated {
                allocated += b.size;
                allocations += 1;
            }
            let in_free = pool.blocks.contains(&b.size_key(i));
            let in_unmapped = pool.unmapped.contains(&b.addr_key(i));
            let want_free = !b.allocated && b.mapped;
            if in_free != want_free || in_unmapped == b.mapped {
                return Err(format!("block {i} is in the wrong pool set"));
            }
            free_blocks += usize::from(in_free);
            unmapped_blocks += usize::from(in_unmapped);
            if want_free && b.is_split() && !b.is_expandable() {
                split_count += 1;
                split_bytes += b.size;
            }
            if b.is_expandable() && b.mapped {
                mapped_bytes += b.size;
            }
        }
        let (small, large) = (self.pool(true), self.pool(false));
        if small.blocks.len() + large.blocks.len() != free_blocks
            || small.unmapped.len() + large.unmapped.len() != unmapped_blocks
        {
            return Err("a pool set holds a block that is not live".to_owned());
        }
        let (mut pages_bytes, mut ranges) = (0, 0);
        for seg in self.expandable.iter().filter(|s| s.live) {
            if seg.mapped.len() as u64 > seg.pages {
                return Err("an expandable segment maps past its address space".to_owned());
            }
            let mapped = seg.mapped.iter().filter(|&&m| m).count() as u64;
            pages_bytes += mapped * seg.page;
            ranges += seg
                .mapped
                .iter()
                .enumerate()
                .filter(|&(k, &m)| m && (k == 0 || !seg.mapped[k - 1]))
                .count() as u64;
        }
        let s = &self.stats;
        let checks = [
            ("allocated_bytes", s.allocated_bytes.current, allocated),
            ("allocation", s.allocation.current, allocations),
            ("segment", s.segment.current, segments),
            (
                "reserved_bytes",
                s.reserved_bytes.current,
                plain_reserved + pages_bytes,
            ),
            ("mapped pages vs mapped blocks", pages_bytes, mapped_bytes),
            ("inactive_split", s.inactive_split.current, split_count),
            (
                "inactive_split_bytes",
                s.inactive_split_bytes.current,
                split_bytes,
            ),
            ("mapped ranges", self.mapped_ranges, ranges),
        ];
        for (name, kept, counted) in checks {
            if kept != counted {
                return Err(format!("{name}: kept {kept}, counted {counted}"));
            }
        }
        Ok(())
    }
}
