//! Loads the AscendC shim libraries that `build.rs` compiles and calls their
//! C entry points (`aclrtlaunch_*`, `ta_shim_*`).
//!
//! The libraries keep their state per calling thread, so tests running in
//! parallel threads do not see each other's violations.

#![allow(dead_code)]

use std::ffi::{c_char, c_void};
use std::sync::OnceLock;

use libloading::Library;
use tensor_arena::Element;
use tensor_arena::device::ascend::abi::{LAUNCH_PREFIX, Tiling};
use tensor_arena::ops::RngState;

/// What a launch returns after a rule violation (ACL's AI Core exception).
pub const VIOLATION: u32 = 507_015;
/// What a launch returns for an invalid block count.
pub const PARAM_INVALID: u32 = 107_000;

type RandomFn =
    unsafe extern "C" fn(u32, *mut c_void, *mut c_void, f32, u64, u64, u64, u64, u32) -> u32;
type RandomBitsFn = unsafe extern "C" fn(
    u32,
    *mut c_void,
    *mut c_void,
    *mut c_void,
    f32,
    u64,
    u64,
    u64,
    u64,
    u32,
) -> u32;
type MaskFn =
    unsafe extern "C" fn(u32, *mut c_void, *mut c_void, *mut c_void, f32, u64, u64, u32) -> u32;
type MulFn = unsafe extern "C" fn(u32, *mut c_void, *mut c_void, *mut c_void, u64, u64, u32) -> u32;
type ScalarFn = unsafe extern "C" fn(u32, *mut c_void, *mut c_void, f32, u64, u64, u32) -> u32;

/// The cost model's figures for a launch (`struct ta_shim_cost`): an
/// estimate from documented throughputs and one public measurement, never
/// a measurement of ours. Pipes are indexed S, V, MTE2, MTE3.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct Cost {
    pub blocks: u32,
    pub critical_block: u32,
    pub critical_cycles: f64,
    pub critical_busy: [f64; 4],
    pub total_busy: [f64; 4],
    pub critical_instructions: [u64; 4],
    pub total_instructions: [u64; 4],
    pub gm_bytes: u64,
    /// The critical block's vector repeats as if free of bank conflicts.
    pub vector_repeat_cycles: f64,
    /// The extra vector cycles UB bank conflicts cost it.
    pub bank_conflict_cycles: f64,
    /// Its vector instructions' issue cycles.
    pub issue_cycles: f64,
}

impl Cost {
    /// Vector repeat cycles with bank conflicts over those without (1 when
    /// no two sources shared a bank group).
    pub fn bank_conflict_factor(&self) -> f64 {
        if self.vector_repeat_cycles > 0.0 {
            (self.vector_repeat_cycles + self.bank_conflict_cycles) / self.vector_repeat_cycles
        } else {
            1.0
        }
    }
}

/// Pipe indices of [`Cost`].
pub const S: usize = 0;
/// The vector pipe.
pub const V: usize = 1;
/// MTE2: GM to UB.
pub const MTE2: usize = 2;
/// MTE3: UB to GM.
pub const MTE3: usize = 3;

/// One loaded shim library.
pub struct Shim {
    lib: Library,
}

fn load(path: Option<&'static str>, what: &str) -> Shim {
    let Some(path) = path else {
        let log = option_env!("TENSOR_ARENA_SHIM_BUILD_LOG")
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_else(|| "no C++ compiler was found when the crate was built".into());
        panic!(
            "the AscendC shim {what} was not built, so the shim tests cannot run. \
             Install g++ (CI does) and rebuild. Build output:\n{log}"
        );
    };
    // SAFETY: the library is the one build.rs compiled from kernels/; its
    // initialisers only set up C++ runtime state, and it is never unloaded
    // (held in a static) while symbols from it are in use.
    let lib = unsafe { Library::new(path) }
        .unwrap_or_else(|e| panic!("cannot load the AscendC shim {what} at {path}: {e}"));
    Shim { lib }
}

/// The kernel library (`aclrtlaunch_ta_*` of kernels/ascend/).
pub fn kernels() -> &'static Shim {
    static LIB: OnceLock<Shim> = OnceLock::new();
    LIB.get_or_init(|| load(option_env!("TENSOR_ARENA_SHIM_KERNELS"), "kernel library"))
}

/// The self-test library (rule-breaking kernels, unit tests, conversions).
pub fn selftest() -> &'static Shim {
    static LIB: OnceLock<Shim> = OnceLock::new();
    LIB.get_or_init(|| {
        load(
            option_env!("TENSOR_ARENA_SHIM_SELFTEST"),
            "self-test library",
        )
    })
}

impl Shim {
    /// Looks a function up by name.
    ///
    /// # Safety
    /// `F` must be the exact C signature of the symbol.
    pub unsafe fn function<F: Copy>(&self, name: &str) -> F {
        // SAFETY: the caller guarantees that F matches the symbol's type.
        let sym = unsafe { self.lib.get::<F>(name.as_bytes()) };
        *sym.unwrap_or_else(|e| panic!("symbol {name} missing from the shim library: {e}"))
    }

    /// Forgets this thread's recorded violations.
    pub fn reset(&self) {
        // SAFETY: `void ta_shim_reset(void)`.
        let f: unsafe extern "C" fn() = unsafe { self.function("ta_shim_reset") };
        // SAFETY: no arguments; touches only the shim's thread-local state.
        unsafe { f() }
    }

    /// Violations this thread recorded since the last reset.
    pub fn violations(&self) -> u64 {
        // SAFETY: `uint64_t ta_shim_violation_count(void)`.
        let f: unsafe extern "C" fn() -> u64 = unsafe { self.function("ta_shim_violation_count") };
        // SAFETY: no arguments; reads the shim's thread-local state.
        unsafe { f() }
    }

    /// The recorded violation messages, one per line.
    pub fn report(&self) -> String {
        // SAFETY: `size_t ta_shim_report(char *buf, size_t cap)`.
        let f: unsafe extern "C" fn(*mut c_char, usize) -> usize =
            unsafe { self.function("ta_shim_report") };
        // SAFETY: a null buffer with capacity 0 only asks for the length.
        let len = unsafe { f(std::ptr::null_mut(), 0) };
        let mut buf = vec![0u8; len + 1];
        // SAFETY: buf holds len + 1 writable bytes, as passed.
        unsafe { f(buf.as_mut_ptr().cast(), buf.len()) };
        buf.truncate(len);
        String::from_utf8_lossy(&buf).into_owned()
    }

    /// Sets this thread's Unified Buffer bytes per simulated core.
    pub fn set_ub_capacity(&self, bytes: u32) {
        // SAFETY: `void ta_shim_set_ub_capacity(uint32_t)`.
        let f: unsafe extern "C" fn(u32) = unsafe { self.function("ta_shim_set_ub_capacity") };
        // SAFETY: plain value argument.
        unsafe { f(bytes) }
    }

    /// This thread's Unified Buffer bytes per simulated core.
    pub fn ub_capacity(&self) -> u32 {
        // SAFETY: `uint32_t ta_shim_ub_capacity(void)`.
        let f: unsafe extern "C" fn() -> u32 = unsafe { self.function("ta_shim_ub_capacity") };
        // SAFETY: no arguments.
        unsafe { f() }
    }

    /// The cost model's figures for this thread's last launch.
    pub fn last_cost(&self) -> Cost {
        // SAFETY: `void ta_shim_last_cost(struct ta_shim_cost *)`.
        let f: unsafe extern "C" fn(*mut Cost) = unsafe { self.function("ta_shim_last_cost") };
        let mut c = Cost::default();
        // SAFETY: c is a live, writable struct with the C layout.
        unsafe { f(&mut c) };
        c
    }

    /// The cost model's clock (Hz), vector cores and HBM bandwidth (bytes/s).
    pub fn cost_params(&self) -> (f64, u32, f64) {
        type ParamsFn = unsafe extern "C" fn(*mut f64, *mut u32, *mut f64);
        // SAFETY: `void ta_shim_cost_params(double *, uint32_t *, double *)`.
        let f: ParamsFn = unsafe { self.function("ta_shim_cost_params") };
        let (mut clock, mut cores, mut hbm) = (0.0, 0u32, 0.0);
        // SAFETY: three live, writable values.
        unsafe { f(&mut clock, &mut cores, &mut hbm) };
        (clock, cores, hbm)
    }

    /// The cost model's measured rates: chip read and write bandwidth
    /// (bytes/s) and the issue cycles of one vector instruction.
    pub fn cost_rates(&self) -> (f64, f64, f64) {
        type RatesFn = unsafe extern "C" fn(*mut f64, *mut f64, *mut f64);
        // SAFETY: `void ta_shim_cost_rates(double *, double *, double *)`.
        let f: RatesFn = unsafe { self.function("ta_shim_cost_rates") };
        let (mut read, mut write, mut issue) = (0.0, 0.0, 0.0);
        // SAFETY: three live, writable values.
        unsafe { f(&mut read, &mut write, &mut issue) };
        (read, write, issue)
    }

    /// Launches a random kernel (bernoulli, dropout, dropout backward) on `x`.
    pub fn random<T: Element>(
        &self,
        entry: &str,
        blocks: u32,
        x: &mut [T],
        p: f32,
        rng: RngState,
        t: &Tiling,
    ) -> u32 {
        assert_eq!(t.total_length, x.len() as u64);
        // SAFETY: the signature of the random kernels' launch functions.
        let f: RandomFn = unsafe { self.function(&format!("{LAUNCH_PREFIX}{entry}")) };
        // SAFETY: x is valid for t.total_length elements of the kernel's
        // element type for the whole (synchronous) launch.
        unsafe {
            f(
                blocks,
                std::ptr::null_mut(),
                x.as_mut_ptr().cast(),
                p,
                rng.seed,
                rng.offset,
                t.total_length,
                t.block_length,
                t.tile_length,
            )
        }
    }

    /// Launches a dropout that also writes its keep mask
    /// (`ta_dropout_bitmask_*`): one bit per element into `bits`.
    #[allow(clippy::too_many_arguments)]
    pub fn random_bits<T: Element>(
        &self,
        entry: &str,
        blocks: u32,
        x: &mut [T],
        bits: &mut [u8],
        p: f32,
        rng: RngState,
        t: &Tiling,
    ) -> u32 {
        assert_eq!(t.total_length, x.len() as u64);
        assert_eq!(bits.len(), x.len().div_ceil(8));
        // SAFETY: the signature of the bit-mask dropout launch functions.
        let f: RandomBitsFn = unsafe { self.function(&format!("{LAUNCH_PREFIX}{entry}")) };
        // SAFETY: x holds total_length elements and bits total_length / 8
        // bytes (rounded up) for the whole synchronous launch.
        unsafe {
            f(
                blocks,
                std::ptr::null_mut(),
                x.as_mut_ptr().cast(),
                bits.as_mut_ptr().cast(),
                p,
                rng.seed,
                rng.offset,
                t.total_length,
                t.block_length,
                t.tile_length,
            )
        }
    }

    /// Launches a kernel with the apply_mask signature whose mask is bytes
    /// (`ta_apply_mask_u8_*`, one byte per element, or `ta_apply_bitmask_*`,
    /// one bit per element).
    pub fn apply_byte_mask<T: Element>(
        &self,
        entry: &str,
        blocks: u32,
        x: &mut [T],
        mask: &[u8],
        scale: f32,
        t: &Tiling,
    ) -> u32 {
        assert_eq!(t.total_length, x.len() as u64);
        let mask_len = if entry.contains("bitmask") {
            x.len().div_ceil(8)
        } else {
            x.len()
        };
        assert_eq!(mask.len(), mask_len, "{entry}: mask bytes");
        // SAFETY: the apply_mask launch signature.
        let f: MaskFn = unsafe { self.function(&format!("{LAUNCH_PREFIX}{entry}")) };
        // SAFETY: as for apply_mask: x and the mask (one byte or one bit per
        // element, checked above) are valid for the synchronous launch, the
        // mask only read.
        unsafe {
            f(
                blocks,
                std::ptr::null_mut(),
                x.as_mut_ptr().cast(),
                mask.as_ptr().cast_mut().cast(),
                scale,
                t.total_length,
                t.block_length,
                t.tile_length,
            )
        }
    }

    /// Launches apply_mask on `x` with `mask`.
    pub fn apply_mask<T: Element>(
        &self,
        entry: &str,
        blocks: u32,
        x: &mut [T],
        mask: &[T],
        scale: f32,
        t: &Tiling,
    ) -> u32 {
        assert_eq!(t.total_length, x.len() as u64);
        assert_eq!(mask.len(), x.len());
        // SAFETY: the signature of the apply_mask launch functions.
        let f: MaskFn = unsafe { self.function(&format!("{LAUNCH_PREFIX}{entry}")) };
        // SAFETY: x and mask are valid for total_length elements during the
        // synchronous launch; the kernel only reads mask, so casting away
        // const never leads to a write through it.
        unsafe {
            f(
                blocks,
                std::ptr::null_mut(),
                x.as_mut_ptr().cast(),
                mask.as_ptr().cast_mut().cast(),
                scale,
                t.total_length,
                t.block_length,
                t.tile_length,
            )
        }
    }

    /// Launches mul on `x` with `y`.
    pub fn mul<T: Element>(
        &self,
        entry: &str,
        blocks: u32,
        x: &mut [T],
        y: &[T],
        t: &Tiling,
    ) -> u32 {
        assert_eq!(t.total_length, x.len() as u64);
        assert_eq!(y.len(), x.len());
        // SAFETY: the signature of the mul launch functions.
        let f: MulFn = unsafe { self.function(&format!("{LAUNCH_PREFIX}{entry}")) };
        // SAFETY: as for apply_mask: valid buffers, y only read.
        unsafe {
            f(
                blocks,
                std::ptr::null_mut(),
                x.as_mut_ptr().cast(),
                y.as_ptr().cast_mut().cast(),
                t.total_length,
                t.block_length,
                t.tile_length,
            )
        }
    }

    /// Launches mul_scalar on `x`.
    pub fn mul_scalar<T: Element>(
        &self,
        entry: &str,
        blocks: u32,
        x: &mut [T],
        s: f32,
        t: &Tiling,
    ) -> u32 {
        assert_eq!(t.total_length, x.len() as u64);
        // SAFETY: the signature of the mul_scalar launch functions.
        let f: ScalarFn = unsafe { self.function(&format!("{LAUNCH_PREFIX}{entry}")) };
        // SAFETY: x is valid for total_length elements during the launch.
        unsafe {
            f(
                blocks,
                std::ptr::null_mut(),
                x.as_mut_ptr().cast(),
                s,
                t.total_length,
                t.block_length,
                t.tile_length,
            )
        }
    }

    /// Launches self-test kernel `rule` on `x`.
    pub fn selftest_rule(&self, blocks: u32, x: &mut [f32], rule: u32) -> u32 {
        type SelftestFn = unsafe extern "C" fn(u32, *mut c_void, *mut c_void, u32, u64) -> u32;
        // SAFETY: `aclrtlaunch_ta_selftest(uint32_t, void*, void*, uint32_t, uint64_t)`.
        let f: SelftestFn = unsafe { self.function("aclrtlaunch_ta_selftest") };
        // SAFETY: x is valid for x.len() floats during the launch, and the
        // self-test kernels bound every access by the length passed.
        unsafe {
            f(
                blocks,
                std::ptr::null_mut(),
                x.as_mut_ptr().cast(),
                rule,
                x.len() as u64,
            )
        }
    }
}
