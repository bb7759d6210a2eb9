//! The simulated ACL runtime (`kernels/sim/`, built by `build.rs`): where it
//! is, an `AscendConfig` that finds it and nothing else, and its control
//! functions (`tasim_*`: device settings, fault injection, counters).
//!
//! The simulation shares devices, memory and streams across the threads of
//! the process, as ACL does, and keeps counters and faults per thread: each
//! test runs on its own thread, so it sees only its own counters and trips
//! only its own faults, while tests running in parallel share one simulated
//! HBM per device. A test that changes a device's settings uses its own
//! device id from [`devices`].

#![allow(dead_code)]

use std::ffi::{CString, c_char};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libloading::Library;
use tensor_arena::device::ascend::AscendConfig;

/// `ACL_ERROR_RT_MEMORY_ALLOCATION`.
pub const OOM: i32 = 207_001;
/// `ACL_ERROR_RT_AICORE_EXCEPTION`.
pub const AICORE_EXCEPTION: i32 = 507_015;
/// `ACL_ERROR_RT_COPY_DATA`.
pub const COPY_DATA: i32 = 507_052;
/// `ACLNN_ERR_RUNTIME_ERROR`.
pub const ACLNN_RUNTIME: i32 = 361_001;

/// Device ids of the simulated 8-NPU machine, one per test that changes a
/// device's settings (so tests running in parallel never see each other's
/// capacity); everything else runs on device 0.
pub mod devices {
    /// Capacity and system reservation changed (out of memory).
    pub const OOM: i32 = 1;
    /// Capacity changed (headroom).
    pub const HEADROOM: i32 = 2;
    /// Two threads on one device (shared context and memory).
    pub const SHARED: i32 = 3;
    /// Vector cores changed.
    pub const SETTINGS: i32 = 4;
    /// Capacity changed (mid-run exhaustion without headroom).
    pub const EXHAUSTED: i32 = 5;
    /// Virtual memory management (physical memory accounting).
    pub const VMM: i32 = 6;
    /// Capacity changed (physical memory out of memory).
    pub const VMM_CAPACITY: i32 = 7;
    /// One past the last device.
    pub const MISSING: i32 = 8;
}

fn missing(what: &str, log_var: Option<&'static str>) -> ! {
    let log = log_var
        .and_then(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_else(|| "no C++ compiler was found when the crate was built".into());
    panic!(
        "the {what} was not built, so the Ascend simulation tests cannot run. \
         Install g++ (CI does) and rebuild. Build output:\n{log}"
    );
}

fn built(var: Option<&'static str>) -> &'static Path {
    match var {
        Some(d) => Path::new(d),
        None => missing(
            "simulated ACL runtime (kernels/sim)",
            option_env!("TENSOR_ARENA_SIM_BUILD_LOG"),
        ),
    }
}

/// The directory holding the simulated runtime in CANN's per-repository
/// layout (`libascendcl.so`, `libnnopbase.so`, `libopapi_math.so`,
/// `libopapi_nn.so`) and the kernel library `libtensor_arena_kernels.so`.
pub fn dir() -> &'static Path {
    built(option_env!("TENSOR_ARENA_SIM_DIR"))
}

/// The same runtime with the combined `libopapi.so` instead of the
/// per-repository operator libraries.
pub fn combined_dir() -> &'static Path {
    built(option_env!("TENSOR_ARENA_SIM_COMBINED_DIR"))
}

/// The kernel library: CANN-style launch stubs (`kernels/sim/kernel_stub.cpp`)
/// in front of the AscendC kernels compiled against the CPU shim.
pub fn kernel_lib() -> PathBuf {
    dir().join("libtensor_arena_kernels.so")
}

/// The same kernel library built for another SoC (ascend310p3): its
/// registration fails on the simulated 910B2.
pub fn foreign_kernel_lib() -> &'static Path {
    built(option_env!("TENSOR_ARENA_SIM_FOREIGN_KERNELS"))
}

/// Finds the simulated runtime and its kernel library (next to it, where
/// the backend looks by default), and nothing installed on the machine.
pub fn config() -> AscendConfig {
    AscendConfig::new().search_dir(dir()).system_search(false)
}

/// [`config`] with the combined operator library layout.
pub fn combined_config() -> AscendConfig {
    AscendConfig::new()
        .search_dir(combined_dir())
        .system_search(false)
}

/// The simulated runtime's control interface.
pub struct Sim {
    lib: Library,
}

/// The loaded simulation (the same library instance the backend loads).
pub fn sim() -> &'static Sim {
    static SIM: OnceLock<Sim> = OnceLock::new();
    SIM.get_or_init(|| {
        let path = dir().join("libascendcl.so");
        // SAFETY: the simulated runtime built from kernels/sim; its
        // initialisers only set up C++ runtime state. Held in a static,
        // never unloaded.
        let lib = unsafe { Library::new(&path) }.unwrap_or_else(|e| {
            panic!(
                "cannot load the simulated runtime at {}: {e}",
                path.display()
            )
        });
        Sim { lib }
    })
}

impl Sim {
    /// # Safety
    /// `F` is the exact C type of `name`.
    unsafe fn f<F: Copy>(&self, name: &str) -> F {
        // SAFETY: forwarded to the caller.
        let s = unsafe { self.lib.get::<F>(name.as_bytes()) };
        *s.unwrap_or_else(|e| panic!("{name} missing from the simulated runtime: {e}"))
    }

    /// An entry point of the simulated runtime, for tests of its own rules.
    ///
    /// # Safety
    /// `F` is the exact C type of `name`.
    pub unsafe fn function<F: Copy>(&self, name: &str) -> F {
        // SAFETY: forwarded to the caller.
        unsafe { self.f(name) }
    }

    /// This thread's counters, faults and error messages back to the
    /// defaults (devices keep their settings: see [`Sim::reset_device`]).
    pub fn reset(&self) {
        // SAFETY: `void tasim_reset(void)`.
        unsafe { self.f::<unsafe extern "C" fn()>("tasim_reset")() }
    }

    /// Device `id`'s capacity, reservation and cores back to a 910B2's.
    pub fn reset_device(&self, id: i32) {
        // SAFETY: `void tasim_reset_device(int32_t)`.
        unsafe { self.f::<unsafe extern "C" fn(i32)>("tasim_reset_device")(id) }
    }

    /// Simulated memory of device `id`, in bytes.
    pub fn set_capacity(&self, id: i32, bytes: u64) {
        // SAFETY: `void tasim_set_capacity(int32_t, uint64_t)`.
        unsafe { self.f::<unsafe extern "C" fn(i32, u64)>("tasim_set_capacity")(id, bytes) }
    }

    /// Bytes of device `id` the "system" holds (not free to the application).
    pub fn set_system_reserved(&self, id: i32, bytes: u64) {
        // SAFETY: `void tasim_set_system_reserved(int32_t, uint64_t)`.
        unsafe { self.f::<unsafe extern "C" fn(i32, u64)>("tasim_set_system_reserved")(id, bytes) }
    }

    /// Vector cores device `id` reports.
    pub fn set_vector_cores(&self, id: i32, cores: u32) {
        // SAFETY: `void tasim_set_vector_cores(int32_t, uint32_t)`.
        unsafe { self.f::<unsafe extern "C" fn(i32, u32)>("tasim_set_vector_cores")(id, cores) }
    }

    /// A figure of device `id` over the whole process: "refs", "in_use",
    /// "peak", "free", "allocations".
    pub fn device_counter(&self, id: i32, name: &str) -> u64 {
        let c = CString::new(name).unwrap_or_default();
        // SAFETY: `uint64_t tasim_device_counter(int32_t, const char *)`,
        // given a NUL-terminated string that outlives the call.
        unsafe {
            self.f::<unsafe extern "C" fn(i32, *const c_char) -> u64>("tasim_device_counter")(
                id,
                c.as_ptr(),
            )
        }
    }

    /// Bytes the simulated aclrtMalloc charges for `size` under `policy`.
    pub fn charged(&self, size: u64, policy: i32) -> u64 {
        // SAFETY: `uint64_t tasim_charged(uint64_t, int)`.
        unsafe { self.f::<unsafe extern "C" fn(u64, i32) -> u64>("tasim_charged")(size, policy) }
    }

    fn arm(&self, which: &str, nth: u64, code: i32) {
        // SAFETY: `void tasim_fail_*(uint64_t nth, int32_t code)`.
        unsafe {
            self.f::<unsafe extern "C" fn(u64, i32)>(&format!("tasim_fail_{which}"))(nth, code)
        }
    }

    /// The `nth` aclrtMalloc from now fails with `code`.
    pub fn fail_malloc(&self, nth: u64, code: i32) {
        self.arm("malloc", nth, code);
    }

    /// The `nth` aclrtMemcpy from now fails with `code`.
    pub fn fail_memcpy(&self, nth: u64, code: i32) {
        self.arm("memcpy", nth, code);
    }

    /// The `nth` kernel launch from now fails with `code`.
    pub fn fail_launch(&self, nth: u64, code: i32) {
        self.arm("launch", nth, code);
    }

    /// The `nth` aclnn operator execution from now fails with `code`.
    pub fn fail_op(&self, nth: u64, code: i32) {
        self.arm("op", nth, code);
    }

    /// The `nth` stream synchronisation from now reports `code` (an
    /// asynchronous fault of queued work).
    pub fn fail_sync(&self, nth: u64, code: i32) {
        self.arm("sync", nth, code);
    }

    /// The `nth` launch stub's scratch allocation from now fails with `code`.
    pub fn fail_launch_malloc(&self, nth: u64, code: i32) {
        self.arm("launch_malloc", nth, code);
    }

    /// The `nth` aclrtMallocPhysical from now fails with `code`.
    pub fn fail_malloc_physical(&self, nth: u64, code: i32) {
        self.arm("malloc_physical", nth, code);
    }

    /// The `nth` aclrtMapMem from now fails with `code`.
    pub fn fail_map(&self, nth: u64, code: i32) {
        self.arm("map", nth, code);
    }

    /// The `nth` aclSetAclOpExecutorRepeatable from now answers 561000.
    pub fn refuse_repeatable(&self, nth: u64) {
        // SAFETY: `void tasim_refuse_repeatable(uint64_t)`.
        unsafe { self.f::<unsafe extern "C" fn(u64)>("tasim_refuse_repeatable")(nth) }
    }

    /// A counter of this thread's calls.
    pub fn counter(&self, name: &str) -> u64 {
        let c = CString::new(name).unwrap_or_default();
        // SAFETY: `uint64_t tasim_counter(const char *)`, given a
        // NUL-terminated string that outlives the call.
        unsafe { self.f::<unsafe extern "C" fn(*const c_char) -> u64>("tasim_counter")(c.as_ptr()) }
    }

    /// This thread's error messages since the last call, newest first
    /// (`aclGetRecentErrMsg`), or "".
    pub fn recent_messages(&self) -> String {
        // SAFETY: `const char *aclGetRecentErrMsg(void)`.
        let f: unsafe extern "C" fn() -> *const c_char = unsafe { self.f("aclGetRecentErrMsg") };
        // SAFETY: null or a NUL-terminated string valid until the next call
        // on this thread, copied at once.
        unsafe {
            let p = f();
            if p.is_null() {
                String::new()
            } else {
                std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        }
    }

    /// Every counter of this thread, `name=value` per line.
    pub fn counters(&self) -> String {
        // SAFETY: `size_t tasim_counters(char *buf, size_t cap)`.
        let f: unsafe extern "C" fn(*mut c_char, usize) -> usize =
            unsafe { self.f("tasim_counters") };
        // SAFETY: a null buffer with capacity 0 asks for the length only.
        let len = unsafe { f(std::ptr::null_mut(), 0) };
        let mut buf = vec![0u8; len + 1];
        // SAFETY: `buf` holds len + 1 writable bytes, as passed.
        unsafe { f(buf.as_mut_ptr().cast(), buf.len()) };
        buf.truncate(len);
        String::from_utf8_lossy(&buf).into_owned()
    }

    /// Asserts that nothing the backend made on this thread is still alive:
    /// memory, launch buffers, streams, tensors, scalars, arrays, executors;
    /// that no copy raced queued work and nothing was freed under it; and
    /// that no executor was used outside its documented lifetime.
    pub fn assert_clean(&self) {
        for name in [
            "live_allocations",
            "live_launch_allocations",
            "bytes_in_use",
            "live_streams",
            "live_tensors",
            "live_scalars",
            "live_int_arrays",
            "live_executors",
            "live_physical_handles",
            "live_ranges",
            "unsynchronized_copies",
            "free_with_pending_work",
            "destroy_stream_with_pending_work",
            "bad_device_pointers",
            "bad_streams",
            "bad_workspaces",
            "bad_executors",
            "destroyed_non_repeatable",
            "unmapped_accesses",
            "bad_kernel_operands",
            "free_physical_while_mapped",
            "unmap_with_pending_work",
        ] {
            assert_eq!(
                self.counter(name),
                0,
                "simulation counter {name}:\n{}",
                self.counters()
            );
        }
    }
}
