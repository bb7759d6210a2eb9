//! Live blocks of a CPU allocator, each written whole with a tag when made
//! and checked whole when freed: a page the allocator left unmapped under
//! a block faults, a byte another block wrote fails the check.

use std::collections::BTreeMap;

use tensor_arena_alloc::PlannedAllocator;

/// Live blocks by address: `addr -> (size, tag)`.
#[derive(Default)]
pub struct Written(pub BTreeMap<usize, (usize, u8)>);

impl Written {
    /// A block of `size` bytes from `a`, written whole.
    pub fn alloc(&mut self, a: &mut PlannedAllocator, size: usize) -> usize {
        let addr = a.alloc(size, 0, 0).expect("cpu memory");
        let tag = (self.0.len() % 251) as u8 + 1;
        // SAFETY: a live block of `size` bytes of host memory the allocator
        // just gave (the CPU backend, a mapped range); nothing else writes
        // it. A page the allocator failed to map would fault here.
        unsafe { std::ptr::write_bytes(addr as *mut u8, tag, size) };
        assert!(
            self.0.insert(addr, (size, tag)).is_none(),
            "{addr:#x} twice"
        );
        addr
    }

    /// Checks the block at `addr` whole, then frees it.
    pub fn free(&mut self, a: &mut PlannedAllocator, addr: usize) {
        let (size, tag) = self.0.remove(&addr).expect("freed once");
        // SAFETY: the block is live until the free below: `size` readable
        // bytes of host memory.
        let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, size) };
        assert!(bytes.iter().all(|&b| b == tag), "{addr:#x} lost its bytes");
        a.free(addr);
    }
}
