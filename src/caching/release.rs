//! Giving cached memory back to the device: oversize segments first (with
//! `max_split_size`), then every unsplit segment and every free page.

use super::block::SizeKey;
use super::model::CachingAllocator;

impl CachingAllocator {
    /// `release_available_cached_blocks`: with `max_split_size` set, frees
    /// the smallest oversize cached segment that covers the request, or
    /// else oversize segments from the largest down until enough is freed.
    /// Returns whether enough was freed.
    pub(super) fn release_available_cached_blocks(
        &mut self,
        small: bool,
        stream: u32,
        size: u64,
    ) -> bool {
        if self.config.max_split_size.is_none() {
            return false;
        }
        let max_split = self.max_split();
        let target = size.max(max_split);
        let at_least: SizeKey = (stream, target, 0, 0);
        let pool = self.pool(small);
        if let Some(&key) = pool.blocks.range(at_least..).next()
            && key.0 == stream
        {
            if self.blocks[key.3].is_split() {
                return false;
            }
            self.release_block(key.3);
            return true;
        }
        let mut released = 0u64;
        let mut below = at_least;
        while released < target {
            let Some(&key) = self.pool(small).blocks.range(..below).next_back() else {
                break;
            };
            if key.1 < max_split || key.0 != stream {
                break;
            }
            below = key;
            // Oversize cached blocks are whole segments (an oversize block
            // is never split), so this guard never skips one in practice.
            if !self.blocks[key.3].is_split() {
                released += key.1;
                self.release_block(key.3);
            }
        }
        released >= target
    }

    /// `release_cached_blocks`: frees every cached segment that is not
    /// split, large pool first, and unmaps the free pages of expandable
    /// segments, dropping those left empty.
    pub(super) fn release_cached_blocks(&mut self) {
        for small in [false, true] {
            self.release_blocks(small);
        }
    }

    fn release_blocks(&mut self, small: bool) {
        // Rare path (out of memory, empty_cache): a scratch list is fine.
        let keys: Vec<SizeKey> = self.pool(small).blocks.iter().copied().collect();
        let mut to_unmap = Vec::new();
        for (_, _, _, index) in keys {
            let b = &self.blocks[index];
            if b.is_expandable() {
                to_unmap.push(index);
            } else if !b.is_split() {
                self.release_block(index);
            }
        }
        for index in to_unmap {
            self.unmap_block(index);
            let b = &self.blocks[index];
            if !b.mapped && !b.is_split() {
                self.release_expandable_segment(index);
            }
        }
    }

    /// `release_block`: `aclrtFree` of a whole cached segment.
    pub(super) fn release_block(&mut self, index: u32) {
        self.remove_free(index);
        let size = self.blocks[index].size;
        let s = &mut self.stats;
        s.segment.sub(1);
        s.reserved_bytes.sub(size);
        s.num_device_free += 1;
        if size >= self.max_split() {
            self.stats.oversize_segments.sub(1);
        }
        self.blocks.remove(index);
    }
}
