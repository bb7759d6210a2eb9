//! Random programs that stray from their recording, checked against a
//! shadow map of live blocks: no two live blocks ever share a byte, every
//! pointer is freed once, nothing is left at reset. Requests come in both
//! request phases (train, eval), and straying ones in the other phase. In
//! the mapped range as with whole regions, every live block's bytes stay
//! mapped and its own: each block's first and last bytes carry a tag
//! written at its allocation and checked at its free (an unmapped page
//! would fault or read back zeros, a byte handed out twice would carry
//! another block's tag).

mod support;

use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use support::cpu;
use support::tagged::TaggedBlocks;
use tensor_arena_alloc::{PlannedAllocator, RequestPhase};

/// Live blocks by address, tagged at both ends.
type Shadow = TaggedBlocks;

/// One step of a program: requests (size, how many requests later it is
/// freed, `None` = kept past the step; whether it is made in an eval pass).
type Program = Vec<(usize, Option<usize>, bool)>;

fn run_step(
    a: &mut PlannedAllocator,
    shadow: &mut Shadow,
    kept: &mut Vec<usize>,
    step: &Program,
    rng: &mut SmallRng,
    stray: bool,
) {
    a.step_begin().unwrap();
    // Blocks kept by the last step are freed at the start of this one,
    // sometimes late (after this step's first request), sometimes never.
    let mut carried: Vec<usize> = std::mem::take(kept);
    let mut pending: Vec<(usize, usize)> = Vec::new(); // (free at request index, addr)
    let mut i = 0;
    for &(size, life, eval) in step {
        if stray && rng.random_bool(0.05) {
            continue; // a missing request
        }
        let size = if stray && rng.random_bool(0.05) {
            size * 3 + 1
        } else {
            size
        };
        // A request read in the other phase, when straying.
        let phase = if eval != (stray && rng.random_bool(0.05)) {
            RequestPhase::Eval
        } else {
            RequestPhase::Train
        };
        for _ in 0..if stray && rng.random_bool(0.05) { 2 } else { 1 } {
            let addr = a.alloc_phase(size, 0, 0, phase).expect("cpu memory");
            shadow.insert(addr, size);
            match life {
                Some(after) => pending.push((i + after, addr)),
                None => kept.push(addr),
            }
        }
        if !carried.is_empty() && (i == 0 || rng.random_bool(0.3)) {
            let c = carried.swap_remove(0);
            shadow.remove(c);
            a.free(c);
        }
        // Frees due now, in random order when straying.
        let mut due: Vec<usize> = Vec::new();
        pending.retain(|&(at, addr)| {
            if at <= i {
                due.push(addr);
                false
            } else {
                true
            }
        });
        if stray {
            due.reverse();
        }
        for addr in due {
            shadow.remove(addr);
            a.free(addr);
        }
        i += 1;
    }
    for (_, addr) in pending {
        shadow.remove(addr);
        a.free(addr);
    }
    kept.extend(carried);
    a.step_end().unwrap();
}

fn program() -> impl Strategy<Value = Program> {
    prop::collection::vec(
        (
            1usize..200_000,
            prop::option::weighted(0.9, 0usize..12),
            prop::bool::weighted(0.3),
        ),
        1..60,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn straying_programs_never_get_overlapping_blocks(prog in program(), seed in any::<u64>(), checked in any::<bool>(), ranged in any::<bool>()) {
        let mut a = cpu(&format!(r#""checked": {checked}, "mapped_range": {ranged}"#));
        let mut shadow = Shadow::default();
        let mut kept = Vec::new();
        let mut rng = SmallRng::seed_from_u64(seed);
        for step in 0..12 {
            run_step(&mut a, &mut shadow, &mut kept, &prog, &mut rng, step >= 3);
        }
        for addr in kept.drain(..) {
            shadow.remove(addr);
            a.free(addr);
        }
        prop_assert!(shadow.0.is_empty());
        let s = a.stats();
        prop_assert_eq!(s.errors.double_free + s.errors.unknown_free, 0, "{:?}", s.errors);
        prop_assert_eq!(s.errors.guard_violations, 0);
        prop_assert_eq!(a.live_blocks(), 0);
        prop_assert_eq!(a.reset(), 0, "nothing leaked");
    }
}

#[test]
fn threads_allocating_in_the_same_steps_never_share_bytes() {
    let a = Arc::new(Mutex::new(cpu(r#""warmup_steps": 1, "record_steps": 2"#)));
    let shadow = Arc::new(Mutex::new(Shadow::default()));
    // Steps of random sizes: the first plans are loose and wait for a
    // tighter one (allocator/first_plan.rs): three more plans at most,
    // each made on the planner's thread over a step or two.
    for step in 0..20 {
        a.lock().unwrap().step_begin().unwrap();
        let workers: Vec<_> = (0..4)
            .map(|t| {
                let (a, shadow) = (Arc::clone(&a), Arc::clone(&shadow));
                std::thread::spawn(move || {
                    let mut rng =
                        SmallRng::seed_from_u64(t * 1000 + if step > 4 { step } else { 0 });
                    let mut live = Vec::new();
                    for _ in 0..200 {
                        if live.is_empty() || rng.random_bool(0.6) {
                            let size = rng.random_range(1..50_000);
                            let addr = a.lock().unwrap().alloc(size, 0, 0).unwrap();
                            shadow.lock().unwrap().insert(addr, size);
                            live.push(addr);
                        } else {
                            let addr = live.swap_remove(rng.random_range(0..live.len()));
                            shadow.lock().unwrap().remove(addr);
                            a.lock().unwrap().free(addr);
                        }
                    }
                    for addr in live {
                        shadow.lock().unwrap().remove(addr);
                        a.lock().unwrap().free(addr);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        a.lock().unwrap().step_end().unwrap();
    }
    let mut a = a.lock().unwrap();
    let s = a.stats();
    assert!(
        s.plans >= 1,
        "{} plans, {} first plans declined",
        s.plans,
        s.first_plans_declined
    );
    assert!(
        s.served_from_plan > 0,
        "interleaved threads still hit some sites"
    );
    assert_eq!(s.errors.double_free + s.errors.unknown_free, 0);
    assert_eq!(a.reset(), 0);
}
