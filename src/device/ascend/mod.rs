//! The Ascend backend: ACL (and aclnn) through run-time-loaded FFI.
//!
//! Three layers, as cudarc does it:
//!
//! - [`sys`]: the C interface: the ACL runtime (`libascendcl.so`, or
//!   `libacl_rt.so` on newer toolkits) and the aclnn libraries
//!   (`libnnopbase.so`, `libopapi.so`) are found at run time with
//!   `libloading` and their entry points resolved into tables of function
//!   pointers, so the crate builds, and its tests run, where CANN is absent;
//! - `result`: every call's `aclError` / `aclnnStatus` checked and turned
//!   into [`Error::Acl`](crate::Error::Acl), with the runtime's recent
//!   error message ([`code_name`] names the codes);
//! - the safe layer: [`AscendRuntime`] (`aclInit`, explicit
//!   [`finalize`](AscendRuntime::finalize)), [`AscendDevice`] (device
//!   reference, its own stream, counters; [`Device`](crate::Device) and
//!   [`Kernels`](crate::device::Kernels)), [`AscendSlab`] (one `aclrtMalloc`,
//!   sized with the runtime's headroom, freed on drop), mapped ranges on
//!   the device (`AscendDevice::reserve_address` / `map` / `unmap` /
//!   `release_address`: `aclrtReserveMemAddress`, then one
//!   `aclrtMallocPhysical` and `aclrtMapMem` per granule; optional symbols,
//!   absent from older runtimes), and [`aclnn`] operators on leases with
//!   reused executors.
//!
//! The operator libraries are CANN's per-repository `libopapi_nn.so` and
//! `libopapi_math.so`, with the combined `libopapi.so` only for operators
//! they lack.
//!
//! Kernels come from the kernel library `kernels/ascend/` builds (with
//! CANN's `ascendc_library`), loaded at run time like the runtime. The
//! crate's tests run all of it against a CPU simulation of the runtime
//! (`kernels/sim/`) whose kernel launches execute the same AscendC sources
//! compiled against the CPU shim (`kernels/shim/`). Nothing here has run on
//! an NPU.
//!
//! `unsafe` is allowed module by module below, each for its FFI; `abi`,
//! `config`, `kernel_soc` (ELF section names) and the aclnn views, operator
//! list and executor-cache table are safe code.

pub mod abi;
pub mod aclnn;
mod config;
mod kernel_soc;
// Device memory, streams and copies through ACL calls.
#[allow(unsafe_code)]
mod device;
// Kernel library symbols resolved with dlsym and called through them.
#[allow(unsafe_code)]
mod kernels;
// `dlopen` of the runtime, aclnn and kernel libraries (`libloading`).
#[allow(unsafe_code)]
mod library_search;
// One checked wrapper per ACL call.
#[allow(unsafe_code)]
mod result;
// `aclInit` / `aclFinalize` and the resolved function tables.
#[allow(unsafe_code)]
mod runtime;
// The C declarations: function-pointer tables filled from the libraries.
#[allow(unsafe_code)]
pub mod sys;

pub use aclnn::{ExecutorStats, Op, TensorView};
pub use config::{
    AscendConfig, DEFAULT_EXECUTOR_CACHE, DEFAULT_HEADROOM, ENV_ACL_LIB, ENV_DEVICE, ENV_HEADROOM,
    ENV_KERNEL_LIB, ENV_MALLOC_POLICY, MallocPolicy, MemAttr, footprint,
};
pub use device::{AscendDevice, AscendSlab};
pub use library_search::{DEFAULT_TOOLKITS, KERNEL_LIB_NAME, RUNTIME_NAMES};
pub use result::{code_fix, code_name};
pub use runtime::AscendRuntime;

/// Where this build put the simulated ACL runtime (`kernels/sim/`, built by
/// `build.rs` when a C++ compiler was found): the directory holding its
/// `libascendcl.so`. It is never searched by default; tests and simulated
/// runs ask for it by this name (`AscendConfig::runtime_lib`).
pub const SIMULATED_RUNTIME_DIR: Option<&str> = option_env!("TENSOR_ARENA_SIM_DIR");
