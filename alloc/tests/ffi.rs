//! The exported C functions, driven as torch drives them: a recorded
//! trace replayed through `tensor_arena_alloc` / `tensor_arena_free` and
//! the step calls, on host pages and on the simulated ACL runtime (the
//! NPU backing's `aclrtMalloc` path). One process-wide allocator: the
//! tests take turns.

use std::collections::HashMap;
use std::ffi::{CString, c_char};
use std::sync::Mutex;

use tensor_arena_alloc::ffi::*;
use tensor_arena_alloc::trace::{self, TraceEvent};

static TURN: Mutex<()> = Mutex::new(());

/// A trace of a real run: GPT-2 (transformers, a small config) trained
/// with AdamW on the CPU with the allocator installed (see
/// tests/data/README.md).
const GPT2_TRACE: &str = include_str!("data/gpt2_cpu_trace.csv");

fn configure(json: &str) {
    assert!(tensor_arena_reset() >= 0);
    let c = CString::new(json).unwrap();
    // SAFETY: a NUL-terminated string.
    let rc = unsafe { tensor_arena_configure(c.as_ptr()) };
    assert_eq!(rc, 0, "{}", last_error());
}

fn read(f: unsafe extern "C" fn(*mut c_char, usize) -> usize) -> String {
    // SAFETY: a null buffer with capacity 0 only asks for the length.
    let n = unsafe { f(std::ptr::null_mut(), 0) };
    let mut buf = vec![0u8; n + 1];
    // SAFETY: `buf` holds n + 1 writable bytes.
    let m = unsafe { f(buf.as_mut_ptr().cast(), buf.len()) };
    assert_eq!(m, n);
    buf.truncate(n);
    String::from_utf8(buf).unwrap()
}

fn last_error() -> String {
    read(tensor_arena_last_error)
}

fn stats() -> serde_json::Value {
    serde_json::from_str(&read(tensor_arena_stats_json)).unwrap()
}

/// Replays the trace; returns how many steps it ran.
fn replay(events: &[TraceEvent]) -> u64 {
    let mut live: HashMap<usize, usize> = HashMap::new();
    let mut steps = 0;
    for e in events {
        match *e {
            TraceEvent::StepBegin => assert_eq!(tensor_arena_step_begin(), 0),
            TraceEvent::StepEnd => {
                assert_eq!(tensor_arena_step_end(), 0);
                steps += 1;
            }
            TraceEvent::Alloc { addr, size, stream } => {
                let p = tensor_arena_alloc(size, 0, stream as *mut _);
                assert!(!p.is_null() || size == 0, "{size} bytes: {}", last_error());
                if !p.is_null() {
                    live.insert(addr, p as usize);
                }
            }
            TraceEvent::Free { addr, .. } => {
                if let Some(p) = live.remove(&addr) {
                    tensor_arena_free(p as *mut _, 0, 0, std::ptr::null_mut());
                }
            }
            TraceEvent::Phase(p) => assert_eq!(tensor_arena_set_phase(p.code() as i32), 0),
            TraceEvent::SegmentAlloc { .. } | TraceEvent::SegmentFree { .. } => {}
        }
    }
    for (_, p) in live {
        tensor_arena_free(p as *mut _, 0, 0, std::ptr::null_mut());
    }
    steps
}

fn check_served(s: &serde_json::Value) {
    assert_eq!(s["phase"], "serving", "{s}");
    let after = s["requests_after_warmup"].as_u64().unwrap();
    assert!(after > 0);
    assert_eq!(s["served_from_plan"].as_u64().unwrap(), after, "{s}");
    assert_eq!(s["fallback_allocations_max_step"], 0);
    assert_eq!(s["backing_reservations_last_step"], 0);
    let ratio = s["slab_ratio"].as_f64().unwrap();
    assert!((1.0..=1.01).contains(&ratio), "{ratio}");
    assert_eq!(s["live_blocks"], 0, "everything freed");
}

#[test]
fn a_recorded_gpt2_trace_through_the_c_abi_on_host_pages() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let events = trace::parse(GPT2_TRACE).unwrap();
    configure(r#"{"backend": "cpu", "log_errors": false}"#);
    let steps = replay(&events);
    assert!(steps >= 5);
    check_served(&stats());
    let report: serde_json::Value = serde_json::from_str(&read(tensor_arena_report_json)).unwrap();
    assert!(
        report["text"]
            .as_str()
            .unwrap()
            .contains("served from the plan")
    );
    let snap: serde_json::Value = serde_json::from_str(&read(tensor_arena_snapshot_json)).unwrap();
    assert!(!snap["segments"].as_array().unwrap().is_empty());
    assert_eq!(tensor_arena_reset(), 0);
}

#[test]
fn the_npu_backing_serves_the_trace_on_the_simulated_acl_runtime() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tensor_arena::device::ascend::SIMULATED_RUNTIME_DIR.expect(
        "the simulated ACL runtime is built with the crate when g++ exists (apt-get install g++)",
    );
    let events = trace::parse(GPT2_TRACE).unwrap();
    // A range of 1 GiB, not the device's capacity: under valgrind (CI's
    // memcheck pass) a reservation of the whole simulated HBM fails and
    // the backing would fall back to regions of their own.
    configure(&format!(
        r#"{{"backend": "npu", "log_errors": false, "npu_runtime_lib": "{dir}/libascendcl.so", "range_bytes": 1073741824}}"#
    ));
    replay(&events);
    let s = stats();
    assert!(s["backing"].as_str().unwrap().starts_with("ascend"), "{s}");
    check_served(&s);
    // The policy over the NPU backing's mapped ranges (the default): one
    // reserved address range (`aclrtReserveMemAddress`), pages mapped
    // (`aclrtMapMem`), no region of its own (`aclrtMalloc`).
    let calls = &s["backing_calls"];
    assert!(calls["reserve_address"].as_u64().unwrap() >= 1, "{s}");
    assert!(calls["map"].as_u64().unwrap() >= 1, "{s}");
    assert_eq!(calls["reserve"], 0, "{s}");
    assert_eq!(tensor_arena_reset(), 0);
}

#[test]
fn the_npu_backend_without_cann_fails_clearly() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    configure(
        r#"{"backend": "npu", "log_errors": false, "npu_runtime_lib": "/nonexistent/libascendcl.so"}"#,
    );
    assert!(tensor_arena_alloc(4096, 0, std::ptr::null_mut()).is_null());
    let e = last_error();
    assert!(e.contains("libascendcl.so"), "{e}");
    configure(r#"{"backend": "cpu"}"#);
}

#[test]
fn bad_input_through_the_c_abi_is_counted() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    configure(r#"{"backend": "cpu", "log_errors": false}"#);
    assert!(tensor_arena_alloc(0, 0, std::ptr::null_mut()).is_null());
    assert!(tensor_arena_alloc(usize::MAX / 4, 0, std::ptr::null_mut()).is_null());
    assert!(
        last_error().contains("the device has"),
        "the NULL's reason: {}",
        last_error()
    );
    let p = tensor_arena_alloc(100, 0, std::ptr::null_mut());
    assert!(!p.is_null());
    tensor_arena_free(p, 100, 0, std::ptr::null_mut());
    tensor_arena_free(p, 100, 0, std::ptr::null_mut());
    tensor_arena_free(0x10 as *mut _, 1, 0, std::ptr::null_mut());
    assert_eq!(tensor_arena_step_end(), -1);
    assert!(last_error().contains("step_end"));
    let e = stats()["errors"].clone();
    assert_eq!(
        (
            &e["zero_size"],
            &e["too_large"],
            &e["double_free"],
            &e["unknown_free"],
            &e["step_order"]
        ),
        (&1.into(), &1.into(), &1.into(), &1.into(), &1.into()),
        "{e}"
    );
    let c = CString::new(r#"{"backend": "cpu"}"#).unwrap();
    // SAFETY: a NUL-terminated string.
    let rc = unsafe { tensor_arena_configure(c.as_ptr()) };
    assert_eq!(rc, -1, "requests were served");
    let bad = CString::new(r#"{"bogus": 1}"#).unwrap();
    assert_eq!(tensor_arena_reset(), 0);
    // SAFETY: a NUL-terminated string.
    assert_eq!(unsafe { tensor_arena_configure(bad.as_ptr()) }, -1);
    assert!(last_error().contains("bogus"));
}

#[test]
fn request_phases_through_the_c_abi_and_bad_phases_refused() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    configure(r#"{"backend": "cpu", "log_errors": false}"#);
    for bad in [2, -1, 7, i32::MIN] {
        assert_eq!(tensor_arena_set_phase(bad), -1);
        let why = last_error();
        assert!(
            why.contains(&format!("request phase {bad}")) && why.contains("0 (train) or 1 (eval)"),
            "{why}"
        );
    }
    // 2 and 3 are the phases with ROUTE_BY_THREAD (tests/threads.rs).
    for bad in [4, -1, 7, i32::MIN] {
        assert!(tensor_arena_alloc_phase(100, 0, std::ptr::null_mut(), bad).is_null());
        assert!(last_error().contains("0 (train) or 1 (eval)"));
    }
    // Refused phases counted no request.
    assert_eq!(stats()["requests"], 0);

    // The phases requests get, as the trace records them: a reading of
    // eval, a plain alloc (read as train), a mark of eval that holds over
    // a reading of train, the mark taken back.
    let dir = std::env::temp_dir().join(format!("ta-ffi-phase-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.csv");
    configure(&format!(
        r#"{{"backend": "cpu", "log_errors": false, "trace": "{}"}}"#,
        path.display()
    ));
    let null = std::ptr::null_mut();
    assert_eq!(tensor_arena_step_begin(), 0);
    let mut got = vec![tensor_arena_alloc_phase(100, 0, null, 1)];
    got.push(tensor_arena_alloc(100, 0, null));
    assert_eq!(tensor_arena_set_phase(1), 0);
    got.push(tensor_arena_alloc_phase(100, 0, null, 0));
    assert_eq!(tensor_arena_set_phase(0), 0);
    got.push(tensor_arena_alloc_phase(100, 0, null, 0));
    for &p in &got {
        assert!(!p.is_null());
        tensor_arena_free(p, 100, 0, null);
    }
    assert_eq!(stats()["requests"], 4);
    // The step's end flushes the trace.
    assert_eq!(tensor_arena_step_end(), 0);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("phase") || l.starts_with("alloc"))
        .map(|l| if l.starts_with("alloc") { "alloc" } else { l })
        .collect();
    assert_eq!(
        lines,
        [
            "phase,0,1,0",
            "alloc",
            "phase,0,0,0",
            "alloc",
            "phase,0,1,0",
            "alloc",
            "phase,0,0,0",
            "alloc"
        ]
    );
}
