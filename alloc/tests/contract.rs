//! The C ABI beyond alloc/free, driven as the extensions drive it:
//! device statistics, `empty_cache`, the memory fraction and `cache_info`.
//! One process-wide allocator: the tests take turns.

use std::ffi::{CString, c_char};
use std::sync::Mutex;

use tensor_arena_alloc::ffi::*;

static TURN: Mutex<()> = Mutex::new(());

fn configure(json: &str) {
    assert!(tensor_arena_reset() >= 0);
    let c = CString::new(json).unwrap();
    // SAFETY: a NUL-terminated string.
    assert_eq!(unsafe { tensor_arena_configure(c.as_ptr()) }, 0);
}

fn read(f: unsafe extern "C" fn(*mut c_char, usize) -> usize) -> String {
    // SAFETY: a null buffer with capacity 0 only asks for the length.
    let n = unsafe { f(std::ptr::null_mut(), 0) };
    let mut buf = vec![0u8; n + 1];
    // SAFETY: `buf` holds n + 1 writable bytes.
    assert_eq!(unsafe { f(buf.as_mut_ptr().cast(), buf.len()) }, n);
    buf.truncate(n);
    String::from_utf8(buf).unwrap()
}

fn device_stats() -> serde_json::Value {
    serde_json::from_str(&read(tensor_arena_device_stats_json)).unwrap()
}

fn stats() -> serde_json::Value {
    serde_json::from_str(&read(tensor_arena_stats_json)).unwrap()
}

fn reserved() -> u64 {
    device_stats()["reserved_bytes"]["all"]["current"]
        .as_u64()
        .unwrap()
}

fn alloc(n: usize) -> *mut u8 {
    tensor_arena_alloc(n, 0, std::ptr::null_mut()).cast()
}

fn free(p: *mut u8) {
    tensor_arena_free(p.cast(), 0, 0, std::ptr::null_mut());
}

#[test]
fn empty_cache_gives_back_cached_segments_and_idle_slabs_and_keeps_live_blocks() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    configure(
        r#"{"backend": "cpu", "log_errors": false, "warmup_steps": 1, "record_steps": 1, "exact_before_plan": false}"#,
    );
    // A live block outside steps (host memory: its bytes can be checked).
    let kept = alloc(5000);
    // SAFETY: 5000 writable bytes the allocator gave.
    unsafe { std::ptr::write_bytes(kept, 0xAB, 5000) };
    for _ in 0..4 {
        assert_eq!(tensor_arena_step_begin(), 0);
        let x = alloc(3 << 20);
        let y = alloc(100_000);
        free(x);
        free(y);
        assert_eq!(tensor_arena_step_end(), 0);
    }
    assert_eq!(stats()["phase"], "serving");
    // Between steps the slab holds no live block: all of it is one free
    // gap, larger than anything the fallback caches (the kept block's
    // 2 MiB segment).
    let slab = stats()["slab_bytes"].as_u64().unwrap();
    assert!(slab > 2 << 20);
    assert!(tensor_arena_cache_info() as u64 >= slab);
    // Cached fallback memory: blocks freed between steps.
    let tmp: Vec<*mut u8> = (0..4).map(|_| alloc(4 << 20)).collect();
    tmp.into_iter().for_each(free);
    let before = reserved();
    let live = stats()["live_blocks"].as_u64().unwrap();
    tensor_arena_empty_cache();
    let after = reserved();
    assert!(after < before, "reserved {before} -> {after}");
    assert_eq!(stats()["live_blocks"].as_u64().unwrap(), live);
    // SAFETY: the kept block is still live: 5000 readable bytes.
    let bytes = unsafe { std::slice::from_raw_parts(kept, 5000) };
    assert!(bytes.iter().all(|&b| b == 0xAB));
    // The idle slab went back too; the next step reserves it again and
    // the plan serves.
    let served = stats()["served_from_plan"].as_u64().unwrap();
    assert_eq!(stats()["slab_bytes"], 0);
    assert_eq!(tensor_arena_step_begin(), 0);
    let x = alloc(3 << 20);
    free(x);
    assert_eq!(tensor_arena_step_end(), 0);
    assert_eq!(stats()["served_from_plan"].as_u64().unwrap(), served + 1);
    free(kept);
    assert_eq!(tensor_arena_reset(), 0);
}

/// `MemTotal` of /proc/meminfo (the host backing's capacity, or more).
fn host_total() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap();
    let line = text.lines().find(|l| l.starts_with("MemTotal:")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
}

#[test]
fn memory_fraction_caps_reserved_bytes_and_answers_null_past_it() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    configure(r#"{"backend": "cpu", "log_errors": false, "exact_before_plan": false}"#);
    assert_eq!(tensor_arena_set_memory_fraction(1.5, 0), -1);
    assert!(read(tensor_arena_last_error).contains("0 and 1"));
    assert_eq!(tensor_arena_set_memory_fraction(f64::NAN, 0), -1);
    // At most 64 MiB.
    let cap = 64u64 << 20;
    assert_eq!(
        tensor_arena_set_memory_fraction(cap as f64 / host_total() as f64, 0),
        0
    );
    let mut blocks = Vec::new();
    let mut refused = false;
    for _ in 0..64 {
        let p = alloc(3 << 20);
        if p.is_null() {
            refused = true;
            break;
        }
        blocks.push(p);
    }
    assert!(refused, "no NULL within 192 MiB under a 64 MiB cap");
    assert!(reserved() <= cap);
    let e = read(tensor_arena_last_error);
    assert!(e.contains("out of memory"), "{e}");
    assert_eq!(device_stats()["num_ooms"], 1);
    // Freed blocks stay cached; a request they cannot serve empties the
    // cache and tries again, as torch's caching allocator does.
    blocks.into_iter().for_each(free);
    let big = alloc(24 << 20);
    assert!(!big.is_null(), "{}", read(tensor_arena_last_error));
    free(big);
    // cacheInfo: the largest cached free block.
    assert!(tensor_arena_cache_info() >= 24 << 20);
    tensor_arena_reset_accumulated_stats();
    assert_eq!(device_stats()["num_ooms"], 0);
    assert_eq!(tensor_arena_reset(), 0);
}

#[test]
fn peak_stats_reset_to_current() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    configure(r#"{"backend": "cpu", "log_errors": false}"#);
    let a = alloc(1 << 20);
    let b = alloc(1 << 20);
    free(b);
    let d = device_stats();
    assert_eq!(d["requested_bytes"]["all"]["peak"], 2 << 20);
    tensor_arena_reset_peak_stats();
    assert_eq!(device_stats()["requested_bytes"]["all"]["peak"], 1 << 20);
    free(a);
    assert_eq!(tensor_arena_reset(), 0);
}
