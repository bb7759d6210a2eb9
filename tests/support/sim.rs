//! The simulated ACL runtime (`kernels/sim/`, built by `build.rs`): where it
//! is, an `AscendConfig` that finds it and nothing else, and its control
//! functions (`tasim_*`: capacity, fault injection, counters).
//!
//! The simulation keeps its state per thread, and every test runs on its
//! own thread, so tests see only their own counters and faults.

#![allow(dead_code)]

use std::ffi::{CString, c_char};
use std::path::Path;
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

fn missing(what: &str, log_var: Option<&'static str>) -> ! {
    let log = log_var
        .and_then(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_else(|| "no C++ compiler was found when the crate was built".into());
    panic!(
        "the {what} was not built, so the Ascend simulation tests cannot run. \
         Install g++ (CI does) and rebuild. Build output:\n{log}"
    );
}

/// The directory holding the simulated `libascendcl.so` (and the aclnn
/// library names linked to it).
pub fn dir() -> &'static Path {
    match option_env!("TENSOR_ARENA_SIM_DIR") {
        Some(d) => Path::new(d),
        None => missing(
            "simulated ACL runtime (kernels/sim)",
            option_env!("TENSOR_ARENA_SIM_BUILD_LOG"),
        ),
    }
}

/// The AscendC kernels compiled against the CPU shim: the kernel library.
pub fn kernel_lib() -> &'static Path {
    match option_env!("TENSOR_ARENA_SHIM_KERNELS") {
        Some(p) => Path::new(p),
        None => missing(
            "AscendC shim kernel library",
            option_env!("TENSOR_ARENA_SHIM_BUILD_LOG"),
        ),
    }
}

/// Finds the simulated runtime and the shim kernel library, and nothing
/// installed on the machine.
pub fn config() -> AscendConfig {
    AscendConfig::new()
        .search_dir(dir())
        .system_search(false)
        .kernel_lib(kernel_lib())
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

    /// This thread's counters, settings and faults back to the defaults.
    pub fn reset(&self) {
        // SAFETY: `void tasim_reset(void)`.
        unsafe { self.f::<unsafe extern "C" fn()>("tasim_reset")() }
    }

    /// Simulated memory, in bytes.
    pub fn set_capacity(&self, bytes: u64) {
        // SAFETY: `void tasim_set_capacity(uint64_t)`.
        unsafe { self.f::<unsafe extern "C" fn(u64)>("tasim_set_capacity")(bytes) }
    }

    /// Bytes the "system" holds (not free to the application).
    pub fn set_system_reserved(&self, bytes: u64) {
        // SAFETY: `void tasim_set_system_reserved(uint64_t)`.
        unsafe { self.f::<unsafe extern "C" fn(u64)>("tasim_set_system_reserved")(bytes) }
    }

    /// Vector cores the device reports.
    pub fn set_vector_cores(&self, cores: u32) {
        // SAFETY: `void tasim_set_vector_cores(uint32_t)`.
        unsafe { self.f::<unsafe extern "C" fn(u32)>("tasim_set_vector_cores")(cores) }
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

    /// A counter of this thread's simulation.
    pub fn counter(&self, name: &str) -> u64 {
        let c = CString::new(name).unwrap_or_default();
        // SAFETY: `uint64_t tasim_counter(const char *)`, given a
        // NUL-terminated string that outlives the call.
        unsafe { self.f::<unsafe extern "C" fn(*const c_char) -> u64>("tasim_counter")(c.as_ptr()) }
    }

    /// Every counter, `name=value` per line.
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

    /// Asserts that nothing the backend made is still alive: memory,
    /// streams, tensors, scalars, arrays, executors; and that no copy raced
    /// queued work and nothing was freed under it.
    pub fn assert_clean(&self) {
        for name in [
            "live_allocations",
            "bytes_in_use",
            "live_streams",
            "live_tensors",
            "live_scalars",
            "live_int_arrays",
            "live_executors",
            "unsynchronized_copies",
            "free_with_pending_work",
            "destroy_stream_with_pending_work",
            "bad_device_pointers",
            "bad_streams",
            "bad_workspaces",
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
