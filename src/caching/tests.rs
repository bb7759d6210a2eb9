//! Hand-checked scenarios: every expected number below is worked out from
//! the rules in `rules.rs` (round to 512 after a 32-byte pad; 2 MiB small
//! segments, 20 MiB for 1-10 MiB, else rounded to 2 MiB; split small if
//! >= 512 B remain, large if below max_split_size and > 1 MiB remain).

use super::*;

const MIB: u64 = 1 << 20;

fn alloc(config: CachingConfig) -> CachingAllocator {
    CachingAllocator::new(config)
}

fn checked(a: &CachingAllocator) {
    assert_eq!(a.check_consistency(), Ok(()));
}

#[test]
fn small_blocks_split_and_merge_back() {
    let mut a = alloc(CachingConfig::default());
    // 1000 + 32 = 1032 -> 1536; 2 MiB segment; 2097152 - 1536 = 2095616 left.
    let x = a.malloc(1000).unwrap();
    let s = a.stats();
    assert_eq!(s.allocated_bytes.current, 1536);
    assert_eq!(s.reserved_bytes.current, 2 * MIB);
    assert_eq!(
        (s.inactive_split.current, s.inactive_split_bytes.current),
        (1, 2_095_616)
    );
    // The second takes the remainder (best fit), which shrinks by 1536.
    let y = a.malloc(1000).unwrap();
    assert_eq!(a.address(x), Some(0));
    assert_eq!(a.address(y), Some(1536));
    assert_eq!(a.stats().inactive_split_bytes.current, 2_094_080);
    // Freeing x leaves a second free piece: 2 pieces, 2094080 + 1536.
    assert!(a.free(x));
    let s = a.stats();
    assert_eq!(
        (s.inactive_split.current, s.inactive_split_bytes.current),
        (2, 2_095_616)
    );
    // Freeing y merges all three pieces into the whole segment again.
    assert!(a.free(y));
    let s = a.stats();
    assert_eq!(
        (s.inactive_split.current, s.inactive_split_bytes.current),
        (0, 0)
    );
    assert_eq!(s.allocated_bytes.current, 0);
    assert_eq!(s.segment.current, 1);
    assert!(!a.free(y), "double free is refused");
    checked(&a);
}

#[test]
fn large_blocks_split_only_above_one_mib_remaining() {
    // 3 MiB + 32 -> 3146240; segment 20 MiB; 20971520 - 3146240 = 17825280
    // remains (> 1 MiB), so the segment is split.
    let mut a = alloc(CachingConfig::default());
    a.malloc(3 * MIB).unwrap();
    assert_eq!(a.stats().inactive_split_bytes.current, 17_825_280);
    // 16776672 + 32 = 16776704 (a multiple of 512) leaves exactly 1 MiB of
    // the 17825280 block: not more than 1 MiB, so it takes the whole block.
    a.malloc(16_776_672).unwrap();
    let s = a.stats();
    assert_eq!(s.allocated_bytes.current, 20 * MIB);
    assert_eq!((s.inactive_split.current, s.segment.current), (0, 1));
    checked(&a);

    // 512 bytes less leaves 1049088 > 1 MiB: split.
    let mut b = alloc(CachingConfig::default());
    b.malloc(3 * MIB).unwrap();
    b.malloc(16_776_672 - 512).unwrap();
    let s = b.stats();
    assert_eq!(s.allocated_bytes.current, 3_146_240 + 16_776_192);
    assert_eq!(s.inactive_split_bytes.current, 1_049_088);
    checked(&b);
}

#[test]
fn a_hole_too_small_for_the_next_request_costs_a_segment() {
    let mut a = alloc(CachingConfig::default());
    // Three 6 MiB blocks (6291968 each) carved from one 20 MiB segment:
    // 20971520 - 3 * 6291968 = 2095616 left at the end.
    let ids: Vec<_> = (0..3).map(|_| a.malloc(6 * MIB).unwrap()).collect();
    assert_eq!(a.stats().segment.current, 1);
    a.free(ids[1]);
    // 7 MiB (7340544) fits neither the 6291968 hole nor the 2095616 tail.
    a.malloc(7 * MIB).unwrap();
    let s = a.stats();
    assert_eq!(s.segment.current, 2);
    assert_eq!(s.reserved_bytes.current, 40 * MIB);
    assert_eq!(s.allocated_bytes.current, 2 * 6_291_968 + 7_340_544);
    // The hole is split inactive memory: 6291968 + 2095616 in segment 1,
    // plus 20971520 - 7340544 = 13630976 left in segment 2.
    assert_eq!(
        s.inactive_split_bytes.current,
        6_291_968 + 2_095_616 + 13_630_976
    );
    checked(&a);
}

#[test]
fn max_split_size_keeps_oversize_blocks_whole() {
    let config = CachingConfig {
        max_split_size: Some(32 * MIB),
        ..CachingConfig::default()
    };
    let mut a = alloc(config);
    // 40 MiB + 32 -> 41943552; segment rounded to 2 MiB: 42 MiB, oversize,
    // and not split (the request is not below max_split_size).
    let x = a.malloc(40 * MIB).unwrap();
    let s = a.stats();
    assert_eq!(s.allocated_bytes.current, 42 * MIB);
    assert_eq!(
        (s.oversize_segments.current, s.oversize_allocations.current),
        (1, 1)
    );
    a.free(x);
    // 25 MiB + 512 is below max_split_size: the cached 42 MiB block is
    // refused, a 26 MiB segment is made.
    let y = a.malloc(25 * MIB).unwrap();
    assert_eq!(a.stats().reserved_bytes.current, 68 * MIB);
    a.free(y);
    // 35 MiB + 512 (36700672) is oversize; the 42 MiB block is less than
    // 20 MiB larger (44040192 < 57672192), so it serves it, whole.
    let z = a.malloc(35 * MIB).unwrap();
    assert_eq!(a.address(z), Some(0), "the first segment, at address 0");
    assert_eq!(a.stats().reserved_bytes.current, 68 * MIB);
    assert_eq!(a.block_size(z), Some(42 * MIB));
    checked(&a);

    // A 64 MiB cached block is too large for 40 MiB: 67108864 >=
    // 41943552 + 20971520, so a new 42 MiB segment is made.
    let mut b = alloc(config);
    let big = b.malloc(64 * MIB - 4096).unwrap();
    b.free(big);
    b.malloc(40 * MIB).unwrap();
    assert_eq!(b.stats().segment.current, 2);
    assert_eq!(b.stats().reserved_bytes.current, 64 * MIB + 42 * MIB);
    checked(&b);
}

#[test]
fn oversize_cached_segments_are_released_first() {
    let config = CachingConfig {
        capacity: Some(80 * MIB),
        max_split_size: Some(32 * MIB),
        ..CachingConfig::default()
    };
    let mut a = alloc(config);
    // 60 MiB + 32 -> 62915072 -> a 62 MiB segment, then cached.
    let x = a.malloc(60 * MIB).unwrap();
    a.free(x);
    // 30 MiB + 512 may not use it (below max_split_size) and a 32 MiB
    // segment does not fit beside it (62 + 32 > 80): the oversize segment
    // (the smallest one of at least 32 MiB) is freed, no retry counted.
    a.malloc(30 * MIB).unwrap();
    let s = a.stats();
    assert_eq!(s.reserved_bytes.current, 32 * MIB);
    assert_eq!((s.segment.current, s.num_device_free), (1, 1));
    assert_eq!((s.num_alloc_retries, s.num_ooms), (0, 0));
    checked(&a);
}

#[test]
fn out_of_memory_after_releasing_the_cache_and_retrying() {
    let mut a = alloc(CachingConfig {
        capacity: Some(40 * MIB),
        ..CachingConfig::default()
    });
    // 12 MiB + 512 -> 14 MiB segments, each split (2 MiB - 512 > 1 MiB left).
    let x = a.malloc(12 * MIB).unwrap();
    let _y = a.malloc(12 * MIB).unwrap();
    a.free(x);
    // 20 MiB + 512 needs a 22 MiB segment: 28 + 22 > 40. The whole cached
    // 14 MiB segment is released (the other is split), then 14 + 22 fits.
    a.malloc(20 * MIB).unwrap();
    let s = a.stats();
    assert_eq!(
        (s.num_alloc_retries, s.reserved_bytes.current),
        (1, 36 * MIB)
    );
    // Again: nothing unsplit to release, 36 + 22 > 40: out of memory.
    let err = a.malloc(20 * MIB).unwrap_err();
    let s = a.stats();
    assert_eq!((s.num_alloc_retries, s.num_ooms), (2, 1));
    assert_eq!(err.segment, 22 * MIB);
    assert_eq!(err.allocated, 12_583_424 + 20_972_032);
    assert_eq!(err.reserved, 36 * MIB);
    assert!(
        err.to_string()
            .starts_with("NPU out of memory. Tried to allocate 22.0 MiB")
    );
    checked(&a);
}

#[test]
fn streams_do_not_share_cached_blocks() {
    let mut a = alloc(CachingConfig::default());
    let x = a.malloc_on(1000, 0).unwrap();
    a.free(x);
    a.malloc_on(1000, 1).unwrap();
    assert_eq!(a.stats().segment.current, 2);
    a.malloc_on(1000, 0).unwrap();
    assert_eq!(a.stats().segment.current, 2, "stream 0 reuses its own");
    checked(&a);
}

#[test]
fn empty_cache_releases_only_whole_segments() {
    let mut a = alloc(CachingConfig::default());
    let x = a.malloc(1000).unwrap();
    let y = a.malloc(5 * MIB).unwrap();
    let _z = a.malloc(2000).unwrap();
    a.free(x);
    a.free(y);
    a.empty_cache();
    // The large segment is whole again and goes; the small one holds z.
    let s = a.stats();
    assert_eq!((s.segment.current, s.reserved_bytes.current), (1, 2 * MIB));
    checked(&a);
}

#[test]
fn expandable_segments_grow_by_pages() {
    let mut a = alloc(CachingConfig {
        expandable_segments: true,
        ..CachingConfig::default()
    });
    // 3 MiB + 32 -> 3146240: one 20 MiB page of the large pool's segment.
    let x = a.malloc(3 * MIB).unwrap();
    let s = a.stats();
    assert_eq!((s.reserved_bytes.current, s.segment.current), (20 * MIB, 0));
    assert_eq!(a.segment_count(), 1);
    assert_eq!(
        s.inactive_split_bytes.current, 0,
        "not counted for expandable"
    );
    // 18 MiB + 512 = 18874880 does not fit the 17825280 left: a second page
    // is mapped after it and merged with it, so the block starts at
    // 3146240, which is moved up to the next 16 KiB boundary (3162112).
    let y = a.malloc(18 * MIB).unwrap();
    assert_eq!(a.stats().reserved_bytes.current, 40 * MIB);
    assert_eq!(a.address(y), Some(3_162_112));
    assert_eq!(a.segment_count(), 1, "still one contiguous range");
    checked(&a);
    a.free(x);
    a.free(y);
    a.empty_cache();
    let s = a.stats();
    assert_eq!((s.reserved_bytes.current, a.segment_count()), (0, 0));
    assert_eq!((s.num_device_alloc, s.num_device_free), (2, 2));
    checked(&a);
}

#[test]
fn expandable_out_of_memory_unmaps_free_pages_first() {
    let mut a = alloc(CachingConfig {
        capacity: Some(40 * MIB),
        expandable_segments: true,
        ..CachingConfig::default()
    });
    // Two pages (40 MiB) for 30 MiB + 512; then free it and ask for a small
    // block: the small pool needs a 2 MiB page, which fits only once the
    // large pool's two free pages are unmapped.
    let x = a.malloc(30 * MIB).unwrap();
    assert_eq!(a.stats().reserved_bytes.current, 40 * MIB);
    a.free(x);
    a.malloc(1000).unwrap();
    let s = a.stats();
    assert_eq!(s.reserved_bytes.current, 2 * MIB);
    assert_eq!(s.num_alloc_retries, 1);
    checked(&a);
}

fn with_gc(capacity_mib: u64, threshold: f64) -> CachingAllocator {
    alloc(CachingConfig {
        capacity: Some(capacity_mib * MIB),
        garbage_collection_threshold: Some(GcThreshold::new(threshold).unwrap()),
        ..CachingConfig::default()
    })
}

/// Two 30 MiB blocks (32 MiB segments each, not split: 32 MiB less
/// 30 MiB + 512 is less than 1 MiB), a 12 MiB block (a 14 MiB segment) freed and
/// reused twice, then the two 30 MiB ones freed at different ages. Returns
/// the allocator with 78 MiB cached: the first 32 MiB segment (age 3), the
/// 14 MiB one and the second 32 MiB one (age 1 each).
fn aged_cache(mut a: CachingAllocator) -> CachingAllocator {
    let x = a.malloc(30 * MIB).unwrap(); // large-pool search 1
    let y = a.malloc(30 * MIB).unwrap(); // 2
    let e = a.malloc(12 * MIB).unwrap(); // 3
    a.free(x); // cached after 3 searches
    a.free(e);
    for _ in 0..2 {
        let again = a.malloc(12 * MIB).unwrap(); // 4, 5: reuses e's segment
        a.free(again);
    }
    a.free(y); // cached after 5 searches
    assert_eq!(a.stats().reserved_bytes.current, 78 * MIB);
    assert_eq!(a.stats().segment.current, 3);
    a
}

#[test]
fn garbage_collection_frees_the_oldest_cached_segments_first() {
    // Threshold 0.5 of 100 MiB: 78 MiB reserved exceeds 50 MiB by 28 MiB.
    // 40 MiB + 512 fits no cached block (search 6), so the collector runs:
    // ages 3 (x), 1 (e), 1 (y), average 5/3; only x's segment qualifies,
    // and its 32 MiB cover the 28 MiB. 46 + 42 MiB then fit in 100 MiB.
    let mut a = aged_cache(with_gc(100, 0.5));
    a.malloc(40 * MIB).unwrap();
    let s = a.stats();
    assert_eq!(s.reserved_bytes.current, (46 + 42) * MIB);
    assert_eq!((s.num_device_free, s.num_alloc_retries), (1, 0));
    let starts: Vec<u64> = a.segments().iter().map(|g| g.blocks[0].address).collect();
    assert_eq!(
        starts,
        vec![32 * MIB, 64 * MIB, 78 * MIB],
        "x's segment at 0 went"
    );
    checked(&a);
}

#[test]
fn garbage_collection_repeats_with_a_new_average() {
    // Threshold 0.3: 78 - 30 = 48 MiB to free. Pass 1 frees x (32 MiB);
    // pass 2 averages the other two (age 1 each) and frees both.
    let mut a = aged_cache(with_gc(100, 0.3));
    a.malloc(40 * MIB).unwrap();
    let s = a.stats();
    assert_eq!(s.reserved_bytes.current, 42 * MIB);
    assert_eq!((s.num_device_free, s.num_alloc_retries), (3, 0));
    checked(&a);
}

#[test]
fn without_garbage_collection_the_cache_goes_only_on_retry() {
    // The same requests with no threshold: 78 + 42 > 100, so every unsplit
    // cached segment is released and the allocation retried.
    let mut a = aged_cache(alloc(CachingConfig {
        capacity: Some(100 * MIB),
        ..CachingConfig::default()
    }));
    a.malloc(40 * MIB).unwrap();
    let s = a.stats();
    assert_eq!(s.reserved_bytes.current, 42 * MIB);
    assert_eq!((s.num_device_free, s.num_alloc_retries), (3, 1));
    // Below the threshold (0.5 of 200 MiB: 78 <= 100) the cache stays.
    let mut b = aged_cache(with_gc(200, 0.5));
    b.malloc(40 * MIB).unwrap();
    assert_eq!(b.stats().reserved_bytes.current, 120 * MIB);
    assert_eq!(b.stats().num_device_free, 0);
    // And without a capacity (no memory fraction) it never runs.
    let mut c = aged_cache(alloc(CachingConfig {
        garbage_collection_threshold: Some(GcThreshold::new(0.1).unwrap()),
        ..CachingConfig::default()
    }));
    c.malloc(40 * MIB).unwrap();
    assert_eq!(c.stats().num_device_free, 0);
    checked(&c);
}
