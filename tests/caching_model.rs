//! Random malloc / free sequences through the caching-allocator model, in
//! every configuration torch_npu accepts (garbage collection included): the
//! bookkeeping stays consistent, live blocks never overlap, and an
//! allocation fails only at a capacity.

use proptest::prelude::*;
use tensor_arena::caching::{
    BlockId, CachingAllocator, CachingConfig, GcThreshold, Platform, rules,
};

const MIB: u64 = 1 << 20;

#[derive(Debug, Clone)]
enum Op {
    Malloc { size: u64, stream: u32 },
    Free(usize),
    EmptyCache,
}

fn op() -> impl Strategy<Value = Op> {
    let size = prop_oneof![
        4 => 1u64..(1 << 20),                   // small pool
        3 => (1u64 << 20)..(10 << 20),          // 20 MiB segments
        2 => (10u64 << 20)..(64 << 20),         // own segments, some oversize
    ];
    prop_oneof![
        6 => (size, 0u32..2).prop_map(|(size, stream)| Op::Malloc { size, stream }),
        5 => any::<usize>().prop_map(Op::Free),
        1 => Just(Op::EmptyCache),
    ]
}

fn config() -> impl Strategy<Value = CachingConfig> {
    (
        prop::option::of(64u64..400),
        prop_oneof![Just(None), Just(Some(32 * MIB)), Just(Some(48 * MIB))],
        prop_oneof![Just(None), Just(Some(0.3)), Just(Some(0.8))],
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(cap, max_split, gc, expandable, cuda)| CachingConfig {
            capacity: cap.map(|c| c * MIB),
            // torch_npu refuses expandable segments with either of these.
            max_split_size: if expandable { None } else { max_split },
            garbage_collection_threshold: if expandable {
                None
            } else {
                gc.map(|t| GcThreshold::new(t).unwrap())
            },
            expandable_segments: expandable,
            // Both allocators keep the same invariants.
            platform: if cuda { Platform::Cuda } else { Platform::Npu },
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn model_stays_consistent(config in config(), ops in prop::collection::vec(op(), 1..120)) {
        let mut a = CachingAllocator::new(config);
        let mut live: Vec<(BlockId, u64)> = Vec::new();
        for op in ops {
            match op {
                Op::Malloc { size, stream } => match a.malloc_on(size, stream) {
                    Ok(id) => {
                        prop_assert_eq!(a.block_size(id).map(|s| s >= rules::round_size_for(config.platform, size)), Some(true));
                        live.push((id, size));
                    }
                    Err(oom) => {
                        // Only a capacity makes an allocation fail.
                        let cap = config.capacity;
                        prop_assert!(cap.is_some());
                        prop_assert!(oom.reserved <= cap.unwrap_or(0));
                    }
                },
                Op::Free(k) if !live.is_empty() => {
                    let (id, _) = live.swap_remove(k % live.len());
                    prop_assert!(a.free(id));
                    prop_assert!(!a.free(id), "a stale handle must not free twice");
                }
                Op::Free(_) => {}
                Op::EmptyCache => a.empty_cache(),
            }
            prop_assert_eq!(a.check_consistency(), Ok(()));
            let s = a.stats();
            if let Some(cap) = config.capacity {
                prop_assert!(s.reserved_bytes.current <= cap);
            }
            prop_assert!(s.allocated_bytes.current <= s.reserved_bytes.current);
            let requested: u64 = live.iter().map(|&(_, r)| r).sum();
            prop_assert_eq!(s.requested_bytes.current, requested);
            // Live blocks never share a byte.
            let mut ranges: Vec<(u64, u64)> = live
                .iter()
                .map(|&(id, _)| {
                    let at = a.address(id).unwrap_or(0);
                    (at, at + a.block_size(id).unwrap_or(0))
                })
                .collect();
            ranges.sort_unstable();
            for w in ranges.windows(2) {
                prop_assert!(w[0].1 <= w[1].0, "overlap {:?}", w);
            }
        }
        for (id, _) in live {
            prop_assert!(a.free(id));
        }
        a.empty_cache();
        prop_assert_eq!(a.stats().reserved_bytes.current, 0);
        prop_assert_eq!(a.check_consistency(), Ok(()));
    }
}
