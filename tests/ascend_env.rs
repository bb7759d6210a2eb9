//! The Ascend backend found the way a CANN installation is found:
//! `AscendConfig::from_env()` with `ASCEND_HOME_PATH` pointing at a toolkit
//! whose `lib64` holds the (simulated) runtime and aclnn libraries, and
//! `TENSOR_ARENA_KERNEL_LIB` naming the kernel library. Its own test binary,
//! with one test, because it sets process environment variables.

#![cfg(unix)]

mod support;

use support::sim::{self, sim};
use tensor_arena::device::ascend::{AscendConfig, AscendDevice};
use tensor_arena::{Arena, Planner, Result};

#[test]
fn ascend_home_path_and_the_kernel_variable_are_honoured() -> Result<()> {
    let root = std::env::temp_dir().join(format!("tensor-arena-toolkit-{}", std::process::id()));
    let lib64 = root.join("lib64");
    std::fs::create_dir_all(&lib64).map_err(|e| tensor_arena::Error::io("create", &lib64, &e))?;
    for (name, target) in [
        ("libascendcl.so", "libascendcl.so"),
        ("libnnopbase.so", "libascendcl.so"),
        ("libopapi_math.so", "libopapi_math.so"),
        ("libopapi_nn.so", "libopapi_nn.so"),
    ] {
        let link = lib64.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(sim::dir().join(target), &link)
            .map_err(|e| tensor_arena::Error::io("link", &link, &e))?;
    }
    // SAFETY: this test binary runs this one test on one thread; nothing
    // else reads or writes the environment meanwhile.
    unsafe {
        std::env::set_var("ASCEND_HOME_PATH", &root);
        std::env::remove_var("ASCEND_TOOLKIT_HOME");
        std::env::remove_var(tensor_arena::device::ascend::ENV_ACL_LIB);
        std::env::set_var(
            tensor_arena::device::ascend::ENV_KERNEL_LIB,
            sim::kernel_lib(),
        );
        std::env::set_var(
            tensor_arena::device::ascend::ENV_MALLOC_POLICY,
            "normal_only",
        );
        std::env::set_var(tensor_arena::device::ascend::ENV_HEADROOM, "32MiB");
    }
    sim().reset();
    let cfg = AscendConfig::from_env()?;
    assert_eq!(cfg.headroom, 32 << 20, "TENSOR_ARENA_ASCEND_HEADROOM=32MiB");
    let dev = AscendDevice::new(cfg)?;
    assert_eq!(dev.runtime().library_path(), lib64.join("libascendcl.so"));
    assert!(dev.runtime().has_aclnn());
    assert_eq!(
        dev.runtime().operator_library("aclnnMm"),
        Some(lib64.join("libopapi_nn.so").as_path()),
        "the operator libraries next to the runtime"
    );
    assert_eq!(dev.headroom(), 32 << 20);
    let mut p = Planner::new();
    let x = p.step::<f32>("x", &[256])?;
    let mut arena = Arena::new(dev.clone(), p.plan()?)?;
    arena.step(|s| s.lease(x)?.bernoulli_(0.5).map(|_| ()))?;
    assert_eq!(
        sim().counter("kernel_launches"),
        2,
        "the device's probe, then bernoulli_"
    );
    assert_eq!(
        sim().counter("malloc_policy_2"),
        1,
        "TENSOR_ARENA_MALLOC_POLICY=normal_only"
    );
    drop(arena);
    drop(dev);
    sim().assert_clean();
    // A bad setting is an error that names the variable.
    // SAFETY: as above.
    unsafe { std::env::set_var(tensor_arena::device::ascend::ENV_DEVICE, "first") };
    let e = AscendConfig::from_env().unwrap_err().to_string();
    assert!(
        e.contains("TENSOR_ARENA_ASCEND_DEVICE") && e.contains("first"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&root);
    Ok(())
}
