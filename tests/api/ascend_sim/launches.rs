//! Kernel launches as CANN's generated stubs make them: a library whose
//! registration failed (built for another SoC) answers every launch with
//! success and does nothing, which the device's probe turns into a typed
//! error; registered launches allocate a small buffer of the runtime's own.

use super::plan_of;
use crate::support::sim::{self, sim};
use tensor_arena::{Arena, Error, Planner, Result};

/// The variable the simulated launch stubs read when they load.
const UNREGISTERED: &str = "TASIM_UNREGISTERED_KERNELS";

fn assert_not_registered(e: &Error, built_for: Option<&str>) {
    match e {
        Error::KernelsNotRegistered {
            built_for: b,
            device_soc,
            symbol,
            ..
        } => {
            assert_eq!(b.as_deref(), built_for, "{e}");
            assert_eq!(device_soc.as_deref(), Some("Ascend910B2"), "{e}");
            assert_eq!(*symbol, "aclrtlaunch_ta_mul_scalar_f32");
        }
        other => panic!("expected KernelsNotRegistered, got {other:?}"),
    }
    let text = e.to_string();
    for part in ["not registered", "npu-smi info", "-DSOC_VERSION="] {
        assert!(text.contains(part), "missing '{part}' in: {text}");
    }
}

#[test]
fn a_kernel_library_built_for_another_soc_fails_at_startup_not_silently() -> Result<()> {
    let s = sim();
    let dev = super::open(sim::config().kernel_lib(sim::foreign_kernel_lib()));
    let e = Arena::new(dev.clone(), plan_of(4096)?).unwrap_err();
    assert_not_registered(&e, Some("ascend310p3"));
    assert!(e.to_string().contains("another SoC family"), "{e}");
    assert!(
        e.to_string()
            .contains(&sim::foreign_kernel_lib().display().to_string())
    );
    assert_eq!(
        s.counter("kernel_launches"),
        0,
        "the stub returned 0 without reaching the runtime"
    );
    assert_eq!((s.counter("aclrtMalloc"), s.counter("aclrtFree")), (1, 1));
    drop(dev);
    s.assert_clean();
    Ok(())
}

#[test]
fn the_unregistered_kernels_variable_reproduces_a_failed_registration() {
    if std::env::var_os(UNREGISTERED).is_some() {
        // In the child process the launch stubs loaded with the variable
        // set: the default kernel library does not register.
        let dev = super::open(sim::config());
        let e =
            Arena::new(dev.clone(), plan_of(4096).unwrap_or_else(|e| panic!("{e}"))).unwrap_err();
        assert_not_registered(&e, Some("ascend910b2"));
        assert!(e.to_string().contains("the same SoC family"), "{e}");
        println!("child error: {e}");
        drop(dev);
        sim().assert_clean();
        return;
    }
    // The variable is read when the kernel library loads, once per process:
    // run this test again in a process of its own with it set.
    let exe = std::env::current_exe().unwrap_or_default();
    let out = std::process::Command::new(exe)
        .args([
            "the_unregistered_kernels_variable_reproduces_a_failed_registration",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(UNREGISTERED, "1")
        .output()
        .unwrap_or_else(|e| panic!("cannot run the test binary again: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("1 passed"), "{stdout}");
    assert!(
        stdout.contains("[ERROR] the socversion"),
        "the stub printed its registration error at the launch, as CANN's do:\n{stdout}"
    );
    assert!(
        stdout.contains("child error:") && stdout.contains("not registered"),
        "{stdout}"
    );
}

#[test]
fn launch_stubs_allocate_the_runtimes_own_memory_apart_from_the_slab() -> Result<()> {
    let s = sim();
    let dev = super::open(sim::config());
    let mut p = Planner::new();
    let x = p.step::<f32>("x", &[1000])?;
    let mut arena = Arena::new(dev.clone(), p.plan()?)?;
    let (launches, mallocs) = (s.counter("kernel_launches"), s.counter("launch_mallocs"));
    for _ in 0..5 {
        arena.step(|st| {
            let mut l = st.lease(x)?;
            l.bernoulli_(0.5)?;
            l.mul_scalar_(3.0)
        })?;
    }
    assert_eq!(s.counter("kernel_launches") - launches, 10);
    assert_eq!(s.counter("launch_mallocs") - mallocs, 10);
    assert_eq!(s.counter("launch_mallocs"), s.counter("launch_frees"));
    assert_eq!(
        s.counter("launch_malloc_bytes"),
        64 * s.counter("launch_mallocs"),
        "8 bytes, charged 64 each"
    );
    assert_eq!(
        (s.counter("aclrtMalloc"), arena.stats().device.alloc_calls),
        (1, 1),
        "the application's allocations: the slab only"
    );
    drop(arena);
    drop(dev);
    s.assert_clean();
    Ok(())
}

#[test]
fn a_failed_launch_buffer_is_an_error_of_that_launch() -> Result<()> {
    let s = sim();
    let dev = super::open(sim::config());
    let mut p = Planner::new();
    let x = p.step::<f32>("x", &[64])?;
    let mut arena = Arena::new(dev.clone(), p.plan()?)?;
    s.fail_launch_malloc(1, sim::OOM);
    let e = arena.step(|st| st.lease(x)?.mul_scalar_(2.0)).unwrap_err();
    assert!(
        matches!(&e, Error::Acl { code: sim::OOM, op, .. } if op == "aclrtlaunch_ta_mul_scalar_f32"),
        "{e}"
    );
    arena.step(|st| st.lease(x)?.mul_scalar_(2.0))?;
    drop(arena);
    drop(dev);
    s.assert_clean();
    Ok(())
}
