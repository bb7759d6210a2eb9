//! Builds the CPU-shim versions of the AscendC kernels (`kernels/`) as
//! shared libraries in `OUT_DIR`, when a C++ compiler is available.
//!
//! - `TENSOR_ARENA_SHIM_KERNELS`: the kernels of `kernels/ascend/` compiled
//!   unmodified against the shim's `kernel_operator.h`, exporting the
//!   `aclrtlaunch_ta_*` entry points the Ascend backend calls;
//! - `TENSOR_ARENA_SHIM_SELFTEST`: the shim's self-tests (rule-breaking
//!   kernels, unit tests, conversion exports).
//!
//! Their paths reach the crate's tests as compile-time environment variables.
//! Without a working GNU-compatible C++ compiler, or when the C++ does not
//! compile, the build prints a warning and skips them (the compiler output
//! goes to `TENSOR_ARENA_SHIM_BUILD_LOG`): the library itself needs no C++;
//! only the shim tests do, and they fail with that log.

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=kernels/ascend");
    println!("cargo:rerun-if-changed=kernels/shim");

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
    let libs = [
        (
            "TENSOR_ARENA_SHIM_KERNELS",
            kernels.join("shim/kernels_lib.cpp"),
            out_dir.join(format!("libtensor_arena_shim_kernels.{extension}")),
        ),
        (
            "TENSOR_ARENA_SHIM_SELFTEST",
            kernels.join("shim/selftest/selftest_lib.cpp"),
            out_dir.join(format!("libtensor_arena_shim_selftest.{extension}")),
        ),
    ];
    // Both compile at once: each is one translation unit.
    let jobs: Vec<(&str, &Path, std::io::Result<Child>)> = libs
        .iter()
        .map(|(var, src, out)| {
            let child = shared_library(&compiler, &kernels, src, out).spawn();
            (*var, out.as_path(), child)
        })
        .collect();
    for (var, out, child) in jobs {
        match child.and_then(|c| c.wait_with_output()) {
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
                    "cargo:warning=building {} failed; the shim tests will fail (compiler output in {})",
                    out.display(),
                    log.display()
                );
                println!(
                    "cargo:rustc-env=TENSOR_ARENA_SHIM_BUILD_LOG={}",
                    log.display()
                );
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

/// The compiler command for one shared library. `-O2` whatever the profile,
/// so the shim tests stay fast in debug builds; no FMA contraction, so float
/// results are the IEEE products the host reference computes.
fn shared_library(compiler: &cc::Tool, kernels: &Path, src: &Path, out: &Path) -> Command {
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
    .arg(src)
    .arg("-o")
    .arg(out);
    cmd
}
