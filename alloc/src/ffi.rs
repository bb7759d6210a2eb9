//! The C ABI: torch's pluggable-allocator pair and the control functions,
//! over one process-wide allocator behind a mutex. Nothing unwinds across
//! the boundary: a panic is caught, counted as an error and answered like
//! a failure. Forks are handled (`fork`: no lock held across one, the
//! child serves from a pool of its own), the plan follows the thread that
//! steps (`threads`), and `step_end` waits for the planner's thread off
//! the lock.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::allocator::PlannedAllocator;
use crate::config::Config;
use crate::report;
use crate::request_phase::RequestPhase;

// pthread_atfork handlers and the forked child's pool.
mod fork;
// The thread the plan follows.
mod threads;
pub use threads::ROUTE_BY_THREAD;

/// The environment variable holding the configuration JSON used when
/// `tensor_arena_configure` was never called. With neither, every call
/// fails (NULL, -1) and says so in `tensor_arena_last_error`.
pub const CONFIG_ENV: &str = "TENSOR_ARENA_ALLOC_CONFIG";

struct Global {
    config: Option<Config>,
    allocator: Option<PlannedAllocator>,
    last_error: String,
    /// In a forked child: what serves (the allocator above only reports).
    child: Option<fork::ChildPool>,
    /// The thread the plan follows.
    thread: threads::StepThread,
}

static GLOBAL: Mutex<Global> = Mutex::new(Global {
    config: None,
    allocator: None,
    last_error: String::new(),
    child: None,
    thread: threads::StepThread::new(),
});

fn global() -> MutexGuard<'static, Global> {
    fork::register();
    // A panic while holding the lock was caught at the boundary; the state
    // it left is still consistent enough to report and reset.
    GLOBAL.lock().unwrap_or_else(|e| e.into_inner())
}

impl Global {
    /// The allocator, opened with the configured (or environment, or
    /// default) settings at first use.
    fn allocator(&mut self) -> Option<&mut PlannedAllocator> {
        self.allocator_for(None)
    }

    /// The allocator, opened at first use for `device` (the first
    /// request's) unless the configuration names one.
    fn allocator_for(&mut self, device: Option<i32>) -> Option<&mut PlannedAllocator> {
        if self.allocator.is_none() {
            // Unconfigured, the library serves nothing: host pages handed to
            // a CUDA or NPU tensor would be a crash, not a fallback.
            let config = match (self.config.clone(), std::env::var(CONFIG_ENV)) {
                (Some(c), _) => Ok(c),
                (None, Ok(text)) => Config::from_json(&text),
                (None, Err(_)) => Err(crate::Error::Config {
                    config: String::new(),
                    reason: format!(
                        "the allocator is not configured: call tensor_arena_configure with at least {{\"backend\": \"cpu\" | \"cuda\" | \"npu\"}}, or set {CONFIG_ENV} to that JSON before the first allocation"
                    ),
                }),
            };
            let config = config.map(|mut c| {
                c.device = c.device.or(device.filter(|&d| d >= 0));
                c
            });
            match config.and_then(PlannedAllocator::new) {
                Ok(a) => self.allocator = Some(a),
                Err(e) => {
                    if self.last_error.is_empty() {
                        eprintln!("tensor-arena allocator: {e}");
                    }
                    self.last_error = e.to_string();
                    return None;
                }
            }
        }
        self.allocator.as_mut()
    }
}

fn guarded<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        global().last_error = "a panic inside the allocator was caught".to_owned();
        fallback
    })
}

/// Writes `text` and a NUL into `buf` (at most `cap` bytes); returns the
/// text's full length.
///
/// # Safety
/// `buf` is null or valid for `cap` writable bytes.
unsafe fn write_out(text: &str, buf: *mut c_char, cap: usize) -> usize {
    if !buf.is_null() && cap > 0 {
        let n = text.len().min(cap - 1);
        // SAFETY: `buf` holds `cap` bytes (the caller's promise) and
        // `n + 1 <= cap`; the source is a distinct Rust string.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
    }
    text.len()
}

/// Allocates `size` bytes for `device` on `stream` (torch's
/// pluggable-allocator signature), a request of phase 0 read (the mark of
/// `tensor_arena_set_phase` still makes it eval). NULL when out of memory,
/// for size 0 and for bad input (counted in the stats' `errors`).
#[unsafe(no_mangle)]
pub extern "C" fn tensor_arena_alloc(
    size: usize,
    device: c_int,
    stream: *mut c_void,
) -> *mut c_void {
    guarded(std::ptr::null_mut(), || {
        // No phase read at the request: training, unless the caller's
        // mark (tensor_arena_set_phase) says eval.
        alloc_in(
            &mut global(),
            size,
            device,
            stream,
            RequestPhase::Train,
            false,
        )
    })
}

/// One request through the process-wide allocator: its address, or NULL
/// with the reason in `last_error` (torch raises its out-of-memory error;
/// this is the why).
fn alloc_in(
    g: &mut Global,
    size: usize,
    device: c_int,
    stream: *mut c_void,
    read: RequestPhase,
    routed: bool,
) -> *mut c_void {
    if let Some(child) = g.child.as_mut() {
        return match child.alloc(size) {
            Ok(addr) => addr as *mut c_void,
            Err(why) => {
                g.last_error = why;
                std::ptr::null_mut()
            }
        };
    }
    let outside = routed && g.thread.route_outside();
    let Some(a) = g.allocator_for(Some(device)) else {
        return std::ptr::null_mut();
    };
    let got = if outside {
        // (Its phase reading is not the step's: the step's phase stays.)
        a.alloc_unstepped(size, device, stream as usize)
    } else {
        a.alloc_phase(size, device, stream as usize, read)
    };
    match got {
        Some(addr) => addr as *mut c_void,
        None => {
            let why = a.last_null_reason().to_owned();
            g.last_error = why;
            std::ptr::null_mut()
        }
    }
}

/// `tensor_arena_alloc` of a request made in `phase`, as the caller read
/// it at the request (0 train, 1 eval: the device extensions pass torch's
/// grad mode): the request is made in eval when `phase` or the mark of
/// `tensor_arena_set_phase` is eval. [`ROUTE_BY_THREAD`] (2) added to the
/// phase says the request was made outside autograd's backward: made on a
/// thread other than the step's, it is served outside the step (docs:
/// "Threads"). Any other value is bad input: NULL, the reason in
/// `tensor_arena_last_error`.
#[unsafe(no_mangle)]
pub extern "C" fn tensor_arena_alloc_phase(
    size: usize,
    device: c_int,
    stream: *mut c_void,
    phase: c_int,
) -> *mut c_void {
    guarded(std::ptr::null_mut(), || {
        let mut g = global();
        let routed = (phase & !1) == ROUTE_BY_THREAD;
        let code = if routed { phase & 1 } else { phase };
        let read = match RequestPhase::from_code(i64::from(code)) {
            Ok(p) => p,
            Err(e) => {
                g.last_error = e.to_string();
                return std::ptr::null_mut();
            }
        };
        alloc_in(&mut g, size, device, stream, read, routed)
    })
}

/// Marks the phase of the requests that follow: 0 train, 1 eval (an eval
/// pass the caller knows of; a mark of eval holds whatever the extensions
/// read at the requests, a mark of train leaves the phase to that
/// reading). 0 on success, -1 for any other value (the reason in
/// `tensor_arena_last_error`) or when the allocator cannot open.
#[unsafe(no_mangle)]
pub extern "C" fn tensor_arena_set_phase(phase: c_int) -> c_int {
    guarded(-1, || {
        let mut g = global();
        let phase = match RequestPhase::from_code(i64::from(phase)) {
            Ok(p) => p,
            Err(e) => {
                g.last_error = e.to_string();
                return -1;
            }
        };
        match g.allocator() {
            Some(a) => {
                a.set_request_phase(phase);
                0
            }
            None => -1,
        }
    })
}

/// Frees a block `tensor_arena_alloc` gave; `size` may be 0 (CPU deleters
/// do not know it). Unknown pointers and double frees are counted, never
/// acted on.
#[unsafe(no_mangle)]
pub extern "C" fn tensor_arena_free(
    ptr: *mut c_void,
    _size: usize,
    _device: c_int,
    _stream: *mut c_void,
) {
    guarded((), || {
        let mut g = global();
        if let Some(child) = g.child.as_mut() {
            child.free(ptr as usize);
        } else if let Some(a) = g.allocator.as_mut() {
            a.free(ptr as usize);
        }
    })
}

/// Sets the configuration (a JSON object, docs/allocator.md) before the
/// first allocation. 0 on success, -1 on error.
///
/// # Safety
/// `json` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tensor_arena_configure(json: *const c_char) -> c_int {
    let text = if json.is_null() {
        String::new()
    } else {
        // SAFETY: a NUL-terminated string, the caller's promise.
        unsafe { CStr::from_ptr(json) }
            .to_string_lossy()
            .into_owned()
    };
    guarded(-1, || {
        let mut g = global();
        if let Some(a) = g.allocator.as_ref()
            && a.requests() > 0
        {
            g.last_error = crate::Error::AlreadyStarted {
                requests: a.requests(),
            }
            .to_string();
            return -1;
        }
        match Config::from_json(&text) {
            Ok(c) => {
                g.config = Some(c);
                g.allocator = None;
                0
            }
            Err(e) => {
                g.last_error = e.to_string();
                -1
            }
        }
    })
}

fn step_call(f: fn(&mut PlannedAllocator) -> crate::Result<()>, ends: bool) -> c_int {
    guarded(-1, || {
        let mut g = global();
        if let Some(child) = g.child.as_mut() {
            return child.step_call();
        }
        // The planner's thread is waited for off the lock: other threads'
        // requests go on meanwhile (the join in step_end is then at once).
        let mut pause = Duration::from_micros(20);
        while ends
            && g.allocator
                .as_ref()
                .is_some_and(PlannedAllocator::planner_busy)
        {
            drop(g);
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(1));
            g = global();
        }
        g.thread.stepped();
        let result = match g.allocator() {
            Some(a) => f(a).map_err(|e| e.to_string()),
            None => return -1,
        };
        match result {
            Ok(()) => 0,
            Err(e) => {
                g.last_error = e;
                -1
            }
        }
    })
}

/// A step begins. 0 on success, -1 inside a step already.
#[unsafe(no_mangle)]
pub extern "C" fn tensor_arena_step_begin() -> c_int {
    step_call(PlannedAllocator::step_begin, false)
}

/// The step ends (recording, planning and re-planning happen here). 0 on
/// success, -1 outside a step.
#[unsafe(no_mangle)]
pub extern "C" fn tensor_arena_step_end() -> c_int {
    step_call(PlannedAllocator::step_end, true)
}

/// Drops plans, slabs and caches, forgets the step thread and starts
/// over: 0. With blocks still
/// live it refuses and releases nothing: -1, the count and bytes in
/// `tensor_arena_last_error` (their memory is still in use). In a forked
/// child: 0, nothing done.
#[unsafe(no_mangle)]
pub extern "C" fn tensor_arena_reset() -> c_int {
    guarded(-1, || {
        let mut g = global();
        if g.child.is_some() {
            return 0;
        }
        let result = match g.allocator.as_mut() {
            Some(a) => a.try_reset(),
            None => Ok(()),
        };
        match result {
            Ok(()) => {
                // The step thread is found again from the next step call.
                g.thread = threads::StepThread::new();
                0
            }
            Err(e) => {
                g.last_error = e.to_string();
                -1
            }
        }
    })
}

/// Names the calling thread as the one the plan follows (`on` 1), or lets
/// the step calls decide again (0: the thread that last began or ended a
/// step). 0 on success.
#[unsafe(no_mangle)]
pub extern "C" fn tensor_arena_set_step_thread(on: c_int) -> c_int {
    guarded(-1, || {
        global().thread.name(on != 0);
        0
    })
}

fn json_call(buf: *mut c_char, cap: usize, f: fn(&mut Global) -> String) -> usize {
    let text = guarded(String::new(), || f(&mut global()));
    // SAFETY: forwarded from the exported function's contract.
    unsafe { write_out(&text, buf, cap) }
}

/// The stats JSON (docs/allocator.md lists its keys); returns its length.
///
/// # Safety
/// `buf` is null or valid for `cap` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tensor_arena_stats_json(buf: *mut c_char, cap: usize) -> usize {
    json_call(buf, cap, |g| {
        let child = g.child.as_ref().map(fork::ChildPool::json);
        let mut threads = g.thread.json();
        threads["planner_running"] = g
            .allocator
            .as_ref()
            .is_some_and(PlannedAllocator::planner_busy)
            .into();
        match g.allocator() {
            Some(a) => {
                let mut stats = serde_json::to_value(a.stats()).unwrap_or_default();
                if let Some(map) = stats.as_object_mut() {
                    let fork = child.unwrap_or_else(|| serde_json::json!({"child": false}));
                    map.insert("fork".to_owned(), fork);
                    map.insert("threads".to_owned(), threads);
                }
                stats.to_string()
            }
            None => "{}".to_owned(),
        }
    })
}

/// The report JSON (`stats`, `plan`, `text`); returns its length.
///
/// # Safety
/// `buf` is null or valid for `cap` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tensor_arena_report_json(buf: *mut c_char, cap: usize) -> usize {
    json_call(buf, cap, |g| match g.allocator() {
        Some(a) => report::json(a).to_string(),
        None => "{}".to_owned(),
    })
}

/// A snapshot in the shape of `torch.cuda.memory._snapshot()`; returns its
/// length.
///
/// # Safety
/// `buf` is null or valid for `cap` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tensor_arena_snapshot_json(buf: *mut c_char, cap: usize) -> usize {
    json_call(buf, cap, |g| match g.allocator() {
        Some(a) => {
            let device = a.device();
            report::snapshot(a, device).to_string()
        }
        None => "{}".to_owned(),
    })
}

/// The last control-path error message; returns its length.
///
/// # Safety
/// `buf` is null or valid for `cap` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tensor_arena_last_error(buf: *mut c_char, cap: usize) -> usize {
    json_call(buf, cap, |g| g.last_error.clone())
}

fn control_call(f: impl FnOnce(&mut PlannedAllocator)) {
    guarded((), || {
        let mut g = global();
        // In a forked child the parent's allocator only reports.
        if g.child.is_none()
            && let Some(a) = g.allocator()
        {
            f(a);
        }
    })
}

/// The statistics in the schema of torch's caching allocator (the nested
/// dict of `torch._C._cuda_memoryStats`; docs/allocator.md, "Device
/// statistics"); returns its length. `{}` when the allocator cannot open.
///
/// # Safety
/// `buf` is null or valid for `cap` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tensor_arena_device_stats_json(buf: *mut c_char, cap: usize) -> usize {
    json_call(buf, cap, |g| match g.allocator() {
        Some(a) => a.device_stats().to_json().to_string(),
        None => "{}".to_owned(),
    })
}

/// Every peak of the device statistics back to its current value
/// (torch's `resetPeakStats`).
#[unsafe(no_mangle)]
pub extern "C" fn tensor_arena_reset_peak_stats() {
    control_call(PlannedAllocator::reset_peak_stats)
}

/// The `allocated` / `freed` totals and the plain counters of the device
/// statistics back to 0 (torch's `resetAccumulatedStats`).
#[unsafe(no_mangle)]
pub extern "C" fn tensor_arena_reset_accumulated_stats() {
    control_call(PlannedAllocator::reset_accumulated_stats)
}

/// Marks the live block at `ptr` as used on `stream` (a `cudaStream_t` or
/// `aclrtStream`): at its free its bytes wait for an event recorded there
/// (torch's `recordStream`). Unknown pointers are ignored.
#[unsafe(no_mangle)]
pub extern "C" fn tensor_arena_record_stream(ptr: *mut c_void, stream: *mut c_void) {
    control_call(|a| {
        a.record_stream(ptr as usize, stream as usize);
    })
}

/// Forgets that the block at `ptr` is used on `stream` (torch_npu's
/// `eraseStream`); a freed block waiting only for that stream completes.
#[unsafe(no_mangle)]
pub extern "C" fn tensor_arena_erase_stream(ptr: *mut c_void, stream: *mut c_void) {
    control_call(|a| {
        a.erase_stream(ptr as usize, stream as usize);
    })
}

/// Gives cached free segments and idle slabs back to the device; waits for
/// nothing (torch's `emptyCache`).
#[unsafe(no_mangle)]
pub extern "C" fn tensor_arena_empty_cache() {
    control_call(PlannedAllocator::empty_cache)
}

/// Caps reserved bytes at `fraction` of device `device`'s memory (torch's
/// `set_per_process_memory_fraction`). 0 on success, -1 for a fraction
/// outside 0..=1, another device, or a device that does not tell its
/// capacity (the reason in `tensor_arena_last_error`).
#[unsafe(no_mangle)]
pub extern "C" fn tensor_arena_set_memory_fraction(fraction: f64, device: c_int) -> c_int {
    guarded(-1, || {
        let mut g = global();
        let result = match g.allocator_for(Some(device)) {
            Some(a) => a.set_memory_fraction(fraction, device),
            None => return -1,
        };
        match result {
            Ok(()) => 0,
            Err(e) => {
                g.last_error = e.to_string();
                -1
            }
        }
    })
}

/// The largest free block in bytes: the plan's largest gap no live or
/// waiting block holds, or the caching pools' largest cached free block
/// (what torch's `cacheInfo` reports; cuDNN's benchmark mode sizes its
/// workspace with it). 0 when the allocator cannot open.
#[unsafe(no_mangle)]
pub extern "C" fn tensor_arena_cache_info() -> usize {
    guarded(0, || match global().allocator() {
        Some(a) => a.cache_info() as usize,
        None => 0,
    })
}
