//! The loaded ACL runtime: its libraries, found once per process and never
//! unloaded, and `aclInit` / `aclFinalizeReference`.

use std::path::Path;
use std::sync::Mutex;

use super::config::AscendConfig;
use super::library_search::{self, NNOPBASE_NAME, OPAPI_MATH_NAME, OPAPI_NAME, OPAPI_NN_NAME};
use super::result;
use super::sys::{Loaded, NnFns, OpRepo, RuntimeFns};
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
/// Cheap to copy. Each [`AscendRuntime::load`] (and so each
/// [`AscendDevice::new`](super::AscendDevice::new)) is one `aclInit`, and
/// ACL counts them: [`AscendRuntime::finalize`] takes one back
/// (`aclFinalizeReference`), and the runtime deinitialises when the last is
/// taken back, so independent users in one process (threads, libraries,
/// tests) do not finalise under each other (hicann/runtime
/// `docs/zh/api_ref/02_initialization_and_deinitialization.md`). Finalising
/// is explicit and never happens in a destructor: ACL's own singletons are
/// destroyed in an unknown order at exit, and a finalised runtime cannot
/// serve the devices and arenas that may still exist.
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

    /// Takes back one `aclInit`: call it once per [`AscendRuntime::load`]
    /// (each [`AscendDevice::new`](super::AscendDevice::new) loads), after
    /// every arena, slab and device made through it has been dropped. With
    /// `aclFinalizeReference` (CANN 8.x) the runtime deinitialises when the
    /// last load is finalised; a toolkit without it gets `aclFinalize`,
    /// which ends the whole process's use of ACL at once.
    pub fn finalize(self) -> Result<()> {
        // SAFETY: the runtime is loaded; by this method's contract nothing
        // of this load uses ACL afterwards.
        unsafe { result::finalize(&self.libs.rt) }.map_err(|f| f.into_error("ascend"))
    }

    /// The library aclnn operator `name` (`aclnnMm`, ...) was resolved from:
    /// its repository's `libopapi_nn.so` / `libopapi_math.so` when present,
    /// else `libopapi.so`; `None` when no library provides it (or aclnn is
    /// missing).
    pub fn operator_library(&self, name: &str) -> Option<&Path> {
        let nn = self.libs.nn.as_ref().ok()?;
        let i = nn.library_index(name)?;
        nn.libraries.get(i).map(|p| p.as_path())
    }

    /// The device's SoC name (`aclrtGetSocName`, such as `Ascend910B2`), if
    /// the runtime tells.
    pub fn soc_name(&self) -> Option<String> {
        // SAFETY: the runtime is loaded.
        unsafe { result::soc_name(&self.libs.rt) }
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

/// Loads libnnopbase and the operator libraries and resolves the aclnn
/// table: each operator from its repository's library (`libopapi_nn.so`,
/// `libopapi_math.so`) when that is installed and exports both phases;
/// `libopapi.so` is loaded only if some operator is still missing, and only
/// for those (CANN does not support mixing the two kinds for one operator).
fn load_nn(
    runtime: &Path,
    config: &AscendConfig,
) -> (std::result::Result<NnFns, Error>, Vec<Loaded>) {
    let env = |name: &str| std::env::var_os(name);
    let open = |name: &'static str| {
        let candidates = library_search::nn_candidates(name, runtime, config, &env);
        // SAFETY: CANN's aclnn libraries by name and place.
        unsafe { library_search::open_first(name, &candidates, false, String::new()) }
    };
    let not_found = |name: &str, e: Error| match e {
        Error::LibraryNotFound { tried, .. } => {
            format!("{name}: not found (tried: {})", tried.join(";").trim())
        }
        e => format!("{name}: {e}"),
    };
    let base = match open(NNOPBASE_NAME) {
        Ok(l) => l,
        Err(Error::LibraryNotFound { tried, .. }) => {
            let e = Error::LibraryNotFound {
                what: format!("the aclnn base library ({NNOPBASE_NAME})"),
                tried,
                hint: "It ships with the CANN toolkit (lib64 next to libascendcl.so); load its set_env.sh.".to_owned(),
            };
            return (Err(e), Vec::new());
        }
        Err(e) => return (Err(e), Vec::new()),
    };
    // SAFETY: libnnopbase, kept loaded alongside the table.
    let mut nn = match unsafe { NnFns::resolve_base(&base) } {
        Ok(nn) => nn,
        Err(e) => return (Err(e), vec![base]),
    };
    let mut libs = vec![base];
    let mut repo_index = [None, None];
    for (slot, (name, repo)) in [(OPAPI_NN_NAME, OpRepo::Nn), (OPAPI_MATH_NAME, OpRepo::Math)]
        .into_iter()
        .enumerate()
    {
        match open(name) {
            Ok(l) => {
                nn.searched
                    .push(format!("{} ({} operators)", l.path.display(), repo.name()));
                nn.libraries.push(l.path.clone());
                repo_index[slot] = Some(libs.len());
                libs.push(l);
            }
            Err(e) => nn.searched.push(not_found(name, e)),
        }
    }
    let pick = |repo: OpRepo| -> Vec<usize> {
        let slot = usize::from(repo == OpRepo::Math);
        repo_index[slot].into_iter().collect()
    };
    {
        let refs: Vec<&Loaded> = libs.iter().collect();
        // SAFETY: the operator libraries, kept loaded alongside the table.
        unsafe { nn.resolve_missing(&refs, &pick) };
    }
    if nn.any_missing() {
        match open(OPAPI_NAME) {
            Ok(l) => {
                nn.searched.push(format!(
                    "{} (the combined library, for operators the per-repository ones lack)",
                    l.path.display()
                ));
                nn.libraries.push(l.path.clone());
                let combined = libs.len();
                libs.push(l);
                let refs: Vec<&Loaded> = libs.iter().collect();
                // SAFETY: as above.
                unsafe { nn.resolve_missing(&refs, &|_| vec![combined]) };
            }
            Err(e) => nn.searched.push(not_found(OPAPI_NAME, e)),
        }
    }
    (Ok(nn), libs)
}
