//! Checked mode: guard bytes catch writes past a buffer's capacity, and
//! step-scoped buffers are poisoned when their lifetime ends.

use tensor_arena::{Arena, ArenaOptions, Buffer, Error, HostDevice, Phase, Planner, ops};

type R = tensor_arena::Result<()>;

/// A checked arena, a persistent buffer `w`, two buffers `a` (forward) and
/// `b` (backward) sharing bytes, and the backward phase.
type Setup = (
    Arena<HostDevice>,
    Buffer<f32>,
    Buffer<f32>,
    Buffer<f32>,
    Phase,
);

fn setup() -> tensor_arena::Result<Setup> {
    let mut p = Planner::new();
    let fwd = p.phase("forward")?;
    let bwd = p.phase("backward")?;
    let w = p.persistent::<f32>("w", &[100])?;
    let a = p.span::<f32>("a", &[100], fwd, fwd)?;
    let b = p.span::<f32>("b", &[100], bwd, bwd)?;
    let plan = p.plan()?;
    assert_eq!(plan.buffer(a.id())?.offset(), plan.buffer(b.id())?.offset());
    let arena = Arena::with_options(HostDevice::new(), plan, ArenaOptions::checked())?;
    Ok((arena, w, a, b, bwd))
}

#[test]
fn a_one_element_raw_pointer_overrun_is_caught_every_time() -> R {
    let (mut arena, _, a, _, _) = setup()?;
    for step in 0..5u64 {
        arena.step(|s| -> R {
            let mut x = s.lease(a)?;
            x.set_shape(&[10, 10])?;
            let cap = x.capacity();
            assert_eq!(cap, 112);
            // SAFETY: a deliberate bug for the test: element `cap` is one
            // past the lease's capacity but still inside the slab (every
            // slot ends with at least 32 guard bytes), so the write stays
            // within the allocation; nothing else references those bytes.
            unsafe { x.device_ptr().add(cap).write(1.0) };
            Ok(())
        })?;
        let err = arena.verify().unwrap_err();
        let Error::GuardViolation(v) = err else {
            panic!("expected a guard violation, got {err}");
        };
        assert_eq!(v.buffer, "a");
        assert_eq!(v.overrun_bytes, 4, "one f32 past the capacity");
        assert_eq!(v.capacity_bytes, 112 * 4);
        assert_eq!((v.step, v.phase.as_str()), (step, "forward"));
        assert_eq!(v.lease, step + 1, "the lease that wrote last");
        assert_eq!(v.view_elements, 100);
        assert!(v.to_string().contains("'a'") && v.to_string().contains("4 byte(s)"));
        assert_eq!(arena.take_violations().len(), 1);
        arena.verify()?;
    }
    Ok(())
}

#[test]
fn a_host_kernel_running_one_element_too_far_is_caught() -> R {
    let (mut arena, _, a, _, _) = setup()?;
    arena.step(|s| -> R {
        let x = s.lease(a)?;
        let cap = x.capacity();
        // SAFETY: the deliberate bug again, as foreign code that computed the
        // length wrong would make it: one element past the capacity, inside
        // the slab's guard bytes, referenced by nothing else.
        let too_long = unsafe { std::slice::from_raw_parts_mut(x.device_ptr(), cap + 1) };
        ops::mul_scalar(too_long, 2.0);
        // Found while the lease is still live, on demand.
        assert!(matches!(s.verify(), Err(Error::GuardViolation(_))));
        Ok(())
    })?;
    let found = arena.take_violations();
    assert!(
        !found.is_empty()
            && found
                .iter()
                .all(|v| v.buffer == "a" && v.overrun_bytes == 4)
    );
    Ok(())
}

#[test]
fn persistent_guards_are_checked_at_step_end() -> R {
    let (mut arena, w, _, _, _) = setup()?;
    arena.step(|s| -> R {
        let x = s.lease(w)?;
        let cap = x.capacity();
        drop(x);
        // A write through a stale pointer after the lease ended.
        let x = s.lease(w)?;
        let p = x.device_ptr();
        drop(x);
        // SAFETY: the slab outlives the step and the guard bytes past the
        // capacity are referenced by nothing; the write is the bug under test.
        unsafe { p.add(cap + 3).write(7.0) };
        Ok(())
    })?;
    let v = arena.take_violations();
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!((v[0].buffer.as_str(), v[0].overrun_bytes), ("w", 16));
    Ok(())
}

#[test]
fn stale_data_reads_as_nan_after_its_lifetime_ends() -> R {
    let (mut arena, w, a, b, bwd) = setup()?;
    arena.write(w, &[3.0; 100])?;
    arena.step(|s| -> R {
        let mut x = s.lease(a)?;
        x.as_mut_slice().fill(1.0);
        drop(x);
        s.enter(bwd)?;
        // `b` shares `a`'s bytes; what `a` left is poison, not its values.
        let y = s.lease(b)?;
        assert!(y.as_slice().iter().all(|v| v.is_nan()));
        // Persistent buffers keep their contents.
        assert_eq!(s.lease(w)?.as_slice(), &[3.0; 100]);
        Ok(())
    })?;
    arena.step(|s| -> R {
        // The next step sees poison, not the previous step's data.
        assert!(s.lease(a)?.as_slice().iter().all(|v| v.is_nan()));
        Ok(())
    })?;
    arena.verify()
}

#[test]
fn unchecked_arenas_keep_bytes_and_report_nothing() -> R {
    let mut p = Planner::new();
    let a = p.step::<f32>("a", &[16])?;
    let mut arena = Arena::new(HostDevice::new(), p.plan()?)?;
    assert!(!arena.options().checked);
    arena.step(|s| -> R {
        s.lease(a)?.as_mut_slice().fill(5.0);
        Ok(())
    })?;
    arena.step(|s| -> R {
        assert_eq!(s.lease(a)?.as_slice(), &[5.0; 16]);
        s.verify()
    })?;
    arena.verify()
}
