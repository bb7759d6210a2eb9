//! The policy through the public API: warm-up, recording, serving,
//! outliving requests, re-plans, streams, bad input.

mod support;

use support::{cpu, toy_step};

#[test]
fn a_repeating_step_is_served_from_the_plan_after_warmup() {
    let mut a = cpu("");
    let mut grads = Vec::new();
    for _ in 0..3 {
        toy_step(&mut a, &mut grads, 1 << 16, 8);
    }
    let s = a.stats();
    assert_eq!(s.phase, "serving");
    assert_eq!(s.plans, 1);
    // The slab's region is reserved in the first step the plan serves.
    toy_step(&mut a, &mut grads, 1 << 16, 8);
    let s = a.stats();
    let before = s.backing_reservations;
    for _ in 0..20 {
        toy_step(&mut a, &mut grads, 1 << 16, 8);
    }
    let s = a.stats();
    assert_eq!(s.requests_after_warmup, 21 * (8 * 2 + 8));
    assert_eq!(s.served_from_plan, s.requests_after_warmup, "{s:?}");
    assert_eq!(s.fallback_allocations_max_step, 0);
    assert_eq!(s.backing_reservations, before, "no reservation per step");
    assert_eq!(s.misses.curable(), 0);
    assert!(
        s.slab_ratio >= 1.0 && s.slab_ratio <= 1.01,
        "ratio {}",
        s.slab_ratio
    );
    // The gradients outlive each step and are still served from the plan.
    assert_eq!(grads.len(), 8);
    assert!(
        grads
            .iter()
            .all(|&g| a.slab().is_some_and(|slab| slab.contains(g)))
    );
}

#[test]
fn a_kept_request_goes_to_the_fallback_and_is_no_miss() {
    let mut a = cpu(r#""warmup_steps": 0, "record_steps": 2"#);
    let mut kept = Vec::new();
    for _ in 0..6 {
        a.step_begin().unwrap();
        let t = a.alloc(10_000, 0, 0).unwrap();
        kept.push(a.alloc(777, 0, 0).unwrap()); // the caller keeps it (a loss history)
        a.free(t);
        a.step_end().unwrap();
    }
    let s = a.stats();
    assert_eq!(s.plans, 1);
    assert_eq!(s.requests_after_warmup, 8);
    // The temporaries of steps 4 to 6; in step 3, the first the plan
    // serves, its region waited for the step's end (the kept block of step
    // 2 is still alive), so that step's requests got exact regions.
    assert_eq!(s.served_from_plan, 3, "the temporaries");
    assert_eq!(s.misses.curable(), 0);
    assert_eq!(s.fallback_allocations_last_step, 1);
    for k in kept.iter().skip(2) {
        assert!(!a.slab().unwrap().contains(*k));
    }
}

#[test]
fn a_longer_shape_misses_twice_then_one_replan_then_hits() {
    let mut a = cpu("");
    let mut grads = Vec::new();
    for _ in 0..5 {
        toy_step(&mut a, &mut grads, 1 << 14, 6);
    }
    assert_eq!(a.stats().plans, 1);
    // A longer sequence: every activation grows. One missing step is
    // served from the gaps and borrowed pages (it may be a one-off); the
    // second re-plans at its boundary.
    toy_step(&mut a, &mut grads, 1 << 15, 6);
    let s = a.stats();
    assert!(s.misses.curable() > 0, "{:?}", s.misses);
    assert_eq!(s.plans, 1, "one missing step waits");
    toy_step(&mut a, &mut grads, 1 << 15, 6);
    let s = a.stats();
    assert_eq!(
        s.plans, 2,
        "re-planned at the second missing step's boundary"
    );
    let served = s.served_from_plan;
    let asked = s.requests_after_warmup;
    for _ in 0..5 {
        toy_step(&mut a, &mut grads, 1 << 15, 6);
    }
    let s = a.stats();
    assert_eq!(s.plans, 2, "one re-plan");
    assert_eq!(
        s.served_from_plan - served,
        s.requests_after_warmup - asked,
        "{s:?}"
    );
    // Shorter steps still fit the larger plan.
    toy_step(&mut a, &mut grads, 1 << 14, 6);
    assert_eq!(a.stats().plans, 2);
    assert_eq!(a.stats().misses.curable(), s.misses.curable());
}

#[test]
fn other_streams_and_outside_requests_are_fallback_misses() {
    let mut a = cpu(r#""warmup_steps": 0, "record_steps": 1"#);
    for _ in 0..3 {
        a.step_begin().unwrap();
        let x = a.alloc(5000, 0, 0).unwrap();
        let y = a.alloc(5000, 0, 0xdead).unwrap();
        a.free(x);
        a.free(y);
        a.step_end().unwrap();
    }
    let outside = a.alloc(100, 0, 0).unwrap();
    a.free(outside);
    let s = a.stats();
    assert_eq!(s.misses.stream, 2);
    assert_eq!(s.misses.outside_step, 1);
    assert_eq!(s.served_from_plan, 2);
}

#[test]
fn bad_input_is_counted_never_acted_on() {
    let mut a = cpu(r#""warmup_steps": 0, "record_steps": 1"#);
    assert_eq!(a.alloc(0, 0, 0), None);
    assert_eq!(a.alloc(usize::MAX / 2, 0, 0), None);
    a.free(0x1234_5678);
    a.step_begin().unwrap();
    let x = a.alloc(4096, 0, 0).unwrap();
    a.free(x);
    a.free(x); // double free, from the fallback
    a.step_end().unwrap();
    a.step_begin().unwrap();
    let y = a.alloc(4096, 0, 0).unwrap();
    assert!(a.slab().unwrap().contains(y));
    a.free(y);
    a.free(y); // double free, from the slab
    assert!(a.step_begin().is_err(), "steps do not nest");
    a.step_end().unwrap();
    assert!(a.step_end().is_err());
    let e = a.stats().errors;
    assert_eq!(
        (e.zero_size, e.too_large, e.unknown_free, e.double_free),
        (1, 1, 1, 2)
    );
    assert_eq!(e.step_order, 2);
    assert_eq!(a.live_blocks(), 0);
    // The allocator still serves.
    a.step_begin().unwrap();
    let z = a.alloc(4096, 0, 0).unwrap();
    a.free(z);
    a.step_end().unwrap();
    assert_eq!(a.stats().served_from_plan, 2);
}

#[test]
fn reset_refuses_while_blocks_are_live_and_releases_nothing() {
    let mut a = cpu("");
    let mut grads = Vec::new();
    for _ in 0..4 {
        toy_step(&mut a, &mut grads, 1 << 12, 3);
    }
    // The last step's gradients are live: their bytes must stay usable.
    let live: Vec<usize> = grads.clone();
    for &g in &live {
        // SAFETY: a live block of at least 4096 bytes the allocator gave.
        unsafe { std::ptr::write_bytes(g as *mut u8, 0x5A, 1 << 12) };
    }
    let reserved = a.stats().reserved_bytes;
    assert_eq!(a.reset(), 3, "the last step's gradients");
    let e = a.try_reset().unwrap_err().to_string();
    assert!(
        e.contains("3 blocks") && e.contains("nothing was released"),
        "{e}"
    );
    assert_eq!(a.live_blocks(), 3);
    assert_eq!(a.stats().phase, "serving", "nothing changed");
    assert_eq!(a.stats().reserved_bytes, reserved);
    for &g in &live {
        // SAFETY: still live (the reset refused): mapped and ours.
        let byte = unsafe { *(g as *const u8) };
        assert_eq!(byte, 0x5A);
        a.free(g);
    }
    grads.clear();
    assert_eq!(a.reset(), 0);
    assert!(a.try_reset().is_ok());
    assert_eq!(a.live_blocks(), 0);
    assert_eq!(a.stats().phase, "warmup");
    assert_eq!(a.stats().reserved_bytes, 0);
}

#[test]
fn the_caching_model_comparison_covers_the_whole_run() {
    let mut a = cpu("");
    let mut grads = Vec::new();
    let w = a.alloc(3 << 20, 0, 0).unwrap(); // weights, outside any step
    for _ in 0..6 {
        toy_step(&mut a, &mut grads, 300_000, 8);
    }
    let s = a.stats();
    // Both models saw every request the allocator served: the same live
    // peak, over the same window.
    for m in [s.caching_model, s.expandable_model] {
        assert_eq!(m.peak_live_bytes, s.peak_live_bytes);
        assert!(m.peak_reserved_bytes >= m.peak_live_bytes);
    }
    assert!(s.peak_live_bytes >= 3 << 20);
    assert!(s.peak_reserved_bytes >= s.peak_live_bytes);
    assert!(s.peak_reserved_bytes >= s.reserved_bytes);
    let window = s.current_plan.expect("a plan served steady steps");
    assert!(window.peak_reserved_bytes <= s.peak_reserved_bytes);
    let text = tensor_arena_alloc::report::text(&s, "cuda");
    assert!(
        text.contains("served from the plan") && text.contains("whole run: peak reserved"),
        "{text}"
    );
    let snap = tensor_arena_alloc::report::snapshot(&a, 0);
    let segs = snap["segments"].as_array().unwrap();
    assert!(segs.len() >= 2, "the slab and the fallback's segments");
    for seg in segs {
        let total: u64 = seg["blocks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["size"].as_u64().unwrap())
            .sum();
        assert_eq!(
            total,
            seg["total_size"].as_u64().unwrap(),
            "blocks tile their segment"
        );
    }
    a.free(w);
}

#[test]
fn out_of_memory_is_null_and_the_allocator_goes_on() {
    use tensor_arena::HostDevice;
    use tensor_arena_alloc::{Config, PlannedAllocator, backing::host_backing_on};
    let config = Config::from_json(r#"{"log_errors": false}"#).unwrap();
    let mut a = PlannedAllocator::with_backing(
        config,
        Box::new(host_backing_on(HostDevice::with_limit(64 << 20))),
    );
    let big = a.alloc(40 << 20, 0, 0).expect("fits");
    assert_eq!(a.alloc(40 << 20, 0, 0), None, "the device is full");
    assert_eq!(a.alloc(100 << 20, 0, 0), None, "larger than the device");
    let e = a.stats().errors;
    assert_eq!((e.out_of_memory, e.too_large), (1, 1));
    a.free(big);
    let again = a.alloc(40 << 20, 0, 0).expect("the cache serves it again");
    a.free(again);
    assert_eq!(a.live_blocks(), 0);
}
