//! The arena through the public API: leases, views, phases, errors.

use ndarray::{Ix2, Ix3, IxDyn};
use tensor_arena::{
    Arena, Available, BufferSpec, Error, HostDevice, Lifetime, Planner, Rounding, bf16, f16,
};

type R = tensor_arena::Result<()>;

#[test]
fn persistent_data_survives_steps_and_scoped_buffers_share_bytes() -> R {
    let mut p = Planner::new();
    let fwd = p.phase("forward")?;
    let bwd = p.phase("backward")?;
    let w = p.persistent::<f32>("w", &[16])?;
    let a = p.span::<f32>("a", &[1024], fwd, fwd)?;
    let b = p.span::<f32>("b", &[1024], bwd, bwd)?;
    let plan = p.plan()?;
    assert_eq!(plan.buffer(a.id())?.offset(), plan.buffer(b.id())?.offset());
    let mut arena = Arena::new(HostDevice::new(), plan)?;
    let weights: Vec<f32> = (0..16).map(|i| i as f32).collect();
    arena.write(w, &weights)?;
    for step in 0..3 {
        arena.step(|s| -> R {
            let w = s.lease(w)?;
            let mut a = s.lease(a)?;
            a.as_mut_slice().fill(step as f32);
            drop(a);
            s.enter(bwd)?;
            let mut b = s.lease(b)?;
            // b reuses a's bytes: it sees what a left behind.
            assert_eq!(b.as_slice()[0], step as f32);
            b.as_mut_slice().fill(-1.0);
            assert_eq!(w.as_slice(), &weights[..]);
            Ok(())
        })?;
    }
    let mut back = vec![0.0; 16];
    arena.read(w, &mut back)?;
    assert_eq!(back, weights);
    let st = arena.stats();
    assert_eq!((st.steps, st.total_leases, st.total_releases), (3, 9, 9));
    assert_eq!(st.device.alloc_calls, 1);
    assert_eq!(st.live_leases, 0);
    Ok(())
}

#[test]
fn views_reshape_within_capacity() -> R {
    let mut p = Planner::new();
    let x = p.declare::<f32>(BufferSpec::of::<f32>("x", &[8, 30]).rounding(Rounding::Tile16))?;
    let mut arena = Arena::new(HostDevice::new(), p.plan()?)?;
    arena.step(|s| -> R {
        let mut x = s.lease(x)?;
        assert_eq!(x.shape(), &[8, 30]);
        assert_eq!(x.padded_shape(), &[16, 32]);
        assert_eq!(x.capacity(), 512);
        x.set_shape(&[5, 30])?;
        {
            let mut v = x.view_mut::<Ix2>()?;
            v[[4, 29]] = 7.0;
        }
        assert_eq!(x.as_slice()[4 * 30 + 29], 7.0);
        x.set_shape(&[2, 4, 64])?;
        assert_eq!(x.view::<Ix3>()?.dim(), (2, 4, 64));
        assert_eq!(x.view::<IxDyn>()?.ndim(), 3);
        assert!(matches!(x.view::<Ix2>(), Err(Error::InvalidView { .. })));
        let err = x.set_shape(&[17, 32]).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("'x'") && msg.contains("[17, 32]") && msg.contains("512"),
            "{msg}"
        );
        assert!(matches!(x.set_shape(&[]), Err(Error::InvalidView { .. })));
        assert!(matches!(
            x.set_shape(&[1; 9]),
            Err(Error::InvalidView { .. })
        ));
        assert!(matches!(
            x.set_shape(&[usize::MAX, 3]),
            Err(Error::InvalidView { .. })
        ));
        // A zero-sized view is legal: an empty batch.
        x.set_shape(&[0, 30])?;
        assert!(x.is_empty());
        Ok(())
    })
}

#[test]
fn double_lease_and_overlap_are_errors_not_aliasing() -> R {
    let mut p = Planner::new();
    let f = p.phase("f")?;
    let b = p.phase("b")?;
    let x = p.span::<f32>("x", &[256], f, f)?;
    let y = p.span::<f32>("y", &[256], b, b)?;
    let mut arena = Arena::new(HostDevice::new(), p.plan()?)?;
    arena.step(|s| -> R {
        let first = s.lease(x)?;
        assert_eq!(
            s.lease(x).unwrap_err(),
            Error::AlreadyLeased { buffer: "x".into() }
        );
        // y is outside its phase.
        assert!(matches!(s.lease(y), Err(Error::OutsidePhase { .. })));
        // Entering b with x still leased would let y alias it.
        assert!(matches!(s.enter(b), Err(Error::LeaseOutlivesSpan { .. })));
        drop(first);
        s.enter(b)?;
        let _y = s.lease(y)?;
        // Phases only move forward.
        assert!(matches!(s.enter(f), Err(Error::PhaseOrder { .. })));
        Ok(())
    })?;
    // A new step starts in the first phase again.
    arena.step(|s| -> R {
        assert_eq!(s.phase(), "f");
        s.lease(x).map(drop)
    })
}

#[test]
fn a_forgotten_lease_blocks_its_bytes_until_the_step_ends() -> R {
    let mut p = Planner::new();
    let a = p.phase("a")?;
    let b = p.phase("b")?;
    let early = p.span::<u8>("early", &[4096], a, a)?;
    let late = p.span::<u8>("late", &[4096], b, b)?;
    let plan = p.plan()?;
    assert_eq!(
        plan.buffer(early.id())?.offset(),
        plan.buffer(late.id())?.offset()
    );
    let mut arena = Arena::new(HostDevice::new(), plan)?;
    let guard = arena.begin_step();
    let e = guard.lease(early)?;
    // Forgetting the lease keeps its bytes marked live for the rest of the step.
    std::mem::forget(e);
    assert!(matches!(
        guard.enter(b),
        Err(Error::LeaseOutlivesSpan { .. })
    ));
    drop(guard);
    // The next step starts clean.
    let guard = arena.begin_step();
    guard.enter(b)?;
    let _late = guard.lease(late)?;
    Ok(())
}

#[test]
fn handles_from_elsewhere_are_rejected() -> R {
    let mut p1 = Planner::new();
    let x1 = p1.step::<f32>("x", &[4])?;
    let mut p2 = Planner::new();
    let x2 = p2.step::<f32>("x", &[4])?;
    let ph2 = p2.phase("other")?;
    let mut arena = Arena::new(HostDevice::new(), p1.plan()?)?;
    arena.step(|s| -> R {
        assert!(matches!(s.lease(x2), Err(Error::ForeignHandle { .. })));
        assert!(matches!(s.enter(ph2), Err(Error::ForeignPhase { .. })));
        assert!(matches!(
            s.lease_dyn::<f16>(x1.id()),
            Err(Error::DTypeMismatch {
                declared: "f32",
                requested: "f16",
                ..
            })
        ));
        s.lease_dyn::<f32>(x1.id()).map(drop)
    })?;
    assert!(matches!(
        arena.write(x2, &[1.0]),
        Err(Error::ForeignHandle { .. })
    ));
    assert!(matches!(
        arena.write_prefix(x1, &[0.0; 17]),
        Err(Error::ViewTooLarge { .. })
    ));
    Ok(())
}

#[test]
fn oversized_plan_fails_at_reservation_with_needed_and_free() -> R {
    let mut p = Planner::new();
    p.step::<f32>("big", &[1 << 20])?;
    let plan = p.plan()?;
    let needed = plan.slab_bytes();
    let dev = HostDevice::with_limit(1 << 20);
    let err = Arena::new(dev.clone(), plan).unwrap_err();
    assert_eq!(
        err,
        Error::OutOfMemory {
            device: "host".into(),
            needed,
            available: Available::Free(1 << 20)
        }
    );
    assert!(err.to_string().contains(&needed.to_string()));
    use tensor_arena::Device;
    assert_eq!(dev.counters().alloc_calls, 0, "nothing allocated");
    Ok(())
}

#[test]
fn every_element_type_plans_and_copies() -> R {
    let mut p = Planner::new();
    let a = p.step::<f32>("f32", &[3])?;
    let b = p.step::<f16>("f16", &[3])?;
    let c = p.step::<bf16>("bf16", &[3])?;
    let d = p.step::<i32>("i32", &[3])?;
    let e = p.declare::<u8>(BufferSpec::of::<u8>("u8", &[3]).lifetime(Lifetime::Step))?;
    let mut arena = Arena::new(HostDevice::new(), p.plan()?)?;
    arena.step(|s| -> R {
        let mut l = s.lease(b)?;
        l.copy_from_host(&[f16::ONE, f16::ZERO, f16::NEG_ONE])?;
        let mut out = [f16::ZERO; 3];
        l.copy_to_host(&mut out)?;
        assert_eq!(out, [f16::ONE, f16::ZERO, f16::NEG_ONE]);
        assert!(matches!(
            l.copy_to_host(&mut [f16::ZERO; 2]),
            Err(Error::LengthMismatch { .. })
        ));
        s.lease(a)?.as_mut_slice().fill(1.5);
        s.lease(c)?.as_mut_slice().fill(bf16::ONE);
        s.lease(d)?.as_mut_slice().fill(-3);
        s.lease(e)?.as_mut_slice().fill(255);
        Ok(())
    })
}

#[test]
fn memory_summary_reports_the_slab_and_leases() -> R {
    let mut p = Planner::new();
    let w = p.persistent::<f32>("w", &[256])?;
    let x = p.step::<f32>("x", &[1000])?;
    let mut arena = Arena::new(HostDevice::new(), p.plan()?)?;
    for _ in 0..4 {
        arena.step(|s| -> R {
            drop(s.lease(w)?);
            drop(s.lease(x)?);
            Ok(())
        })?;
    }
    let text = arena.memory_summary();
    assert!(text.contains("Device reserved memory"), "{text}");
    assert!(text.contains("steps: 4"), "{text}");
    // Leases are called leases, not allocations: 8 of them, and 1 device
    // allocation.
    let row = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("| {name}")))
            .map(|l| l.split('|').map(str::trim).collect::<Vec<_>>())
    };
    assert_eq!(
        row("Leases (not allocations)").map(|r| r[2..6].to_vec()),
        Some(vec!["0", "1", "8", "8"]),
        "{text}"
    );
    assert!(
        !text.contains("Allocations") && !text.contains("Active allocs"),
        "{text}"
    );
    assert!(text.contains("device allocation calls: 1"), "{text}");
    // The persistent buffer is allocated though not leased now.
    let plan = arena.plan();
    let (pw, px) = (plan.buffer(w.id())?.size(), plan.buffer(x.id())?.size());
    let stats = arena.stats();
    assert_eq!(stats.persistent_bytes, pw as u64);
    assert_eq!(stats.persistent_buffers, 1);
    assert_eq!(stats.active_bytes, 0);
    assert_eq!(stats.peak_active_bytes, px as u64);
    assert_eq!(stats.leased_bytes, 4 * px as u64, "step-scoped leases only");
    let allocated = row("Allocated memory").unwrap_or_default();
    assert_eq!(pw, 1536);
    assert_eq!(allocated.get(2).copied(), Some("1.5 KiB"), "{text}");
    Ok(())
}

#[test]
fn memory_summary_explains_reserved_beyond_the_slab() -> R {
    // 3 MiB of plan: the host backs it with two 2 MiB pages.
    let mut p = Planner::new();
    p.step::<u8>("x", &[3 << 20])?;
    let plan = p.plan()?;
    let slab = plan.slab_bytes() as u64;
    let arena = Arena::new(HostDevice::new(), plan)?;
    let stats = arena.stats();
    assert_eq!(stats.slab_bytes, slab);
    assert_eq!(stats.reserved_bytes, 4 << 20);
    let text = arena.memory_summary();
    assert!(
        text.contains("slab 3.0 MiB (the plan); reserved 4.0 MiB:"),
        "{text}"
    );
    assert!(text.contains("2 MiB pages"), "{text}");
    let widths: Vec<usize> = text.lines().map(|l| l.chars().count()).collect();
    assert!(widths.iter().all(|&w| w == widths[0]), "{text}");
    // A small slab is reserved as is.
    let mut p = Planner::new();
    p.step::<u8>("y", &[100])?;
    let small = Arena::new(HostDevice::new(), p.plan()?)?;
    assert!(small.memory_summary().contains("reserved as is"));
    Ok(())
}

#[test]
fn whole_buffer_copies_must_match_the_shape() -> R {
    let mut p = Planner::new();
    let w = p.persistent::<f32>("w", &[64, 64])?;
    let b = p.persistent::<f32>("b", &[10])?;
    let mut arena = Arena::new(HostDevice::new(), p.plan()?)?;
    // The footgun: 10 values into a 64x64 buffer.
    let e = arena.write(w, &[1.0; 10]).unwrap_err();
    assert_eq!(
        e,
        Error::CopyLength {
            op: "write",
            buffer: "w".into(),
            given: 10,
            expected: 4096,
            shape: vec![64, 64],
        }
    );
    assert!(e.to_string().contains("write_prefix"), "{e}");
    // The declared shape, not the padded capacity (b pads to 16).
    assert!(matches!(
        arena.write(b, &[0.0; 16]),
        Err(Error::CopyLength { .. })
    ));
    arena.write(b, &[0.5; 10])?;
    arena.write(w, &vec![1.0; 4096])?;
    // Partial copies on purpose, up to the capacity.
    arena.write_prefix(w, &[2.0; 10])?;
    arena.write_prefix(b, &[0.25; 16])?;
    assert!(matches!(
        arena.write_prefix(b, &[0.0; 17]),
        Err(Error::ViewTooLarge { .. })
    ));
    let mut head = [0.0; 12];
    arena.read_prefix(w, &mut head)?;
    assert_eq!(head[..10], [2.0; 10]);
    assert_eq!(head[10..], [1.0; 2]);
    assert!(matches!(
        arena.read(w, &mut [0.0; 12]),
        Err(Error::CopyLength { op: "read", .. })
    ));
    let mut all = vec![0.0; 10];
    arena.read(b, &mut all)?;
    assert_eq!(all, [0.25; 10]);
    Ok(())
}
