//! How the Ascend backend is set up: which device, where its libraries are,
//! and how the slab is allocated.

use std::ffi::c_int;
use std::path::PathBuf;
use std::str::FromStr;

use crate::error::{Error, Result};

/// Environment variable naming the ACL runtime library to load
/// (`libascendcl.so` or `libacl_rt.so`), read by [`AscendConfig::from_env`].
pub const ENV_ACL_LIB: &str = "TENSOR_ARENA_ACL_LIB";
/// Environment variable naming the kernel library built from
/// `kernels/ascend/`, read by [`AscendConfig::from_env`].
pub const ENV_KERNEL_LIB: &str = "TENSOR_ARENA_KERNEL_LIB";
/// Environment variable with the device id, read by [`AscendConfig::from_env`].
pub const ENV_DEVICE: &str = "TENSOR_ARENA_ASCEND_DEVICE";
/// Environment variable with the `aclrtMalloc` policy (`huge_first`,
/// `huge_only`, `normal_only`), read by [`AscendConfig::from_env`].
pub const ENV_MALLOC_POLICY: &str = "TENSOR_ARENA_MALLOC_POLICY";

/// `aclrtMemMallocPolicy`: which pages `aclrtMalloc` takes the slab from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MallocPolicy {
    /// 2 MB huge pages, falling back to normal pages (`ACL_MEM_MALLOC_HUGE_FIRST`).
    #[default]
    HugeFirst,
    /// Huge pages only (`ACL_MEM_MALLOC_HUGE_ONLY`).
    HugeOnly,
    /// Normal pages only (`ACL_MEM_MALLOC_NORMAL_ONLY`).
    NormalOnly,
    /// `ACL_MEM_MALLOC_HUGE_FIRST_P2P`.
    HugeFirstP2p,
    /// `ACL_MEM_MALLOC_HUGE_ONLY_P2P`.
    HugeOnlyP2p,
    /// `ACL_MEM_MALLOC_NORMAL_ONLY_P2P`.
    NormalOnlyP2p,
    /// 1 GB pages only, A2/A3 (`ACL_MEM_MALLOC_HUGE1G_ONLY`).
    Huge1gOnly,
    /// `ACL_MEM_MALLOC_HUGE1G_ONLY_P2P`.
    Huge1gOnlyP2p,
}

impl MallocPolicy {
    /// The C enum value.
    pub fn code(self) -> c_int {
        self as c_int
    }
}

impl FromStr for MallocPolicy {
    type Err = Error;

    /// Parses the lower-case name without the `ACL_MEM_MALLOC_` prefix.
    ///
    /// ```
    /// use tensor_arena::device::ascend::MallocPolicy;
    /// assert_eq!("normal_only".parse::<MallocPolicy>()?, MallocPolicy::NormalOnly);
    /// assert!("lots".parse::<MallocPolicy>().is_err());
    /// # Ok::<(), tensor_arena::Error>(())
    /// ```
    fn from_str(s: &str) -> Result<MallocPolicy> {
        let all = [
            ("huge_first", MallocPolicy::HugeFirst),
            ("huge_only", MallocPolicy::HugeOnly),
            ("normal_only", MallocPolicy::NormalOnly),
            ("huge_first_p2p", MallocPolicy::HugeFirstP2p),
            ("huge_only_p2p", MallocPolicy::HugeOnlyP2p),
            ("normal_only_p2p", MallocPolicy::NormalOnlyP2p),
            ("huge1g_only", MallocPolicy::Huge1gOnly),
            ("huge1g_only_p2p", MallocPolicy::Huge1gOnlyP2p),
        ];
        all.iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(s))
            .map(|&(_, p)| p)
            .ok_or_else(|| Error::InvalidArgument {
                what: "malloc policy",
                value: s.to_owned(),
                reason: format!(
                    "use one of {}",
                    all.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
                ),
            })
    }
}

/// `aclrtMemAttr`: which memory `aclrtGetMemInfo` reports on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MemAttr {
    /// `ACL_DDR_MEM` (Atlas 300I/310 class devices).
    Ddr,
    /// `ACL_HBM_MEM` (910B/910C).
    #[default]
    Hbm,
}

impl MemAttr {
    /// The C enum value.
    pub fn code(self) -> c_int {
        match self {
            MemAttr::Ddr => 0,
            MemAttr::Hbm => 1,
        }
    }
}

/// Settings for [`AscendDevice::new`](super::AscendDevice::new).
///
/// The ACL runtime is searched, in order: [`runtime_lib`](Self::runtime_lib)
/// if set (nothing else then); `libascendcl.so`, then `libacl_rt.so`, in
/// each of [`search_dirs`](Self::search_dirs); with
/// [`system_search`](Self::system_search) on (the default), in
/// `$ASCEND_HOME_PATH/lib64`, `$ASCEND_TOOLKIT_HOME/lib64` (and their
/// `runtime/lib64`), `/usr/local/Ascend/ascend-toolkit/latest/lib64`, and
/// finally through the system loader (`LD_LIBRARY_PATH`, `ld.so.cache`),
/// which is what CANN's `set_env.sh` prepares. The aclnn libraries
/// (`libnnopbase.so`, `libopapi.so`) are looked for next to the runtime
/// first, then the same way. The kernel library is
/// [`kernel_lib`](Self::kernel_lib) if set, else
/// `libtensor_arena_kernels.so` next to the runtime, then through the
/// system loader.
///
/// ```
/// use tensor_arena::device::ascend::{AscendConfig, MallocPolicy};
/// let cfg = AscendConfig::new()
///     .device(1)
///     .kernel_lib("/opt/ta/libtensor_arena_kernels.so")
///     .malloc_policy(MallocPolicy::HugeOnly);
/// assert_eq!(cfg.device_id, 1);
/// assert!(cfg.system_search);
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AscendConfig {
    /// Device id for `aclrtSetDevice` (default 0).
    pub device_id: i32,
    /// Load exactly this runtime library and search nothing else.
    pub runtime_lib: Option<PathBuf>,
    /// Directories searched first, in order.
    pub search_dirs: Vec<PathBuf>,
    /// Also search the CANN environment variables, the default install
    /// directory and the system loader path (default on).
    pub system_search: bool,
    /// The kernel library (the build of `kernels/ascend/`).
    pub kernel_lib: Option<PathBuf>,
    /// Whether to load a kernel library at all; without one, arenas work
    /// but the in-place kernels return an error.
    pub kernels: bool,
    /// How the slab is allocated (default huge pages first).
    pub malloc_policy: MallocPolicy,
    /// Which memory free-memory checks ask about (default HBM).
    pub mem_attr: MemAttr,
    /// Upper bound on the cores a kernel launch uses; default: the
    /// device's vector core count (`aclGetDeviceCapability`), else 8.
    pub max_blocks: Option<u32>,
}

impl AscendConfig {
    /// Device 0, system search on, kernels on, huge pages first.
    pub fn new() -> AscendConfig {
        AscendConfig {
            system_search: true,
            kernels: true,
            ..AscendConfig::default()
        }
    }

    /// [`AscendConfig::new`] with the environment's overrides:
    /// `TENSOR_ARENA_ACL_LIB` (runtime library path),
    /// `TENSOR_ARENA_KERNEL_LIB` (kernel library path),
    /// `TENSOR_ARENA_ASCEND_DEVICE` (device id) and
    /// `TENSOR_ARENA_MALLOC_POLICY` (`huge_first`, `huge_only`, ...).
    pub fn from_env() -> Result<AscendConfig> {
        let mut cfg = AscendConfig::new();
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        if let Some(p) = var(ENV_ACL_LIB) {
            cfg.runtime_lib = Some(PathBuf::from(p));
        }
        if let Some(p) = var(ENV_KERNEL_LIB) {
            cfg.kernel_lib = Some(PathBuf::from(p));
        }
        if let Some(v) = var(ENV_DEVICE) {
            let text = v.to_string_lossy().into_owned();
            cfg.device_id = text.parse().map_err(|_| Error::InvalidArgument {
                what: ENV_DEVICE,
                value: text.clone(),
                reason: "a device id is a whole number (0, 1, ...)".to_owned(),
            })?;
        }
        if let Some(v) = var(ENV_MALLOC_POLICY) {
            cfg.malloc_policy = v.to_string_lossy().parse()?;
        }
        Ok(cfg)
    }

    /// Uses device `id`.
    pub fn device(mut self, id: i32) -> AscendConfig {
        self.device_id = id;
        self
    }

    /// Loads exactly this runtime library.
    pub fn runtime_lib(mut self, path: impl Into<PathBuf>) -> AscendConfig {
        self.runtime_lib = Some(path.into());
        self
    }

    /// Searches `dir` before anything else.
    pub fn search_dir(mut self, dir: impl Into<PathBuf>) -> AscendConfig {
        self.search_dirs.push(dir.into());
        self
    }

    /// Turns the search of the CANN environment, default directory and
    /// loader path on or off.
    pub fn system_search(mut self, on: bool) -> AscendConfig {
        self.system_search = on;
        self
    }

    /// Loads the kernel library from `path`.
    pub fn kernel_lib(mut self, path: impl Into<PathBuf>) -> AscendConfig {
        self.kernel_lib = Some(path.into());
        self.kernels = true;
        self
    }

    /// Loads no kernel library (arenas only; kernels return an error).
    pub fn without_kernels(mut self) -> AscendConfig {
        self.kernels = false;
        self
    }

    /// Allocates the slab with `policy`.
    pub fn malloc_policy(mut self, policy: MallocPolicy) -> AscendConfig {
        self.malloc_policy = policy;
        self
    }

    /// Asks `aclrtGetMemInfo` about `attr`.
    pub fn mem_attr(mut self, attr: MemAttr) -> AscendConfig {
        self.mem_attr = attr;
        self
    }

    /// Launches kernels on at most `blocks` cores.
    pub fn max_blocks(mut self, blocks: u32) -> AscendConfig {
        self.max_blocks = Some(blocks);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_have_the_header_values() {
        assert_eq!(MallocPolicy::HugeFirst.code(), 0);
        assert_eq!(MallocPolicy::NormalOnly.code(), 2);
        assert_eq!(MallocPolicy::Huge1gOnlyP2p.code(), 7);
        assert_eq!(MemAttr::Hbm.code(), 1);
        assert_eq!(
            "HUGE_ONLY".parse::<MallocPolicy>().unwrap(),
            MallocPolicy::HugeOnly
        );
    }

    #[test]
    fn builder_sets_fields() {
        let c = AscendConfig::new()
            .runtime_lib("/x/libascendcl.so")
            .search_dir("/a")
            .search_dir("/b")
            .system_search(false)
            .without_kernels()
            .max_blocks(3);
        assert_eq!(c.search_dirs, [PathBuf::from("/a"), PathBuf::from("/b")]);
        assert!(!c.system_search && !c.kernels);
        assert_eq!(c.max_blocks, Some(3));
        assert_eq!(c.malloc_policy, MallocPolicy::HugeFirst);
    }
}
