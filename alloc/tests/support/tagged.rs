//! A shadow map of live blocks in host memory: a block handed out while
//! another live block holds any of its bytes fails the test, and each
//! block's first and last bytes carry a tag written when it is made and
//! checked when it is freed (a byte another block wrote fails it too).

use std::collections::BTreeMap;

/// Live blocks by address: `addr -> end`.
#[derive(Default)]
pub struct TaggedBlocks(pub BTreeMap<usize, usize>);

/// The tag of the block at `addr` (never 0: an unmapped page reads 0).
fn tag(addr: usize) -> u8 {
    (addr / 512 % 251) as u8 + 1
}

impl TaggedBlocks {
    /// A block of `size` >= 1 host bytes just handed out at `addr`.
    pub fn insert(&mut self, addr: usize, size: usize) {
        let end = addr + size;
        if let Some((&a, &e)) = self.0.range(..end).next_back() {
            assert!(
                e <= addr,
                "block [{addr:#x}, {end:#x}) overlaps live [{a:#x}, {e:#x})"
            );
        }
        assert!(self.0.insert(addr, end).is_none());
        // SAFETY: a live block of `size` >= 1 bytes of host memory the
        // allocator just gave (the CPU backend); nothing else writes it.
        unsafe {
            std::ptr::write_volatile(addr as *mut u8, tag(addr));
            std::ptr::write_volatile((end - 1) as *mut u8, tag(addr));
        }
    }

    /// The block at `addr`, about to be freed: live once, its tags intact.
    pub fn remove(&mut self, addr: usize) {
        let end = self.0.remove(&addr);
        assert!(end.is_some(), "{addr:#x} freed twice");
        let Some(end) = end else { return };
        // SAFETY: the block is still live (freed right after this check):
        // its bytes are readable host memory.
        let (first, last) = unsafe {
            (
                std::ptr::read_volatile(addr as *const u8),
                std::ptr::read_volatile((end - 1) as *const u8),
            )
        };
        assert_eq!(
            (first, last),
            (tag(addr), tag(addr)),
            "the {}-byte block at {addr:#x} lost its bytes while live",
            end - addr
        );
    }
}
