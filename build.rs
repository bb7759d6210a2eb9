//! Builds the CPU-shim versions of the AscendC kernels (`kernels/`) and the
//! simulated ACL runtime as shared libraries in `OUT_DIR`, when a C++
//! compiler is available.
//!
//! - `TENSOR_ARENA_SHIM_KERNELS`: the kernels of `kernels/ascend/` compiled
//!   unmodified against the shim's `kernel_operator.h`, exporting the
//!   `aclrtlaunch_ta_*` entry points the Ascend backend calls;
//! - `TENSOR_ARENA_SHIM_SELFTEST`: the shim's self-tests (rule-breaking
//!   kernels, unit tests, conversion exports);
//! - `TENSOR_ARENA_SIM_DIR`: a directory holding the simulated runtime
//!   (`kernels/sim/`) as `libascendcl.so`, with `libnnopbase.so` and
//!   `libopapi.so` linking to it, laid out like CANN's `lib64` so the
//!   backend's loader finds it as it would find CANN.
//!
//! Their paths reach the crate's tests as compile-time environment variables.
//! Without a working GNU-compatible C++ compiler, or when the C++ does not
//! compile, the build prints a warning and skips them (the compiler output
//! goes to `TENSOR_ARENA_SHIM_BUILD_LOG` / `TENSOR_ARENA_SIM_BUILD_LOG`): the
//! library itself needs no C++; only the shim and simulation tests do, and
//! they fail with that log.

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=kernels/ascend");
    println!("cargo:rerun-if-changed=kernels/shim");
    println!("cargo:rerun-if-changed=kernels/sim");

    let Some(out_dir) = env::var_os("OUT_DIR").map(PathBuf::from) else {
        println!("cargo:warning=OUT_DIR is not set; skipping the AscendC shim libraries");
        return;
    };
    let root = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let target = env::var("TARGET").unwrap_or_default();
    // The compiler the cc crate picks depends on these.
    for var in ["CXX", "HOST_CXX", "TARGET_CXX"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-env-changed=CXX_{target}");
    println!(
        "cargo:rerun-if-env-changed=CXX_{}",
        target.replace('-', "_")
    );
    let extension = if target.contains("apple") {
        "dylib"
    } else if target.contains("windows") {
        println!("cargo:warning=the AscendC shim libraries are not built on Windows");
        return;
    } else {
        "so"
    };

    let compiler = match cc::Build::new()
        .cpp(true)
        .cargo_metadata(false)
        .try_get_compiler()
    {
        Ok(tool) if tool.is_like_gnu() || tool.is_like_clang() => tool,
        Ok(tool) => {
            println!(
                "cargo:warning=C++ compiler {:?} is not GNU-compatible; skipping the AscendC shim libraries",
                tool.path()
            );
            return;
        }
        Err(e) => {
            println!(
                "cargo:warning=no C++ compiler found ({e}); skipping the AscendC shim libraries"
            );
            return;
        }
    };
    if !compiler
        .to_command()
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        println!(
            "cargo:warning=C++ compiler {:?} does not run; skipping the AscendC shim libraries (install g++ to run the shim tests)",
            compiler.path()
        );
        return;
    }

    let kernels = root.join("kernels");
    let sim_dir = out_dir.join("tasim");
    if let Err(e) = std::fs::create_dir_all(&sim_dir) {
        println!("cargo:warning=cannot create {}: {e}", sim_dir.display());
    }
    let sim = |f: &str| kernels.join("sim").join(f);
    let libs = [
        (
            "TENSOR_ARENA_SHIM_KERNELS",
            "TENSOR_ARENA_SHIM_BUILD_LOG",
            vec![kernels.join("shim/kernels_lib.cpp")],
            out_dir.join(format!("libtensor_arena_shim_kernels.{extension}")),
        ),
        (
            "TENSOR_ARENA_SHIM_SELFTEST",
            "TENSOR_ARENA_SHIM_BUILD_LOG",
            vec![kernels.join("shim/selftest/selftest_lib.cpp")],
            out_dir.join(format!("libtensor_arena_shim_selftest.{extension}")),
        ),
        (
            "TENSOR_ARENA_SIM_DIR",
            "TENSOR_ARENA_SIM_BUILD_LOG",
            vec![sim("runtime.cpp"), sim("aclnn.cpp"), sim("control.cpp")],
            // The name the backend's loader looks for first, on every
            // platform the simulation builds on.
            sim_dir.join("libascendcl.so"),
        ),
    ];
    // All compile at once.
    let jobs: Vec<(&str, &str, &Path, std::io::Result<Child>)> = libs
        .iter()
        .map(|(var, log_var, srcs, out)| {
            let child = shared_library(&compiler, &kernels, srcs, out).spawn();
            (*var, *log_var, out.as_path(), child)
        })
        .collect();
    for (var, log_var, out, child) in jobs {
        match child.and_then(|c| c.wait_with_output()) {
            Ok(o) if o.status.success() && var == "TENSOR_ARENA_SIM_DIR" => {
                match link_aclnn_names(out) {
                    Ok(()) => println!("cargo:rustc-env={var}={}", sim_dir.display()),
                    Err(e) => println!(
                        "cargo:warning=cannot link the aclnn library names to {}: {e}; the simulation tests will fail",
                        out.display()
                    ),
                }
            }
            Ok(o) if o.status.success() => {
                println!("cargo:rustc-env={var}={}", out.display());
            }
            Ok(o) => {
                let log = out.with_extension("log");
                let text = format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                );
                // Best effort: the warning below names the failure anyway.
                let _ = std::fs::write(&log, &text);
                println!(
                    "cargo:warning=building {} failed; its tests will fail (compiler output in {})",
                    out.display(),
                    log.display()
                );
                println!("cargo:rustc-env={log_var}={}", log.display());
            }
            Err(e) => {
                println!(
                    "cargo:warning=could not run the C++ compiler for {} ({e}); skipping it",
                    out.display()
                );
            }
        }
    }
}

/// Makes `libnnopbase.so` and `libopapi.so` in the simulated runtime's
/// directory name the same library as `runtime` (symbolic links: the loader
/// then hands out one instance, with one state).
fn link_aclnn_names(runtime: &Path) -> std::io::Result<()> {
    let dir = runtime.parent().unwrap_or(Path::new("."));
    for name in ["libnnopbase.so", "libopapi.so"] {
        let link = dir.join(name);
        if link.symlink_metadata().is_ok() {
            std::fs::remove_file(&link)?;
        }
        #[cfg(unix)]
        std::os::unix::fs::symlink("libascendcl.so", &link)?;
        #[cfg(not(unix))]
        std::fs::copy(runtime, &link).map(|_| ())?;
    }
    Ok(())
}

/// The compiler command for one shared library. `-O2` whatever the profile,
/// so the shim tests stay fast in debug builds; no FMA contraction, so float
/// results are the IEEE products the host reference computes.
fn shared_library(compiler: &cc::Tool, kernels: &Path, srcs: &[PathBuf], out: &Path) -> Command {
    let mut cmd = Command::new(compiler.path());
    cmd.args([
        "-std=c++17",
        "-O2",
        "-fPIC",
        "-shared",
        "-fvisibility=hidden",
    ])
    .args(["-ffp-contract=off", "-Wall", "-Wextra"])
    .arg("-I")
    .arg(kernels.join("shim"))
    .arg("-I")
    .arg(kernels.join("ascend"))
    .args(srcs)
    .arg("-o")
    .arg(out)
    // dlsym, for the shim's runtime launch hook (a stub in glibc >= 2.34).
    .arg("-ldl");
    cmd
}
