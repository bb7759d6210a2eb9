//! The device statistics (torch's `DeviceStats` schema) against counts kept
//! apart from the library: a shadow of the live blocks the program holds,
//! and the allocator's own reserved-bytes and reservation counters.

mod support;

use proptest::prelude::*;
use tensor_arena_alloc::device_stats::{DeviceStats, StatArray};

/// Sizes whose pool no rounding rule can move: well under 1 MiB (small)
/// or over 2 MiB (large).
const SMALL: [usize; 4] = [1, 500, 4096, 300_000];
const LARGE: [usize; 2] = [(2 << 20) + 1, 3 << 20];

#[derive(Debug, Clone, Copy)]
enum Op {
    Alloc { large: bool, size: usize },
    Free { block: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (any::<bool>(), 0..4usize).prop_map(|(large, size)| Op::Alloc { large, size }),
        2 => (0..64usize).prop_map(|block| Op::Free { block }),
    ]
}

#[derive(Default)]
struct Shadow {
    /// Address -> bytes asked for.
    live: std::collections::BTreeMap<usize, usize>,
    requested_peak: usize,
}

impl Shadow {
    fn requested(&self, small: Option<bool>) -> usize {
        self.live
            .values()
            .filter(|&&n| small.is_none_or(|s| (n < 1 << 20) == s))
            .sum()
    }
}

fn arrays(d: &DeviceStats) -> [(&'static str, &StatArray); 9] {
    [
        ("allocation", &d.allocation),
        ("segment", &d.segment),
        ("active", &d.active),
        ("inactive_split", &d.inactive_split),
        ("allocated_bytes", &d.allocated_bytes),
        ("reserved_bytes", &d.reserved_bytes),
        ("active_bytes", &d.active_bytes),
        ("inactive_split_bytes", &d.inactive_split_bytes),
        ("requested_bytes", &d.requested_bytes),
    ]
}

fn check(a: &tensor_arena_alloc::PlannedAllocator, shadow: &Shadow) -> Result<(), TestCaseError> {
    let d = a.device_stats();
    let s = a.stats();
    for (name, x) in arrays(&d) {
        prop_assert_eq!(
            x.all.current,
            x.small_pool.current + x.large_pool.current,
            "{}",
            name
        );
        prop_assert_eq!(
            x.all.allocated,
            x.small_pool.allocated + x.large_pool.allocated,
            "{}",
            name
        );
        prop_assert_eq!(
            x.all.freed,
            x.small_pool.freed + x.large_pool.freed,
            "{}",
            name
        );
        prop_assert_eq!(x.all.allocated - x.all.freed, x.all.current, "{}", name);
        prop_assert!(
            x.all.peak >= x.small_pool.peak.max(x.large_pool.peak),
            "{}",
            name
        );
        prop_assert!(x.small_pool.peak >= x.small_pool.current, "{}", name);
        prop_assert!(x.large_pool.peak >= x.large_pool.current, "{}", name);
    }
    // Live blocks and asked bytes, per pool, as the program holds them.
    prop_assert_eq!(d.allocation.all.current as usize, shadow.live.len());
    prop_assert_eq!(d.active.all.current as usize, shadow.live.len());
    prop_assert_eq!(
        d.requested_bytes.all.current as usize,
        shadow.requested(None)
    );
    prop_assert_eq!(
        d.requested_bytes.small_pool.current as usize,
        shadow.requested(Some(true))
    );
    prop_assert_eq!(
        d.requested_bytes.large_pool.current as usize,
        shadow.requested(Some(false))
    );
    prop_assert_eq!(d.requested_bytes.all.peak as usize, shadow.requested_peak);
    prop_assert!(d.allocated_bytes.all.current >= d.requested_bytes.all.current);
    // Reserved bytes and device calls, as the allocator's own counters
    // (slabs, caching pools, exact regions) have them.
    prop_assert_eq!(d.reserved_bytes.all.current, s.reserved_bytes);
    prop_assert_eq!(d.num_device_alloc, s.backing_reservations);
    prop_assert_eq!(
        d.num_device_alloc - d.num_device_free,
        d.segment.all.current
    );
    prop_assert!(d.reserved_bytes.all.current >= d.allocated_bytes.all.current);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn device_stats_match_an_independent_count(
        outside in prop::collection::vec(op(), 0..6),
        body in prop::collection::vec(op(), 1..30),
        steps in 1usize..7,
    ) {
        let mut a = support::cpu(r#""warmup_steps": 1, "record_steps": 1"#);
        let mut shadow = Shadow::default();
        let run = |a: &mut tensor_arena_alloc::PlannedAllocator, ops: &[Op], shadow: &mut Shadow| -> Result<(), TestCaseError> {
            for op in ops {
                match *op {
                    Op::Alloc { large, size } => {
                        let n = if large { LARGE[size % 2] } else { SMALL[size] };
                        let p = a.alloc(n, 0, 0).expect("host memory");
                        shadow.live.insert(p, n);
                        shadow.requested_peak = shadow.requested_peak.max(shadow.requested(None));
                    }
                    Op::Free { block } => {
                        if let Some(&p) = shadow.live.keys().nth(block % shadow.live.len().max(1)) {
                            shadow.live.remove(&p);
                            a.free(p);
                        }
                    }
                }
                check(a, shadow)?;
            }
            Ok(())
        };
        run(&mut a, &outside, &mut shadow)?;
        let kept: Vec<usize> = shadow.live.keys().copied().collect();
        for _ in 0..steps {
            a.step_begin().unwrap();
            run(&mut a, &body, &mut shadow)?;
            let made: Vec<usize> = shadow.live.keys().copied().filter(|p| !kept.contains(p)).collect();
            for p in made {
                shadow.live.remove(&p);
                a.free(p);
            }
            a.step_end().unwrap();
            check(&a, &shadow)?;
        }
        a.empty_cache();
        check(&a, &shadow)?;
        // reset_peak_stats: every peak is its current value again.
        a.reset_peak_stats();
        let d = a.device_stats();
        for (name, x) in arrays(&d) {
            for s in [x.all, x.small_pool, x.large_pool] {
                prop_assert_eq!(s.peak, s.current, "{}", name);
            }
        }
        // reset_accumulated_stats: totals and counters restart, values stay.
        a.reset_accumulated_stats();
        let e = a.device_stats();
        for ((name, x), (_, y)) in arrays(&e).into_iter().zip(arrays(&d)) {
            prop_assert_eq!(x.all.current, y.all.current, "{}", name);
            prop_assert_eq!(x.all.allocated + x.all.freed, 0, "{}", name);
        }
        prop_assert_eq!(e.num_device_alloc + e.num_device_free + e.num_ooms, 0);
    }
}

#[test]
fn device_stats_json_is_torchs_nested_dict() {
    let mut a = support::cpu("");
    let p = a.alloc(1000, 0, 0).unwrap();
    let v = a.device_stats().to_json();
    assert_eq!(v["allocation"]["all"]["current"], 1);
    assert_eq!(v["requested_bytes"]["small_pool"]["current"], 1000);
    assert_eq!(v["requested_bytes"]["large_pool"]["current"], 0);
    assert_eq!(v["max_split_size"], -1);
    a.free(p);
    let v = a.device_stats().to_json();
    assert_eq!(v["allocation"]["all"]["current"], 0);
    assert_eq!(v["allocation"]["all"]["peak"], 1);
    assert_eq!(v["allocation"]["all"]["freed"], 1);
}
