//! Builds the CPU-shim versions of the AscendC kernels (`kernels/`) and the
//! simulated ACL runtime as shared libraries in `OUT_DIR`, when a C++
//! compiler is available.
//!
//! - `TENSOR_ARENA_SHIM_KERNELS`: the kernels of `kernels/ascend/` compiled
//!   unmodified against the shim's `kernel_operator.h`, exporting the
//!   `aclrtlaunch_ta_*` entry points the Ascend backend calls;
//! - `TENSOR_ARENA_SHIM_SELFTEST`: the shim's self-tests (rule-breaking
//!   kernels, unit tests, conversion exports);
//! - `TENSOR_ARENA_SHIM_CXX`: the C++ compiler used, for the tests that
//!   check what the shim's declarations refuse to compile;
//! - `TENSOR_ARENA_SIM_DIR`: a directory laid out like CANN's `lib64`
//!   holding the simulated runtime (`kernels/sim/`): `libascendcl.so`,
//!   `libnnopbase.so`, the per-repository operator libraries
//!   `libopapi_math.so` and `libopapi_nn.so`, and the kernel library
//!   `libtensor_arena_kernels.so` (launch stubs in front of the shim
//!   kernels), so the backend's loader finds it as it would find CANN;
//!   `TENSOR_ARENA_SIM_COMBINED_DIR` the same with the combined
//!   `libopapi.so`; `TENSOR_ARENA_SIM_FOREIGN_KERNELS` a kernel library
//!   built for another SoC (see `Simulation`).
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

    // The compile-fail checks of the shim's declarations run it again.
    println!(
        "cargo:rustc-env=TENSOR_ARENA_SHIM_CXX={}",
        compiler.path().display()
    );

    let kernels = root.join("kernels");
    let shim_kernels = out_dir.join(format!("libtensor_arena_shim_kernels.{extension}"));
    let shim = [
        (
            "TENSOR_ARENA_SHIM_KERNELS",
            vec![kernels.join("shim/kernels_lib.cpp")],
            shim_kernels.clone(),
        ),
        (
            "TENSOR_ARENA_SHIM_SELFTEST",
            vec![kernels.join("shim/selftest/selftest_lib.cpp")],
            out_dir.join(format!("libtensor_arena_shim_selftest.{extension}")),
        ),
    ];
    // The shim libraries compile while the simulation does.
    let jobs: Vec<(&str, &Path, std::io::Result<Child>)> = shim
        .iter()
        .map(|(var, srcs, out)| {
            let child = shared_library(&compiler, &kernels, srcs, out).spawn();
            (*var, out.as_path(), child)
        })
        .collect();
    let sim = Simulation::new(&out_dir, &kernels, &shim_kernels);
    match sim.build(&compiler) {
        Ok(()) => sim.export(),
        Err(failure) => failure.report("TENSOR_ARENA_SIM_BUILD_LOG"),
    }
    for (var, out, child) in jobs {
        match finish(out, child) {
            Ok(()) => println!("cargo:rustc-env={var}={}", out.display()),
            Err(failure) => failure.report("TENSOR_ARENA_SHIM_BUILD_LOG"),
        }
    }
}

/// Why a library did not build.
enum Failure {
    /// The compiler ran and failed; its output is in the log file.
    Compiler { out: PathBuf, log: PathBuf },
    /// Something else (the compiler did not start, a link could not be made).
    Other(String),
}

impl Failure {
    fn report(&self, log_var: &str) {
        match self {
            Failure::Compiler { out, log } => {
                println!(
                    "cargo:warning=building {} failed; its tests will fail (compiler output in {})",
                    out.display(),
                    log.display()
                );
                println!("cargo:rustc-env={log_var}={}", log.display());
            }
            Failure::Other(why) => {
                println!("cargo:warning={why}; the tests that need it will fail");
            }
        }
    }
}

/// Waits for one compiler run; on failure its output goes next to `out`.
fn finish(out: &Path, child: std::io::Result<Child>) -> Result<(), Failure> {
    match child.and_then(|c| c.wait_with_output()) {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => {
            let log = out.with_extension("log");
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            // Best effort: the warning names the failure anyway.
            let _ = std::fs::write(&log, &text);
            Err(Failure::Compiler {
                out: out.to_path_buf(),
                log,
            })
        }
        Err(e) => Err(Failure::Other(format!(
            "could not run the C++ compiler for {} ({e})",
            out.display()
        ))),
    }
}

/// The simulated runtime (`kernels/sim/`) in the two layouts CANN installs
/// its operator libraries in, plus kernel libraries in front of the shim
/// kernels:
///
/// - `tasim/`: `libascendcl.so` (the runtime, with libnnopbase's objects;
///   `libnnopbase.so` names the same library), `libopapi_math.so` and
///   `libopapi_nn.so` (the ops-math and ops-nn operators, each only its
///   own), and `libtensor_arena_kernels.so` (the launch stubs, built for
///   ascend910b2);
/// - `tasim-combined/`: the same runtime and kernel library, and one
///   `libopapi.so` with every operator (the combined library CANN is
///   retiring);
/// - `tasim-310p/libtensor_arena_kernels.so`: the launch stubs built for
///   another SoC (ascend310p3), whose registration fails on the simulated
///   910B.
struct Simulation {
    src: PathBuf,
    kernels: PathBuf,
    split: PathBuf,
    combined: PathBuf,
    foreign: PathBuf,
    shim_kernels: PathBuf,
}

impl Simulation {
    fn new(out_dir: &Path, kernels: &Path, shim_kernels: &Path) -> Simulation {
        Simulation {
            src: kernels.join("sim"),
            kernels: kernels.to_path_buf(),
            split: out_dir.join("tasim"),
            combined: out_dir.join("tasim-combined"),
            foreign: out_dir.join("tasim-310p"),
            shim_kernels: shim_kernels.to_path_buf(),
        }
    }

    fn build(&self, compiler: &cc::Tool) -> Result<(), Failure> {
        for dir in [&self.split, &self.combined, &self.foreign] {
            std::fs::create_dir_all(dir)
                .map_err(|e| Failure::Other(format!("cannot create {}: {e}", dir.display())))?;
        }
        // An older build linked the combined name into the split layout.
        let stale = self.split.join("libopapi.so");
        if stale.symlink_metadata().is_ok() {
            std::fs::remove_file(&stale)
                .map_err(|e| Failure::Other(format!("cannot remove {}: {e}", stale.display())))?;
        }
        let src = |f: &str| self.src.join(f);
        let runtime = self.split.join("libascendcl.so");
        let mut cmd = shared_library(
            compiler,
            &self.kernels,
            &[
                src("runtime.cpp"),
                src("control.cpp"),
                src("nnopbase.cpp"),
                src("vmm.cpp"),
            ],
            &runtime,
        );
        soname(&mut cmd, "libascendcl.so");
        finish(&runtime, cmd.spawn())?;
        link(&self.split, "libnnopbase.so", "libascendcl.so")?;
        let shared_runtime = Path::new("..").join("tasim").join("libascendcl.so");
        link(&self.combined, "libascendcl.so", &shared_runtime)?;
        link(&self.combined, "libnnopbase.so", &shared_runtime)?;
        link(
            &self.combined,
            "libtensor_arena_kernels.so",
            Path::new("..")
                .join("tasim")
                .join("libtensor_arena_kernels.so"),
        )?;
        let stub = |soc: &str| {
            vec![
                format!("-DTASIM_DEVICE_BINARY=\"{}\"", self.shim_kernels.display()),
                format!("-DTASIM_COMPILE_SOC=\"{soc}\""),
                format!("-DTASIM_SECTION=\".ascend.kernel.{soc}.tensor_arena_kernels\""),
            ]
        };
        let parts: [(&Path, Vec<PathBuf>, Vec<String>); 5] = [
            (&self.split, vec![src("ops_math.cpp")], vec![]),
            (&self.split, vec![src("ops_nn.cpp")], vec![]),
            (
                &self.combined,
                vec![src("ops_math.cpp"), src("ops_nn.cpp")],
                vec![],
            ),
            (
                &self.split,
                vec![src("kernel_stub.cpp")],
                stub("ascend910b2"),
            ),
            (
                &self.foreign,
                vec![src("kernel_stub.cpp")],
                stub("ascend310p3"),
            ),
        ];
        let names = [
            "libopapi_math.so",
            "libopapi_nn.so",
            "libopapi.so",
            "libtensor_arena_kernels.so",
            "libtensor_arena_kernels.so",
        ];
        let jobs: Vec<(PathBuf, std::io::Result<Child>)> = parts
            .iter()
            .zip(names)
            .map(|((dir, srcs, defines), name)| {
                let out = dir.join(name);
                let mut cmd = shared_library(compiler, &self.kernels, srcs, &out);
                cmd.args(defines);
                against_runtime(&mut cmd);
                let child = cmd.spawn();
                (out, child)
            })
            .collect();
        let mut first_failure = None;
        for (out, child) in jobs {
            if let Err(f) = finish(&out, child) {
                first_failure.get_or_insert(f);
            }
        }
        first_failure.map_or(Ok(()), Err)
    }

    fn export(&self) {
        println!(
            "cargo:rustc-env=TENSOR_ARENA_SIM_DIR={}",
            self.split.display()
        );
        println!(
            "cargo:rustc-env=TENSOR_ARENA_SIM_COMBINED_DIR={}",
            self.combined.display()
        );
        println!(
            "cargo:rustc-env=TENSOR_ARENA_SIM_FOREIGN_KERNELS={}",
            self.foreign.join("libtensor_arena_kernels.so").display()
        );
    }
}

/// Gives the library `name` as its soname, so what links to it records the
/// bare name and finds it through its own run path.
fn soname(cmd: &mut Command, name: &str) {
    if cfg!(target_os = "macos") {
        cmd.arg(format!("-Wl,-install_name,@rpath/{name}"));
    } else {
        cmd.arg(format!("-Wl,-soname,{name}"));
    }
}

/// Lets the library `cmd` builds call the simulated runtime: its `tasim`
/// and `acl*` symbols stay undefined and resolve, when first called,
/// through the process's global scope, where the backend loads the runtime
/// (`RTLD_GLOBAL`) before any operator or kernel library, as the shim's
/// launch hook does. (A `DT_NEEDED` link to it would make every later
/// `dlopen` of an operator library grow the runtime's scope array, which
/// glibc does not free and valgrind reports as a leak.)
///
/// For the same reason they take libstdc++ in statically: it is not in the
/// test programs' initial load, so each library depending on it would grow
/// its scope array too. (Their C++ runtime calls still bind to the shared
/// libstdc++ the runtime library brought into the global scope.)
fn against_runtime(cmd: &mut Command) {
    if cfg!(target_os = "macos") {
        cmd.args(["-undefined", "dynamic_lookup"]);
    } else {
        cmd.arg("-static-libstdc++");
    }
}

/// Makes `dir/name` a symbolic link to `target` (replacing what was there):
/// the loader then hands out one library instance, with one state, whatever
/// name it was opened under.
fn link(dir: &Path, name: &str, target: impl AsRef<Path>) -> Result<(), Failure> {
    let path = dir.join(name);
    let fail = |e: std::io::Error| Failure::Other(format!("cannot link {}: {e}", path.display()));
    if path.symlink_metadata().is_ok() {
        std::fs::remove_file(&path).map_err(fail)?;
    }
    #[cfg(unix)]
    std::os::unix::fs::symlink(target.as_ref(), &path).map_err(fail)?;
    #[cfg(not(unix))]
    std::fs::copy(dir.join(target.as_ref()), &path)
        .map(|_| ())
        .map_err(fail)?;
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
