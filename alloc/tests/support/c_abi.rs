//! The C ABI's configure and JSON getters, as the tests that drive the
//! one process-wide allocator through it call them (fork.rs, threads.rs).

use std::ffi::{CString, c_char};

use tensor_arena_alloc::ffi::*;

/// Resets the allocator (no live blocks) and configures it with `json`.
pub fn configure(json: &str) {
    assert_eq!(tensor_arena_reset(), 0, "{}", last_error());
    let c = CString::new(json).unwrap();
    // SAFETY: a NUL-terminated string.
    assert_eq!(unsafe { tensor_arena_configure(c.as_ptr()) }, 0);
}

/// A JSON getter's whole text.
pub fn read(f: unsafe extern "C" fn(*mut c_char, usize) -> usize) -> String {
    // SAFETY: a null buffer with capacity 0 only asks for the length.
    let mut n = unsafe { f(std::ptr::null_mut(), 0) };
    loop {
        // (Room to spare: the text may grow between the calls.)
        let mut buf = vec![0u8; n + 64];
        // SAFETY: `buf` holds its length in writable bytes.
        let m = unsafe { f(buf.as_mut_ptr().cast(), buf.len()) };
        if m < buf.len() {
            buf.truncate(m);
            return String::from_utf8(buf).unwrap();
        }
        n = m;
    }
}

/// The last error's message.
pub fn last_error() -> String {
    read(tensor_arena_last_error)
}

/// The stats as JSON.
pub fn stats() -> serde_json::Value {
    serde_json::from_str(&read(tensor_arena_stats_json)).unwrap()
}
