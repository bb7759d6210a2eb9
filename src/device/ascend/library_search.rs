//! Where the Ascend backend looks for its shared libraries, and the error
//! that lists every place tried when nothing is found.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::config::{AscendConfig, ENV_ACL_LIB, ENV_KERNEL_LIB};
use super::sys::{self, Loaded};
use crate::error::{Error, Result};

/// The ACL runtime, under its older and newer names.
pub const RUNTIME_NAMES: [&str; 2] = ["libascendcl.so", "libacl_rt.so"];
/// The aclnn base library (tensors, scalars, executors).
pub const NNOPBASE_NAME: &str = "libnnopbase.so";
/// The combined aclnn operator library, which CANN's op-api docs say "will
/// be deprecated" and must not be mixed with the per-repository ones
/// (hicann/ops-math and hicann/ops-nn `docs/zh/op_api_list.md`): used only
/// for operators the per-repository libraries do not provide.
pub const OPAPI_NAME: &str = "libopapi.so";
/// The ops-nn operator library.
pub const OPAPI_NN_NAME: &str = "libopapi_nn.so";
/// The ops-math operator library.
pub const OPAPI_MATH_NAME: &str = "libopapi_math.so";
/// The kernel library `kernels/ascend/CMakeLists.txt` builds.
pub const KERNEL_LIB_NAME: &str = "libtensor_arena_kernels.so";
/// Where CANN installs by default: `/usr/local/Ascend/cann` in current
/// releases (hicann/ops-math `docs/zh/install/quick_install.md`), the
/// `ascend-toolkit/latest` link in older ones.
pub const DEFAULT_TOOLKITS: [&str; 2] = [
    "/usr/local/Ascend/cann",
    "/usr/local/Ascend/ascend-toolkit/latest",
];
/// Environment variables naming the CANN toolkit root; `lib64` below them
/// holds the runtime.
pub const TOOLKIT_VARS: [&str; 2] = ["ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"];

/// One place a library may be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Candidate {
    /// A file path, tried if it exists.
    Path(PathBuf),
    /// A bare file name handed to the system loader (`LD_LIBRARY_PATH`,
    /// `ld.so.cache`, the default directories).
    Loader(&'static str),
}

/// Directories where the CANN toolkit keeps its libraries, from the
/// environment (`env` reads a variable) and the default install path.
pub fn toolkit_lib_dirs(env: &dyn Fn(&str) -> Option<OsString>) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let roots = TOOLKIT_VARS
        .iter()
        .filter_map(|v| env(v).filter(|s| !s.is_empty()).map(PathBuf::from))
        .chain(DEFAULT_TOOLKITS.iter().map(PathBuf::from));
    // Current toolkits keep the libraries under `<arch>-linux/lib64` and
    // link `lib64` to it.
    let arch_lib = format!("{}-linux/lib64", std::env::consts::ARCH);
    for root in roots {
        for sub in ["lib64", "runtime/lib64", arch_lib.as_str()] {
            let d = root.join(sub);
            if !dirs.contains(&d) {
                dirs.push(d);
            }
        }
    }
    dirs
}

/// Candidates for the ACL runtime under `cfg`.
pub fn runtime_candidates(
    cfg: &AscendConfig,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Vec<Candidate> {
    if let Some(p) = &cfg.runtime_lib {
        return vec![Candidate::Path(p.clone())];
    }
    let mut dirs = cfg.search_dirs.clone();
    if cfg.system_search {
        dirs.extend(toolkit_lib_dirs(env));
    }
    let mut out: Vec<Candidate> = dirs
        .iter()
        .flat_map(|d| {
            RUNTIME_NAMES
                .iter()
                .map(move |n| Candidate::Path(d.join(n)))
        })
        .collect();
    if cfg.system_search {
        out.extend(RUNTIME_NAMES.iter().map(|n| Candidate::Loader(n)));
    }
    out
}

/// The directory a loaded library was found in, when known (not for a
/// bare name the system loader resolved).
fn dir_of(lib: &Path) -> Option<PathBuf> {
    lib.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf)
}

/// Candidates for the aclnn library `name`: next to the runtime first.
pub fn nn_candidates(
    name: &'static str,
    runtime: &Path,
    cfg: &AscendConfig,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Vec<Candidate> {
    let mut dirs: Vec<PathBuf> = dir_of(runtime).into_iter().collect();
    dirs.extend(cfg.search_dirs.iter().cloned());
    if cfg.system_search {
        dirs.extend(toolkit_lib_dirs(env));
    }
    dirs.dedup();
    let mut out: Vec<Candidate> = dirs.iter().map(|d| Candidate::Path(d.join(name))).collect();
    if cfg.system_search {
        out.push(Candidate::Loader(name));
    }
    out
}

/// Candidates for the kernel library: the configured path, else next to
/// the runtime, then the system loader.
pub fn kernel_candidates(cfg: &AscendConfig, runtime: &Path) -> Vec<Candidate> {
    if let Some(p) = &cfg.kernel_lib {
        return vec![Candidate::Path(p.clone())];
    }
    let mut out: Vec<Candidate> = dir_of(runtime)
        .map(|d| Candidate::Path(d.join(KERNEL_LIB_NAME)))
        .into_iter()
        .collect();
    if cfg.system_search {
        out.push(Candidate::Loader(KERNEL_LIB_NAME));
    }
    out
}

/// How to fix a missing ACL runtime.
pub fn runtime_hint() -> String {
    format!(
        "Install the CANN toolkit (8.x) and load its environment before running: \
         `source /usr/local/Ascend/cann/set_env.sh` (older installs: `source /usr/local/Ascend/ascend-toolkit/set_env.sh`), \
         which sets ASCEND_HOME_PATH and LD_LIBRARY_PATH; or point {ENV_ACL_LIB} at libascendcl.so / libacl_rt.so."
    )
}

/// How to fix a missing kernel library.
pub fn kernel_hint() -> String {
    format!(
        "Build the kernels with CMake for your chip (`npu-smi info` names it): `cmake -S kernels/ascend -B build/ascend -DSOC_VERSION=Ascend<chip> && cmake --build build/ascend` (\
         see kernels/ascend/README.md) and set {ENV_KERNEL_LIB} to the built {KERNEL_LIB_NAME}, or put it next to the runtime library."
    )
}

/// Opens the first candidate that loads; the error names every one tried
/// and why it failed.
///
/// # Safety
/// Every candidate that exists must be a library whose initialisers are
/// sound to run (see [`sys::open`]).
pub unsafe fn open_first(
    what: &str,
    candidates: &[Candidate],
    global: bool,
    hint: String,
) -> Result<Loaded> {
    let mut tried = Vec::with_capacity(candidates.len());
    for c in candidates {
        match c {
            Candidate::Path(p) => {
                if !p.exists() {
                    tried.push(format!("  {}: no such file", p.display()));
                    continue;
                }
                // A relative path names a file here, not one the system
                // loader should look for.
                let p = &std::path::absolute(p).unwrap_or_else(|_| p.clone());
                // SAFETY: forwarded to the caller.
                match unsafe { sys::open(p, global) } {
                    Ok(lib) => {
                        return Ok(Loaded {
                            lib,
                            path: p.clone(),
                        });
                    }
                    Err(e) => tried.push(format!("  {}: {e}", p.display())),
                }
            }
            Candidate::Loader(name) => {
                // SAFETY: forwarded to the caller.
                match unsafe { sys::open(Path::new(name), global) } {
                    Ok(lib) => {
                        return Ok(Loaded {
                            lib,
                            path: PathBuf::from(name),
                        });
                    }
                    Err(e) => tried.push(format!(
                        "  {name} through the system loader (LD_LIBRARY_PATH={}): {e}",
                        std::env::var("LD_LIBRARY_PATH").unwrap_or_default()
                    )),
                }
            }
        }
    }
    if tried.is_empty() {
        tried.push("  (no candidates: give a path or turn the system search on)".to_owned());
    }
    Err(Error::LibraryNotFound {
        what: what.to_owned(),
        tried,
        hint,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_with(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| {
            vars.iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn an_explicit_runtime_is_the_only_candidate() {
        let cfg = AscendConfig::new()
            .runtime_lib("/opt/x/libacl_rt.so")
            .search_dir("/a");
        let c = runtime_candidates(&cfg, &env_with(&[("ASCEND_HOME_PATH", "/cann")]));
        assert_eq!(c, [Candidate::Path("/opt/x/libacl_rt.so".into())]);
    }

    #[test]
    fn search_order_is_dirs_then_toolkit_then_loader() {
        let cfg = AscendConfig::new().search_dir("/first");
        let c = runtime_candidates(&cfg, &env_with(&[("ASCEND_HOME_PATH", "/cann")]));
        assert_eq!(c[0], Candidate::Path("/first/libascendcl.so".into()));
        assert_eq!(c[1], Candidate::Path("/first/libacl_rt.so".into()));
        assert_eq!(c[2], Candidate::Path("/cann/lib64/libascendcl.so".into()));
        for root in DEFAULT_TOOLKITS {
            assert!(c.contains(&Candidate::Path(
                format!("{root}/lib64/libascendcl.so").into()
            )));
        }
        let cann = c.iter().position(|x| {
            *x == Candidate::Path("/usr/local/Ascend/cann/lib64/libascendcl.so".into())
        });
        let legacy = c.iter().position(|x| {
            *x == Candidate::Path(
                "/usr/local/Ascend/ascend-toolkit/latest/lib64/libascendcl.so".into(),
            )
        });
        assert!(cann < legacy, "the current install path first");
        assert_eq!(
            c[c.len() - 2..],
            [
                Candidate::Loader("libascendcl.so"),
                Candidate::Loader("libacl_rt.so")
            ]
        );
    }

    #[test]
    fn a_runtime_found_by_the_loader_has_no_directory_to_search() {
        let cfg = AscendConfig::new();
        let k = kernel_candidates(&cfg, Path::new("libascendcl.so"));
        assert_eq!(k, [Candidate::Loader(KERNEL_LIB_NAME)]);
        let n = nn_candidates(
            OPAPI_NAME,
            Path::new("libascendcl.so"),
            &cfg.system_search(false),
            &env_with(&[]),
        );
        assert!(n.is_empty());
    }

    #[test]
    fn without_system_search_only_the_given_dirs_count() {
        let cfg = AscendConfig::new().search_dir("/only").system_search(false);
        let c = runtime_candidates(&cfg, &env_with(&[("ASCEND_TOOLKIT_HOME", "/t")]));
        assert_eq!(c.len(), 2);
        let k = kernel_candidates(&cfg, Path::new("/only/libascendcl.so"));
        assert_eq!(
            k,
            [Candidate::Path(format!("/only/{KERNEL_LIB_NAME}").into())]
        );
        let n = nn_candidates(
            OPAPI_NAME,
            Path::new("/only/libascendcl.so"),
            &cfg,
            &env_with(&[]),
        );
        assert_eq!(n, [Candidate::Path("/only/libopapi.so".into())]);
    }

    #[test]
    fn the_not_found_error_lists_every_place_and_the_fix() {
        let dir = std::env::temp_dir().join("tensor-arena-search-test-empty");
        let cands = [
            Candidate::Path(dir.join("libascendcl.so")),
            Candidate::Path(dir.join("libacl_rt.so")),
        ];
        // SAFETY: neither file exists, so nothing is loaded.
        let e = unsafe { open_first("the ACL runtime", &cands, true, runtime_hint()) }.unwrap_err();
        let text = e.to_string();
        assert!(text.contains("libascendcl.so: no such file"), "{text}");
        assert!(text.contains("libacl_rt.so: no such file"), "{text}");
        assert!(text.contains("set_env.sh"), "{text}");
    }
}
