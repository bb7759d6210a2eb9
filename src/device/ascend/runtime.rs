//! The loaded ACL runtime: its libraries, found once per process and never
//! unloaded, and `aclInit` / `aclFinalize`.

use std::path::Path;
use std::sync::Mutex;

use super::config::AscendConfig;
use super::library_search::{self, NNOPBASE_NAME, OPAPI_NAME};
use super::result;
use super::sys::{Loaded, NnFns, RuntimeFns};
use crate::error::{Error, Result};

/// The libraries of one runtime installation, leaked on purpose: unloading
/// the ACL runtime while its threads or static objects may still run is
/// not safe, and torch_npu never does it either.
pub(crate) struct Libs {
    pub runtime: Loaded,
    pub rt: RuntimeFns,
    /// The aclnn tables, or why they are unavailable (reported when an
    /// operator is used, so that arenas work without the operator library).
    pub nn: std::result::Result<NnFns, Error>,
    _nn_libs: Vec<Loaded>,
}

/// Runtimes loaded so far, by the path they were found at.
static LOADED: Mutex<Vec<&'static Libs>> = Mutex::new(Vec::new());

/// A loaded and initialised ACL runtime (`aclInit` done).
///
/// Cheap to copy. Finalising is explicit ([`AscendRuntime::finalize`]) and
/// never happens in a destructor: ACL's own singletons are destroyed in an
/// unknown order at exit, and a finalised runtime cannot serve the devices
/// and arenas that may still exist.
#[derive(Clone, Copy)]
pub struct AscendRuntime {
    libs: &'static Libs,
}

impl std::fmt::Debug for AscendRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AscendRuntime")
            .field("library", &self.libs.runtime.path)
            .field("aclnn", &self.libs.nn.is_ok())
            .finish()
    }
}

impl AscendRuntime {
    /// Finds and loads the runtime as `config` says (see
    /// [`AscendConfig`]), resolves its entry points and calls `aclInit`
    /// (an already initialised process is fine). On a machine without
    /// CANN this fails with [`Error::LibraryNotFound`], listing every place
    /// searched and how to fix it.
    pub fn load(config: &AscendConfig) -> Result<AscendRuntime> {
        let env = |name: &str| std::env::var_os(name);
        let candidates = library_search::runtime_candidates(config, &env);
        // SAFETY: the candidates are ACL runtime libraries by name and
        // place (or the one the user named), whose initialisers are meant
        // to run in any process that uses ACL.
        let loaded = unsafe {
            library_search::open_first(
                "the ACL runtime (libascendcl.so or libacl_rt.so)",
                &candidates,
                true,
                library_search::runtime_hint(),
            )
        }?;
        let libs = register(loaded, config)?;
        // SAFETY: the table was resolved from a library that stays loaded.
        unsafe { result::init(&libs.rt) }.map_err(|f| f.into_error("ascend"))?;
        Ok(AscendRuntime { libs })
    }

    /// Where the runtime library was found.
    pub fn library_path(&self) -> &Path {
        &self.libs.runtime.path
    }

    /// Whether the aclnn operator libraries were found.
    pub fn has_aclnn(&self) -> bool {
        self.libs.nn.is_ok()
    }

    /// Devices the runtime sees.
    pub fn device_count(&self) -> Result<u32> {
        // SAFETY: the runtime is loaded and initialised.
        unsafe { result::device_count(&self.libs.rt) }.map_err(|f| f.into_error("ascend"))
    }

    /// `aclFinalize`: ends this process's use of ACL. Call it once, after
    /// every arena, slab and device of the process has been dropped.
    pub fn finalize(self) -> Result<()> {
        // SAFETY: the runtime is loaded; by this method's contract nothing
        // uses ACL afterwards.
        unsafe { result::finalize(&self.libs.rt) }.map_err(|f| f.into_error("ascend"))
    }

    pub(crate) fn rt(&self) -> &'static RuntimeFns {
        &self.libs.rt
    }

    pub(crate) fn nn(&self) -> Result<&'static NnFns> {
        self.libs.nn.as_ref().map_err(Clone::clone)
    }
}

/// The registered libraries for `loaded`'s path, resolving and
/// registering them the first time.
fn register(loaded: Loaded, config: &AscendConfig) -> Result<&'static Libs> {
    let mut all = LOADED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&libs) = all.iter().find(|l| l.runtime.path == loaded.path) {
        // `loaded` is dropped: the loader's reference count goes back.
        return Ok(libs);
    }
    // SAFETY: `loaded` is the ACL runtime and is kept loaded (leaked below)
    // as long as the table exists.
    let rt = unsafe { RuntimeFns::resolve(&loaded) }?;
    let (nn, nn_libs) = load_nn(&loaded.path, config);
    let libs: &'static Libs = Box::leak(Box::new(Libs {
        runtime: loaded,
        rt,
        nn,
        _nn_libs: nn_libs,
    }));
    all.push(libs);
    Ok(libs)
}

/// Loads libnnopbase and libopapi and resolves the aclnn table.
fn load_nn(
    runtime: &Path,
    config: &AscendConfig,
) -> (std::result::Result<NnFns, Error>, Vec<Loaded>) {
    let env = |name: &str| std::env::var_os(name);
    let mut libs = Vec::new();
    let mut errors = Vec::new();
    for name in [NNOPBASE_NAME, OPAPI_NAME] {
        let candidates = library_search::nn_candidates(name, runtime, config, &env);
        // SAFETY: CANN's aclnn libraries by name and place.
        match unsafe { library_search::open_first(name, &candidates, false, String::new()) } {
            Ok(l) => libs.push(l),
            Err(Error::LibraryNotFound { tried, .. }) => errors.extend(tried),
            Err(e) => errors.push(format!("  {e}")),
        }
    }
    if libs.is_empty() {
        let e = Error::LibraryNotFound {
            what: "the aclnn operator libraries (libnnopbase.so, libopapi.so)".to_owned(),
            tried: errors,
            hint: "They ship with the CANN toolkit (lib64 next to libascendcl.so); load its set_env.sh.".to_owned(),
        };
        return (Err(e), libs);
    }
    let refs: Vec<&Loaded> = libs.iter().collect();
    // SAFETY: the aclnn libraries, kept loaded alongside the table.
    let nn = unsafe { NnFns::resolve(&refs) };
    (nn, libs)
}
