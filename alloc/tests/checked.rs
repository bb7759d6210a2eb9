//! Checked mode: freed planned blocks are poisoned, guard bytes after each
//! planned block are verified when it is freed.
#![allow(unsafe_code)] // The test reads and writes the host memory the allocator handed out.

mod support;

use support::cpu;
use tensor_arena::arena::{GUARD_BYTE, POISON_BYTE};

#[test]
fn freed_planned_blocks_are_poisoned_and_guards_checked() {
    let mut a = cpu(r#""warmup_steps": 0, "record_steps": 1, "checked": true"#);
    for _ in 0..2 {
        a.step_begin().unwrap();
        let x = a.alloc(1000, 0, 0).unwrap();
        a.free(x);
        a.step_end().unwrap();
    }
    a.step_begin().unwrap();
    let x = a.alloc(1000, 0, 0).unwrap();
    assert!(a.slab().unwrap().contains(x));
    let slot = a.slab().unwrap().plan.sites[0].slot as usize;
    // SAFETY: `x` is a live host block of 1000 bytes in a slot of `slot`
    // bytes that the allocator reserved; the test owns it until the free.
    let guard = unsafe { std::slice::from_raw_parts(x as *const u8, slot) };
    assert!(
        guard[slot - 512..].iter().all(|&b| b == GUARD_BYTE),
        "guard written at alloc"
    );
    a.free(x);
    // SAFETY: the slab stays reserved; the block was freed, so the read
    // only observes the poison the allocator wrote.
    let after = unsafe { std::slice::from_raw_parts(x as *const u8, slot) };
    assert!(after.iter().all(|&b| b == POISON_BYTE), "poisoned at free");
    assert_eq!(a.stats().errors.guard_violations, 0);
    a.step_end().unwrap();
    // A write past the block's slot capacity, into the guard: detected.
    a.step_begin().unwrap();
    let y = a.alloc(1000, 0, 0).unwrap();
    assert_eq!(y, x, "the same site");
    // SAFETY: inside the slab region the allocator reserved (the guard
    // zone of this site); the test plays a buggy kernel.
    unsafe { *((y + slot - 100) as *mut u8) = 0 };
    a.free(y);
    assert_eq!(a.stats().errors.guard_violations, 1);
    a.step_end().unwrap();
}
