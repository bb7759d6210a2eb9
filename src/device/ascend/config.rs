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
/// Environment variable with the headroom in bytes (`67108864`, or with a
/// `KiB` / `MiB` / `GiB` suffix: `64MiB`), read by [`AscendConfig::from_env`].
pub const ENV_HEADROOM: &str = "TENSOR_ARENA_ASCEND_HEADROOM";

/// Device memory [`AscendConfig::headroom`] leaves unreserved by default:
/// 64 MiB. The runtime allocates for itself while a step runs: every
/// kernel launch stub an 8-byte status buffer (`aclrtMalloc`, so at least
/// 64 bytes, or a whole 2 MiB page where the stub's huge-page policy is
/// honoured), aclnn its tiling data and the operator binaries it loads on
/// first use (sizes CANN does not document). 64 MiB is 32 huge pages of
/// margin; operator workspaces (16 MiB for `aclnnApplyAdamWV2` on a 910B)
/// are not part of it, they are planned buffers.
pub const DEFAULT_HEADROOM: usize = 64 << 20;

/// Repeatable aclnn executors kept per device by default
/// ([`AscendConfig::executor_cache`]): enough for every operator call of a
/// training step at a few shapes each.
pub const DEFAULT_EXECUTOR_CACHE: usize = 256;

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

    /// The C enum name (`ACL_HBM_MEM`, ...).
    pub fn name(self) -> &'static str {
        match self {
            MemAttr::Ddr => "ACL_DDR_MEM",
            MemAttr::Hbm => "ACL_HBM_MEM",
        }
    }
}

/// Bytes `aclrtMalloc` takes from the device for `size` bytes under
/// `policy`: the size aligned up to 32 bytes plus 32 of padding (none on
/// 1 GiB pages), then whole pages for huge-page policies: HUGE_FIRST rounds
/// to 2 MiB above 1 MiB, HUGE_ONLY always, HUGE1G to 1 GiB (hicann/runtime
/// `src/acl/aclrt_impl/memory.cpp`, `GetAlignedAndPaddingSize`;
/// `docs/zh/api_ref/25-02_Enumerations.md`, `aclrtMemMallocPolicy`).
/// HUGE_FIRST falls back to normal pages when huge ones run out; the
/// estimate assumes it does not.
///
/// ```
/// use tensor_arena::device::ascend::{footprint, MallocPolicy};
/// assert_eq!(footprint(1000, MallocPolicy::HugeFirst), 1056);
/// assert_eq!(footprint(2 << 20, MallocPolicy::HugeFirst), 4 << 20);
/// assert_eq!(footprint(3 << 20, MallocPolicy::NormalOnly), (3 << 20) + 32);
/// assert_eq!(footprint(5, MallocPolicy::Huge1gOnly), 1 << 30);
/// ```
pub fn footprint(size: usize, policy: MallocPolicy) -> usize {
    const MIB: usize = 1 << 20;
    let aligned = size.saturating_add(31) / 32 * 32;
    let padded = aligned.saturating_add(32);
    let pages = |bytes: usize, page: usize| bytes.div_ceil(page).saturating_mul(page);
    match policy {
        MallocPolicy::HugeFirst | MallocPolicy::HugeFirstP2p if size > MIB => {
            pages(padded, 2 * MIB)
        }
        MallocPolicy::HugeFirst | MallocPolicy::HugeFirstP2p => padded,
        MallocPolicy::HugeOnly | MallocPolicy::HugeOnlyP2p => pages(padded, 2 * MIB),
        MallocPolicy::NormalOnly | MallocPolicy::NormalOnlyP2p => padded,
        MallocPolicy::Huge1gOnly | MallocPolicy::Huge1gOnlyP2p => pages(aligned, 1 << 30),
    }
}

/// Parses a byte count: digits with an optional `KiB`, `MiB` or `GiB`.
fn parse_bytes(what: &'static str, text: &str) -> Result<usize> {
    let t = text.trim();
    let (digits, unit) = [("GiB", 1usize << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)]
        .iter()
        .find_map(|&(suffix, unit)| t.strip_suffix(suffix).map(|d| (d.trim(), unit)))
        .unwrap_or((t, 1));
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(|| Error::InvalidArgument {
            what,
            value: text.to_owned(),
            reason: "a byte count: digits, optionally followed by KiB, MiB or GiB (64MiB)"
                .to_owned(),
        })
}

/// Settings for [`AscendDevice::new`](super::AscendDevice::new).
///
/// The ACL runtime is searched, in order: [`runtime_lib`](Self::runtime_lib)
/// if set (nothing else then); `libascendcl.so`, then `libacl_rt.so`, in
/// each of [`search_dirs`](Self::search_dirs); with
/// [`system_search`](Self::system_search) on (the default), in
/// `$ASCEND_HOME_PATH/lib64`, `$ASCEND_TOOLKIT_HOME/lib64` (and their
/// `runtime/lib64` and `<arch>-linux/lib64`), the same under
/// `/usr/local/Ascend/cann` and `/usr/local/Ascend/ascend-toolkit/latest`,
/// and finally through the system loader (`LD_LIBRARY_PATH`,
/// `ld.so.cache`), which is what CANN's `set_env.sh` prepares. The aclnn
/// libraries are looked for next to the runtime first, then the same way:
/// `libnnopbase.so`, the per-repository operator libraries
/// `libopapi_nn.so` and `libopapi_math.so`, and, only for operators those
/// lack, the combined `libopapi.so` (never both kinds for one operator).
/// The kernel library is
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
#[derive(Debug, Clone, PartialEq)]
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
    /// Device memory a slab reservation leaves free for the runtime's own
    /// allocations (default [`DEFAULT_HEADROOM`]); a plan that fits the free
    /// memory but not the headroom fails at startup with
    /// [`Error::OutOfMemory`] instead of mid-run.
    pub headroom: usize,
    /// Repeatable aclnn executors kept per device (default
    /// [`DEFAULT_EXECUTOR_CACHE`]); 0 builds every operator call afresh.
    pub executor_cache: usize,
}

impl Default for AscendConfig {
    /// [`AscendConfig::new`].
    fn default() -> AscendConfig {
        AscendConfig::new()
    }
}

impl AscendConfig {
    /// Device 0, system search on, kernels on, huge pages first, the
    /// default headroom and executor cache.
    pub fn new() -> AscendConfig {
        AscendConfig {
            device_id: 0,
            runtime_lib: None,
            search_dirs: Vec::new(),
            system_search: true,
            kernel_lib: None,
            kernels: true,
            malloc_policy: MallocPolicy::HugeFirst,
            mem_attr: MemAttr::Hbm,
            max_blocks: None,
            headroom: DEFAULT_HEADROOM,
            executor_cache: DEFAULT_EXECUTOR_CACHE,
        }
    }

    /// [`AscendConfig::new`] with the environment's overrides:
    /// `TENSOR_ARENA_ACL_LIB` (runtime library path),
    /// `TENSOR_ARENA_KERNEL_LIB` (kernel library path),
    /// `TENSOR_ARENA_ASCEND_DEVICE` (device id),
    /// `TENSOR_ARENA_MALLOC_POLICY` (`huge_first`, `huge_only`, ...) and
    /// `TENSOR_ARENA_ASCEND_HEADROOM` (bytes, `64MiB`).
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
        if let Some(v) = var(ENV_HEADROOM) {
            cfg.headroom = parse_bytes(ENV_HEADROOM, &v.to_string_lossy())?;
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

    /// Leaves `bytes` of device memory unreserved for the runtime.
    pub fn headroom(mut self, bytes: usize) -> AscendConfig {
        self.headroom = bytes;
        self
    }

    /// Keeps up to `entries` repeatable aclnn executors (0: none).
    pub fn executor_cache(mut self, entries: usize) -> AscendConfig {
        self.executor_cache = entries;
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

    #[test]
    fn byte_counts_parse_with_units() {
        assert_eq!(parse_bytes("x", "64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_bytes("x", " 12 ").unwrap(), 12);
        assert_eq!(parse_bytes("x", "1 GiB").unwrap(), 1 << 30);
        assert!(parse_bytes("x", "lots").is_err());
        assert!(parse_bytes("x", "-1").is_err());
    }

    #[test]
    fn footprints_follow_the_page_rules() {
        use MallocPolicy::*;
        assert_eq!(
            footprint(1 << 20, HugeFirst),
            (1 << 20) + 32,
            "1 MiB stays on normal pages"
        );
        assert_eq!(footprint((1 << 20) + 1, HugeFirst), 2 << 20);
        assert_eq!(footprint(8, HugeOnly), 2 << 20);
        assert_eq!(footprint((2 << 20) - 64, HugeOnly), 2 << 20);
        assert_eq!(footprint((2 << 20) - 32, HugeOnly), 2 << 20);
        assert_eq!(footprint((2 << 20) - 31, HugeOnly), 4 << 20);
        assert_eq!(footprint((1 << 30) + 1, Huge1gOnlyP2p), 2 << 30);
        assert_eq!(footprint(0, NormalOnly), 32);
    }
}
