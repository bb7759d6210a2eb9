//! Device memory as CANN accounts for it: the slab leaves a headroom for the
//! runtime (and fails at startup, not mid-run, when it cannot), HUGE_FIRST
//! pages, devices shared by the threads of a process, memory attributes a
//! device lacks.

use super::plan_of;
use crate::support::sim::{self, OOM, devices, sim};
use tensor_arena::device::ascend::{
    AscendDevice, DEFAULT_HEADROOM, MallocPolicy, MemAttr, footprint,
};
use tensor_arena::{Arena, Available, Error, Planner, Result};

#[test]
fn the_crate_and_the_runtime_agree_on_what_an_allocation_takes() {
    let s = sim();
    let policies = [
        (MallocPolicy::HugeFirst, 0),
        (MallocPolicy::HugeOnly, 1),
        (MallocPolicy::NormalOnly, 2),
        (MallocPolicy::HugeFirstP2p, 3),
        (MallocPolicy::Huge1gOnly, 6),
    ];
    for size in [
        1usize,
        31,
        32,
        1000,
        1 << 20,
        (1 << 20) + 1,
        2 << 20,
        (2 << 20) - 64,
        5 << 20,
    ] {
        for (policy, code) in policies {
            assert_eq!(
                footprint(size, policy) as u64,
                s.charged(size as u64, code),
                "{size} bytes, {policy:?}"
            );
        }
    }
    // HUGE_FIRST: normal pages up to 1 MiB, 2 MiB pages above.
    assert_eq!(s.charged(1 << 20, 0), (1 << 20) + 32);
    assert_eq!(s.charged(2 << 20, 0), 4 << 20, "2 MiB + 32 takes two pages");
    assert_eq!(s.charged(5, 6), 1 << 30, "1 GiB pages, no padding");
    // An OR of policies is not one value: the default applies.
    assert_eq!(s.charged(100, 1 | 0x1000), 160);
    assert_eq!(s.charged(3 << 20, 1 | 0x1000), 4 << 20);
}

#[test]
fn a_slab_that_fits_the_free_memory_but_not_the_headroom_fails_at_startup() -> Result<()> {
    let s = sim();
    let id = devices::HEADROOM;
    s.reset_device(id);
    s.set_system_reserved(id, 0);
    // 100 MiB free; the plan's slab takes 48 MiB (on 2 MiB pages), which
    // fits, but not with the default 64 MiB headroom.
    s.set_capacity(id, 100 << 20);
    let dev = super::open(sim::config().device(id));
    assert_eq!(dev.headroom(), DEFAULT_HEADROOM);
    let plan = plan_of(47 << 20)?;
    let needed = footprint(plan.slab_bytes(), MallocPolicy::HugeFirst);
    assert_eq!(needed, 48 << 20);
    let e = Arena::new(dev.clone(), plan.clone()).unwrap_err();
    match &e {
        Error::OutOfMemory {
            needed: n,
            available: Available::FreeWithHeadroom { free, headroom },
            ..
        } => assert_eq!(
            (*n, *free, *headroom),
            (needed, 100 << 20, DEFAULT_HEADROOM)
        ),
        other => panic!("expected OutOfMemory with the headroom, got {other:?}"),
    }
    let text = e.to_string();
    for part in [
        "needs 50331648 bytes",
        "free 104857600 bytes",
        "headroom 67108864 bytes",
        "AscendConfig::headroom",
    ] {
        assert!(text.contains(part), "missing '{part}' in: {text}");
    }
    assert_eq!(s.counter("aclrtMalloc"), 0, "nothing was allocated");
    drop(dev);
    // With a smaller headroom it fits, and the device charges what the
    // crate computed.
    let dev = super::open(sim::config().device(id).headroom(16 << 20));
    let before = s.device_counter(id, "in_use");
    let arena = Arena::new(dev.clone(), plan)?;
    assert_eq!(s.device_counter(id, "in_use") - before, needed as u64);
    drop(arena);
    drop(dev);
    s.assert_clean();
    s.reset_device(id);
    Ok(())
}

#[test]
fn without_headroom_a_slab_that_takes_all_free_memory_fails_mid_run() -> Result<()> {
    let s = sim();
    let id = devices::EXHAUSTED;
    s.reset_device(id);
    s.set_system_reserved(id, 0);
    s.set_capacity(id, 4 << 20);
    let dev = super::open(sim::config().device(id).headroom(0));
    // A first arena runs the kernel probe.
    drop(Arena::new(dev.clone(), plan_of(4096)?)?);
    // 3 MiB on 2 MiB pages: exactly the device's 4 MiB.
    let mut p = Planner::new();
    let x = p.persistent::<f32>("x", &[3 << 18])?;
    let mut arena = Arena::new(dev.clone(), p.plan()?)?;
    assert_eq!(s.device_counter(id, "free"), 0);
    let e = arena.step(|st| st.lease(x)?.mul_scalar_(2.0)).unwrap_err();
    assert!(
        matches!(&e, Error::Acl { code: OOM, op, .. } if op.starts_with("aclrtlaunch_ta_mul_scalar")),
        "the launch stub's own buffer found no memory: {e}"
    );
    assert!(e.to_string().contains("out of memory"), "{e}");
    drop(arena);
    // The default headroom turns that into an error at startup.
    let dev2 = super::open(sim::config().device(id));
    let e = Arena::new(dev2.clone(), p.plan()?).unwrap_err();
    assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
    drop((dev, dev2));
    s.assert_clean();
    s.reset_device(id);
    Ok(())
}

#[test]
fn threads_that_set_the_same_device_share_its_memory_and_reference_count() -> Result<()> {
    let s = sim();
    let id = devices::SHARED;
    s.reset_device(id);
    let (held, seen) = std::sync::mpsc::channel::<()>();
    let (freed, done) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|scope| -> Result<()> {
        let holder = scope.spawn(move || -> Result<()> {
            sim().reset();
            let dev = AscendDevice::new(sim::config().device(id))?;
            let arena = Arena::new(dev.clone(), plan_of(8 << 20)?)?;
            held.send(()).unwrap_or_default();
            done.recv().unwrap_or_default();
            drop(arena);
            drop(dev);
            sim().assert_clean();
            Ok(())
        });
        seen.recv().unwrap_or_default();
        sim().reset();
        let dev = AscendDevice::new(sim::config().device(id))?;
        assert_eq!(
            s.device_counter(id, "refs"),
            2,
            "one context, counted per process"
        );
        let (free, total) = dev.mem_info()?;
        assert_eq!(
            (total - free) as u64,
            s.device_counter(id, "in_use"),
            "the other thread's slab is in this thread's view of the device"
        );
        assert!(total - free >= 8 << 20);
        assert_eq!(
            s.counter("live_allocations"),
            0,
            "none of them this thread's"
        );
        freed.send(()).unwrap_or_default();
        holder
            .join()
            .unwrap_or_else(|_| panic!("the holding thread panicked"))?;
        assert_eq!(dev.mem_info()?.0, free + (total - free));
        drop(dev);
        assert_eq!(s.device_counter(id, "refs"), 0);
        Ok(())
    })?;
    s.assert_clean();
    Ok(())
}

#[test]
fn a_memory_attribute_the_device_lacks_is_named_not_called_out_of_memory() -> Result<()> {
    let s = sim();
    let dev = super::open(sim::config().mem_attr(MemAttr::Ddr));
    let e = dev.mem_info().unwrap_err();
    assert!(
        matches!(
            &e,
            Error::MemoryAttributeUnsupported {
                attr: "ACL_DDR_MEM",
                ..
            }
        ),
        "{e}"
    );
    let e = Arena::new(dev.clone(), plan_of(4096)?).unwrap_err();
    assert!(
        e.to_string()
            .contains("memory attribute not supported by this device"),
        "{e}"
    );
    assert_eq!(s.counter("mem_info_attr_0"), 2);
    drop(dev);
    s.assert_clean();
    Ok(())
}
