//! Without `tensor_arena_configure` and without `TENSOR_ARENA_ALLOC_CONFIG`
//! the library serves nothing: it cannot know whether torch wants host,
//! CUDA or NPU memory, and guessing host pages would crash a device tensor.

use tensor_arena_alloc::ffi::*;

#[test]
fn an_unconfigured_library_refuses_and_says_how_to_configure() {
    assert!(
        std::env::var(CONFIG_ENV).is_err(),
        "run without {CONFIG_ENV}"
    );
    assert!(tensor_arena_alloc(4096, 0, std::ptr::null_mut()).is_null());
    assert_eq!(tensor_arena_step_begin(), -1);
    let mut buf = vec![0u8; 1024];
    // SAFETY: the buffer holds its length in bytes.
    let n = unsafe { tensor_arena_last_error(buf.as_mut_ptr().cast(), buf.len()) };
    let text = String::from_utf8_lossy(&buf[..n.min(buf.len() - 1)]).into_owned();
    assert!(
        text.contains("not configured") && text.contains(CONFIG_ENV),
        "{text}"
    );
}
