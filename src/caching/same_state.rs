//! Whether two allocators are in the same state, as far as anything that
//! follows can tell: the test a replay uses to stop replaying a repeated
//! stretch of requests once the model has reached a fixed point (the
//! comparison worker of `tensor-arena-alloc`).
//!
//! Every field is destructured without `..`, so a field added to the model
//! does not compile until it is decided here whether it is state (the slot
//! table's two fields are read through `Blocks::iter` and `get`).

use super::block::{Block, Blocks, NONE, Pool};
use super::expand::ExpandableSegment;
use super::model::CachingAllocator;
use super::stats::{CachingStats, Stat};

impl CachingAllocator {
    /// Whether `self` and `other` are in the same state: given the same
    /// requests from here on, both make the same decisions (which block,
    /// which modelled address, which device calls, which requests fail)
    /// and their counters' current values and peaks stay equal.
    ///
    /// Compared exactly: the settings; every live block (address, size,
    /// requested bytes, stream, pool, allocated, mapped, expandable
    /// segment, and its neighbours by address); both pools' free and
    /// unmapped sets (by stream, size and address); the expandable
    /// segments; the next address; the mapped-range count; the current
    /// value and peak of every counter.
    ///
    /// Left out, because nothing the allocator decides reads them:
    /// - which slot of the block table holds which block, the order of the
    ///   vacant slots and the slots' generations: a slot only names a
    ///   block. Blocks never overlap and are never empty, so no two live
    ///   blocks share an address (checked here all the same), and the
    ///   pools' orders (stream, size, address, then slot) never reach the
    ///   slot. Blocks are paired by address. The two may hand out
    ///   different [`BlockId`]s for the same request: a caller that keeps
    ///   ids compares what they name, by [`CachingAllocator::address`];
    /// - the running totals (`allocated` and `freed` of each counter,
    ///   `num_alloc_retries`, `num_ooms`, `num_device_alloc`,
    ///   `num_device_free`), which only ever grow: a caller that reports
    ///   them adds what a skipped stretch would have added;
    /// - the pools' search counts and the count each cached block entered
    ///   its pool at, except as their difference (the block's age) for the
    ///   blocks of the large pool when a garbage-collection threshold is
    ///   set: garbage collection reads only those ages, and only with a
    ///   threshold (and a capacity, but a capacity can be set later).
    ///
    /// Allocates two lists of the live blocks: for occasional checks, not
    /// for every request.
    ///
    /// [`BlockId`]: super::BlockId
    pub fn same_state(&self, other: &CachingAllocator) -> bool {
        let CachingAllocator {
            config,
            blocks,
            small,
            large,
            expandable,
            next_addr,
            stats,
            mapped_ranges,
        } = self;
        *config == other.config
            && *next_addr == other.next_addr
            && *mapped_ranges == other.mapped_ranges
            && same_stats(stats, &other.stats)
            && same_blocks(blocks, &other.blocks)
            && same_pool(small, &other.small)
            && same_pool(large, &other.large)
            && expandable.len() == other.expandable.len()
            && expandable
                .iter()
                .zip(&other.expandable)
                .all(|(a, b)| same_segment(a, b))
            && (config.garbage_collection_threshold.is_none() || self.same_large_ages(other))
    }

    /// The ages garbage collection reads: the large pool's search count
    /// minus the count each of its cached blocks entered at. The pools'
    /// sets are already known to hold the same blocks in the same order.
    fn same_large_ages(&self, other: &CachingAllocator) -> bool {
        let age = |m: &CachingAllocator, index: u32| {
            m.large.gc_calls.wrapping_sub(m.blocks[index].gc_base)
        };
        self.large
            .blocks
            .iter()
            .zip(&other.large.blocks)
            .all(|(a, b)| age(self, a.3) == age(other, b.3))
    }
}

fn same_stat(a: &Stat, b: &Stat) -> bool {
    // `allocated` and `freed` are running totals: left out.
    let Stat {
        current,
        peak,
        allocated: _,
        freed: _,
    } = a;
    *current == b.current && *peak == b.peak
}

fn same_stats(a: &CachingStats, b: &CachingStats) -> bool {
    let CachingStats {
        allocation,
        segment,
        active,
        inactive_split,
        allocated_bytes,
        reserved_bytes,
        active_bytes,
        inactive_split_bytes,
        requested_bytes,
        oversize_allocations,
        oversize_segments,
        // Running totals: left out.
        num_alloc_retries: _,
        num_ooms: _,
        num_device_alloc: _,
        num_device_free: _,
    } = a;
    same_stat(allocation, &b.allocation)
        && same_stat(segment, &b.segment)
        && same_stat(active, &b.active)
        && same_stat(inactive_split, &b.inactive_split)
        && same_stat(allocated_bytes, &b.allocated_bytes)
        && same_stat(reserved_bytes, &b.reserved_bytes)
        && same_stat(active_bytes, &b.active_bytes)
        && same_stat(inactive_split_bytes, &b.inactive_split_bytes)
        && same_stat(requested_bytes, &b.requested_bytes)
        && same_stat(oversize_allocations, &b.oversize_allocations)
        && same_stat(oversize_segments, &b.oversize_segments)
}

/// Live blocks by address: `(address, slot)`, ascending; `None` if two
/// share an address (never, but then pairing by address would be wrong).
fn by_address(blocks: &Blocks) -> Option<Vec<(u64, u32)>> {
    let mut list: Vec<(u64, u32)> = blocks.iter().map(|(i, b)| (b.addr, i)).collect();
    list.sort_unstable();
    list.windows(2).all(|w| w[0].0 < w[1].0).then_some(list)
}

fn same_blocks(a: &Blocks, b: &Blocks) -> bool {
    let (Some(xs), Some(ys)) = (by_address(a), by_address(b)) else {
        return false;
    };
    xs.len() == ys.len()
        && xs
            .iter()
            .zip(&ys)
            .all(|(&(_, i), &(_, j))| same_block(a, &a[i], b, &b[j]))
}

/// The address of the block a link names: `None` for no block, `Some(None)`
/// for a slot that holds none (never).
fn link(blocks: &Blocks, index: u32) -> Option<Option<u64>> {
    (index != NONE).then(|| blocks.get(index).map(|b| b.addr))
}

fn same_block(ta: &Blocks, a: &Block, tb: &Blocks, b: &Block) -> bool {
    let Block {
        addr,
        size,
        requested,
        stream,
        small,
        allocated,
        mapped,
        expandable,
        prev,
        next,
        // Tells stale ids from live ones only.
        generation: _,
        live,
        // Read only as an age, by garbage collection (see same_large_ages).
        gc_base: _,
    } = a;
    *addr == b.addr
        && *size == b.size
        && *requested == b.requested
        && *stream == b.stream
        && *small == b.small
        && *allocated == b.allocated
        && *mapped == b.mapped
        && *expandable == b.expandable
        && link(ta, *prev) == link(tb, b.prev)
        && link(ta, *next) == link(tb, b.next)
        && *live == b.live
}

fn same_pool(a: &Pool, b: &Pool) -> bool {
    let Pool {
        blocks,
        unmapped,
        // Read only as ages (see same_large_ages).
        gc_calls: _,
    } = a;
    // The slot (the key's last field) is left out.
    blocks.len() == b.blocks.len()
        && blocks
            .iter()
            .zip(&b.blocks)
            .all(|(x, y)| (x.0, x.1, x.2) == (y.0, y.1, y.2))
        && unmapped.len() == b.unmapped.len()
        && unmapped
            .iter()
            .zip(&b.unmapped)
            .all(|(x, y)| (x.0, x.1) == (y.0, y.1))
}

fn same_segment(a: &ExpandableSegment, b: &ExpandableSegment) -> bool {
    let ExpandableSegment {
        base,
        page,
        pages,
        mapped,
        live,
    } = a;
    *base == b.base
        && *page == b.page
        && *pages == b.pages
        && *mapped == b.mapped
        && *live == b.live
}

#[cfg(test)]
mod tests {
    use super::super::{CachingConfig, GcThreshold};
    use super::*;

    const MIB: u64 = 1 << 20;

    /// Temporaries of a training step: allocated, then freed.
    fn step(a: &mut CachingAllocator, sizes: &[u64]) {
        let ids: Vec<_> = sizes.iter().map(|&s| a.malloc(s).unwrap()).collect();
        for id in ids {
            assert!(a.free(id));
        }
    }

    #[test]
    fn repeated_steps_reach_a_fixed_point_whatever_slots_they_use() {
        let mut a = CachingAllocator::new(CachingConfig::cuda());
        a.malloc(5 * MIB).unwrap();
        a.malloc(700).unwrap();
        let sizes = [3 * MIB, 1000, 12 * MIB, 64 << 10];
        step(&mut a, &sizes);
        for _ in 0..4 {
            let before = a.clone();
            step(&mut a, &sizes);
            // The freed slots come back in another order each step (a
            // cycle of three here): only the naming differs.
            assert!(a.same_state(&before));
            assert!(before.same_state(&a));
            assert_ne!(a.stats(), before.stats(), "the running totals grew");
        }
    }

    #[test]
    fn a_live_block_a_peak_or_an_address_makes_a_difference() {
        let mut a = CachingAllocator::new(CachingConfig::cuda());
        step(&mut a, &[3 * MIB]);
        let base = a.clone();
        assert!(a.same_state(&base));

        let mut live = base.clone();
        let id = live.malloc(1000).unwrap();
        assert!(!live.same_state(&base));
        live.free(id);
        // Back to the same blocks, but the small pool's segment stays.
        assert!(!live.same_state(&base));

        let mut peak = base.clone();
        step(&mut peak, &[3 * MIB, 3 * MIB]);
        let mut again = base.clone();
        step(&mut again, &[3 * MIB]);
        assert!(again.same_state(&base));
        // Same blocks (one 20 MiB segment, all free); higher peaks.
        assert!(!peak.same_state(&base));

        // Same bytes allocated and peak; the live block at another
        // address, the segment split in three.
        let mut front = base.clone();
        let x = front.malloc(3 * MIB).unwrap();
        let mut back = base.clone();
        let y = back.malloc(3 * MIB).unwrap();
        let z = back.malloc(3 * MIB).unwrap();
        back.free(y);
        let mut front_peaks = front.clone();
        step(&mut front_peaks, &[3 * MIB]); // the same peaks as `back`
        assert_ne!(back.address(z), front.address(x));
        let (f, b) = (front_peaks.stats(), back.stats());
        assert_eq!(
            (f.allocated_bytes.current, f.allocated_bytes.peak),
            (b.allocated_bytes.current, b.allocated_bytes.peak)
        );
        assert!(!front_peaks.same_state(&back));
    }

    #[test]
    fn cached_blocks_ages_count_only_with_a_gc_threshold() {
        let with_gc = CachingConfig {
            capacity: Some(1 << 30),
            garbage_collection_threshold: GcThreshold::new(0.5).ok(),
            ..CachingConfig::cuda()
        };
        for (config, ages_count) in [(CachingConfig::cuda(), false), (with_gc, true)] {
            let mut a = CachingAllocator::new(config);
            // A cached segment of another stream, which no step touches:
            // it ages by one search of the large pool per request.
            let cached = a.malloc_on(30 * MIB, 1).unwrap();
            a.free(cached);
            a.malloc(5 * MIB).unwrap();
            step(&mut a, &[3 * MIB]);
            let before = a.clone();
            step(&mut a, &[3 * MIB]);
            assert_eq!(a.same_state(&before), !ages_count, "{config:?}");
        }
    }
}
