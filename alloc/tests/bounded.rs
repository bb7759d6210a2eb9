//! Bounded state (issue 42): a step that never ends is cut at its request
//! cap, its record dropped; the allocator's own books stay bounded and are
//! reported (`book_bytes`); record vectors shrink after an unusually large
//! step (record.rs's unit tests); the steps after a cut one are recorded
//! and planned as usual.

mod support;

use support::{cpu, toy_step};

/// Requests of the never-ending step in the books test.
const REQUESTS: usize = 3_000_000;

#[test]
fn three_million_requests_without_a_step_end_keep_the_books_bounded() {
    let mut a = cpu("");
    a.step_begin().unwrap();
    let mut most = 0;
    let mut held = Vec::with_capacity(8);
    for i in 0..REQUESTS {
        held.push(a.alloc(512 + (i % 7) * 256, 0, 0).unwrap());
        if held.len() == 8 {
            for p in held.drain(..) {
                a.free(p);
            }
        }
        if i % 65_536 == 0 {
            most = most.max(a.book_bytes());
        }
    }
    for p in held.drain(..) {
        a.free(p);
    }
    most = most.max(a.book_bytes());
    let s = a.stats();
    assert_eq!(s.steps_cut, 1, "{s:?}");
    assert_eq!(s.book_bytes, a.book_bytes());
    // The cap (65,536 requests) of 40-byte records and 4-byte anchors,
    // doubled at most by the vectors' growth: under 6 MiB at any time.
    assert!(most <= 6 << 20, "books grew to {most} bytes");
    assert!(
        a.book_bytes() <= 64 << 10,
        "{} bytes kept after the cut",
        a.book_bytes()
    );
    // The cut step ends without error; the next steps plan as usual.
    a.step_end().unwrap();
    let mut grads = Vec::new();
    for _ in 0..6 {
        toy_step(&mut a, &mut grads, 1 << 14, 4);
    }
    for g in grads.drain(..) {
        a.free(g);
    }
    let s = a.stats();
    assert_eq!(s.phase, "serving", "{s:?}");
    assert_eq!(s.errors.step_order, 0);
    assert!(s.served_from_plan > 0);
    assert_eq!(a.live_blocks(), 0);
}

#[test]
fn a_cut_step_is_never_planned_from_and_begin_inside_it_is_refused() {
    let mut a = cpu(r#""step_request_cap": 100, "warmup_steps": 1, "record_steps": 2"#);
    let mut grads = Vec::new();
    toy_step(&mut a, &mut grads, 1 << 12, 3); // warm-up
    toy_step(&mut a, &mut grads, 1 << 12, 3); // recorded
    a.step_begin().unwrap();
    let mut held = Vec::new();
    for _ in 0..150 {
        held.push(a.alloc(1000, 0, 0).unwrap());
    }
    assert_eq!(a.steps_cut(), 1);
    assert!(a.step_begin().is_err(), "the cut step is still open");
    for p in held {
        a.free(p);
    }
    a.step_end().unwrap();
    assert_eq!(a.stats().phase, "recording", "no plan from the cut step");
    toy_step(&mut a, &mut grads, 1 << 12, 3);
    assert_eq!(
        a.stats().phase,
        "recording",
        "one step recorded since the cut"
    );
    toy_step(&mut a, &mut grads, 1 << 12, 3);
    toy_step(&mut a, &mut grads, 1 << 12, 3);
    let s = a.stats();
    assert_eq!(s.phase, "serving", "{s:?}");
    assert_eq!(s.served_share, Some(1.0), "{s:?}");
    for g in grads {
        a.free(g);
    }
}
