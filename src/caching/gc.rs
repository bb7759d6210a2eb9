//! `garbage_collection_threshold`: freeing old cached segments before the
//! device is asked for a new one (`garbage_collect_cached_blocks` in
//! torch_npu's `NPUCachingAllocator.cpp`, the same as PyTorch's).
//!
//! torch_npu runs it when a request finds no cached block, the threshold
//! is set and a memory fraction below 1 gives an allowed maximum; the
//! model takes its capacity as that maximum. If the reserved bytes exceed
//! `threshold * capacity`, it frees whole (unsplit) cached blocks of the
//! large pool, any stream, whose age (searches of the large pool since the
//! block was cached) is at least the average age, in pool order (stream,
//! size, address), and repeats with a new average until the excess is
//! freed or no block qualifies. It does not stop at the target inside a
//! pass, so that it runs less often.

use super::block::SizeKey;
use super::model::CachingAllocator;

impl CachingAllocator {
    /// Frees old cached large segments while reserved memory is above the
    /// garbage-collection threshold; does nothing without a threshold or a
    /// capacity.
    pub(super) fn garbage_collect_cached_blocks(&mut self) {
        let (Some(threshold), Some(allowed)) = (
            self.config.garbage_collection_threshold,
            self.config.capacity,
        ) else {
            return;
        };
        // As torch: static_cast<size_t>(threshold * allowed).
        let gc_threshold = (threshold.get() * allowed as f64) as u64;
        let total = self.stats.reserved_bytes.current;
        if total <= gc_threshold {
            return;
        }
        let target = total - gc_threshold;
        let calls = self.large.gc_calls;
        let age = |m: &CachingAllocator, index: u32| calls - m.blocks[index].gc_base;
        let (mut total_age, mut freeable) = (0.0f64, 0usize);
        for &(_, _, _, index) in &self.large.blocks {
            if !self.blocks[index].is_split() {
                total_age += age(self, index) as f64;
                freeable += 1;
            }
        }
        let mut reclaimed = 0u64;
        let mut freed = true;
        while reclaimed < target && freed && freeable > 0 {
            let age_threshold = total_age / freeable as f64;
            freed = false;
            // Rare path: a scratch copy of the keys is fine.
            let keys: Vec<SizeKey> = self.large.blocks.iter().copied().collect();
            for (_, size, _, index) in keys {
                if self.blocks[index].is_split() {
                    continue;
                }
                let a = age(self, index);
                if a as f64 >= age_threshold {
                    freed = true;
                    reclaimed += size;
                    total_age -= a as f64;
                    freeable -= 1;
                    self.release_block(index);
                }
            }
        }
    }
}
