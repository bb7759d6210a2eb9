//! Figures of the stats that have an edge of their own: the served share
//! before anything was served (`null`, and "no request served yet" in the
//! report), and the per-step device-call counters
//! (`backing_calls_last_step`, `backing_calls_max_steady_step`,
//! `steady_steps_with_backing_calls`) on the mapped range.

mod support;

use support::{cpu, toy_step};
use tensor_arena_alloc::report;

#[test]
fn served_share_is_null_until_a_serving_step_makes_a_request() {
    let mut a = cpu(r#""warmup_steps": 1, "record_steps": 2"#);
    let fresh = a.stats();
    assert_eq!(fresh.requests_after_warmup, 0);
    assert_eq!(fresh.served_share, None, "nothing requested yet");
    // Warm-up and recording steps make requests, none after warm-up.
    let mut grads = Vec::new();
    for _ in 0..3 {
        toy_step(&mut a, &mut grads, 1 << 14, 4);
        let s = a.stats();
        assert_eq!(s.served_share, None, "no serving step yet: {s:?}");
    }
    let before = a.stats();
    assert!(before.requests > 0);
    assert_eq!(before.requests_after_warmup, 0, "{before:?}");
    assert_eq!(before.served_share, None);
    // JSON null, and the report says why there is no share.
    let json = report::json(&a);
    assert!(json["stats"]["served_share"].is_null(), "{json}");
    let text = json["text"].as_str().unwrap();
    assert!(text.contains("no request served yet"), "{text}");
    assert!(!text.contains("NaN"), "{text}");
    // The first serving steps make requests: a share, 0 to 1.
    for _ in 0..3 {
        toy_step(&mut a, &mut grads, 1 << 14, 4);
    }
    let after = a.stats();
    assert!(after.requests_after_warmup > 0, "{after:?}");
    let share = after
        .served_share
        .expect("a share once a serving step requested");
    assert!((0.0..=1.0).contains(&share), "{share}");
    assert_eq!(
        share,
        after.served_from_plan as f64 / after.requests_after_warmup as f64
    );
    let json = report::json(&a);
    assert_eq!(json["stats"]["served_share"].as_f64(), Some(share));
    assert!(
        !json["text"]
            .as_str()
            .unwrap()
            .contains("no request served yet")
    );
}

#[test]
fn steady_steps_make_no_device_call_until_a_miss_needs_new_pages() {
    // The mapped range is the default: regions cost no device call, pages
    // are mapped in chunks during warm-up and then as regions need them.
    // One step with a miss does not re-plan here (a re-plan installed at a
    // step's end makes that step not steady).
    let mut a = cpu(r#""replan_miss_steps": 3"#);
    let mut grads = Vec::new();
    for _ in 0..12 {
        toy_step(&mut a, &mut grads, 1 << 16, 8);
    }
    let s = a.stats();
    assert_eq!(s.phase, "serving");
    assert!(s.backing_calls.map > 0, "pages were mapped: {s:?}");
    assert_eq!(s.backing_calls_last_step, 0, "{s:?}");
    assert_eq!(s.backing_calls_max_steady_step, 0, "{s:?}");
    assert_eq!(s.steady_steps_with_backing_calls, 0, "{s:?}");

    // One steady step asks for 64 MiB more than anything mapped: the plan
    // does not serve it, its region needs new pages, so the step maps.
    a.step_begin().unwrap();
    for g in grads.drain(..) {
        a.free(g);
    }
    let big = a.alloc(64 << 20, 0, 0).unwrap();
    a.free(big);
    let mut acts = Vec::new();
    for i in 0..8 {
        acts.push(a.alloc((1 << 16) * (i % 3 + 1), 0, 0).unwrap());
        let t = a.alloc((1 << 15) + 100, 0, 0).unwrap();
        a.free(t);
    }
    for (i, x) in acts.into_iter().enumerate().rev() {
        grads.push(a.alloc(4096 * (i + 1), 0, 0).unwrap());
        a.free(x);
    }
    a.step_end().unwrap();
    let s = a.stats();
    assert_eq!(s.plans, 1, "no re-plan: the step stays steady: {s:?}");
    let calls = s.backing_calls_last_step;
    assert!(calls >= 1, "the 64 MiB region was mapped: {s:?}");
    assert_eq!(s.backing_calls_max_steady_step, calls, "{s:?}");
    assert_eq!(s.steady_steps_with_backing_calls, 1, "{s:?}");

    // The steps after it make no call (the pages stay mapped until a plan
    // changes); the most in one steady step and the count of steady steps
    // with calls are kept.
    for _ in 0..12 {
        toy_step(&mut a, &mut grads, 1 << 16, 8);
        let t = a.stats();
        assert!(t.backing_calls_max_steady_step >= calls, "{t:?}");
        assert!(t.steady_steps_with_backing_calls >= 1, "{t:?}");
    }
    let end = a.stats();
    assert_eq!(end.backing_calls_last_step, 0, "{end:?}");
    assert_eq!(end.backing_calls_max_steady_step, calls, "{end:?}");
    assert_eq!(end.steady_steps_with_backing_calls, 1, "{end:?}");
    let text = report::text(&end, "cuda");
    assert!(
        text.contains(&format!(
            "at most {calls} in a steady step (1 steady steps with any)"
        )),
        "{text}"
    );
}
