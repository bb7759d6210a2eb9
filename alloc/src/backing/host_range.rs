//! The host's mapped ranges: address space reserved with `mmap(PROT_NONE)`
//! (no memory behind it, `MAP_NORESERVE`), pages made readable and
//! writable with `mprotect` when mapped, and given back to the kernel with
//! `madvise(MADV_DONTNEED)` and `PROT_NONE` again when unmapped, so that an
//! unmapped page holds no memory and any access to it faults, as an
//! unmapped device page does. The unit is the host page (4 KiB on x86-64).

use std::collections::{BTreeMap, BTreeSet};

use crate::error::{Error, Result};

/// Reserved ranges of the host, with their mapped pages.
#[derive(Default)]
pub struct HostRanges {
    /// base -> (bytes of address space, mapped pages by address).
    ranges: BTreeMap<usize, (usize, BTreeSet<usize>)>,
}

/// The host's page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions; it answers -1 on error.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as usize } else { 4096 }
}

fn fail(call: &str, bytes: usize, addr: usize, why: impl std::fmt::Display) -> Error {
    Error::Backing {
        backend: "cpu".to_owned(),
        reason: format!("{call} of {bytes} bytes at {addr:#x}: {why}"),
    }
}

impl HostRanges {
    /// Reserves `bytes` of address space, nothing mapped.
    pub fn reserve(&mut self, bytes: usize) -> Result<usize> {
        let g = page_size();
        if bytes == 0 || !bytes.is_multiple_of(g) {
            return Err(fail(
                "reserve_address",
                bytes,
                0,
                "not a whole number of pages",
            ));
        }
        // SAFETY: a fresh anonymous private mapping at an address of the
        // kernel's choosing; nothing else refers to it. PROT_NONE with
        // MAP_NORESERVE commits no memory.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(fail(
                "reserve_address",
                bytes,
                0,
                std::io::Error::last_os_error(),
            ));
        }
        let base = p as usize;
        self.ranges.insert(base, (bytes, BTreeSet::new()));
        Ok(base)
    }

    /// The range holding `[addr, addr + len)` whole: its base.
    fn range_of(
        &mut self,
        call: &str,
        addr: usize,
        len: usize,
    ) -> Result<&mut (usize, BTreeSet<usize>)> {
        let g = page_size();
        if len == 0 || !addr.is_multiple_of(g) || !len.is_multiple_of(g) {
            return Err(fail(call, len, addr, "not whole pages"));
        }
        let (&base, range) = self
            .ranges
            .range_mut(..=addr)
            .next_back()
            .ok_or_else(|| fail(call, len, addr, "outside every reserved range"))?;
        if addr.checked_add(len).is_none_or(|end| end > base + range.0) {
            return Err(fail(call, len, addr, "past the end of its range"));
        }
        Ok(range)
    }

    /// Makes `[addr, addr + len)` readable and writable (zero pages).
    pub fn map(&mut self, addr: usize, len: usize) -> Result<()> {
        let g = page_size();
        let range = self.range_of("map", addr, len)?;
        if (addr..addr + len).step_by(g).any(|p| range.1.contains(&p)) {
            return Err(fail("map", len, addr, "a page of it is mapped already"));
        }
        // SAFETY: [addr, addr + len) lies inside a mapping this value made
        // (checked above) and no page of it is in use (none is mapped).
        let rc = unsafe {
            libc::mprotect(
                addr as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        if rc != 0 {
            return Err(fail("map", len, addr, std::io::Error::last_os_error()));
        }
        range.1.extend((addr..addr + len).step_by(g));
        Ok(())
    }

    /// Gives `[addr, addr + len)` back to the kernel and makes it fault.
    pub fn unmap(&mut self, addr: usize, len: usize) -> Result<()> {
        let g = page_size();
        let range = self.range_of("unmap", addr, len)?;
        if (addr..addr + len).step_by(g).any(|p| !range.1.contains(&p)) {
            return Err(fail("unmap", len, addr, "a page of it is not mapped"));
        }
        // SAFETY: the pages lie inside a mapping this value made and are
        // mapped; the allocator unmaps only pages no live block uses, so
        // discarding their contents loses nothing anyone reads.
        let rc = unsafe {
            let a = libc::madvise(addr as *mut libc::c_void, len, libc::MADV_DONTNEED);
            let b = libc::mprotect(addr as *mut libc::c_void, len, libc::PROT_NONE);
            if a != 0 { a } else { b }
        };
        if rc != 0 {
            return Err(fail("unmap", len, addr, std::io::Error::last_os_error()));
        }
        for p in (addr..addr + len).step_by(g) {
            range.1.remove(&p);
        }
        Ok(())
    }

    /// Gives the range at `base` back; its mapped bytes, if it was one.
    pub fn release(&mut self, base: usize) -> Option<usize> {
        let (bytes, pages) = self.ranges.remove(&base)?;
        // SAFETY: the whole mapping this value made at `base`; nothing is
        // handed out from it any more (the allocator releases a range
        // after its last block).
        unsafe { libc::munmap(base as *mut libc::c_void, bytes) };
        Some(pages.len() * page_size())
    }

    /// Whether `[addr, addr + len)` lies in mapped pages of one range.
    pub fn is_mapped(&self, addr: usize, len: usize) -> bool {
        let g = page_size();
        let Some((&base, (size, pages))) = self.ranges.range(..=addr).next_back() else {
            return false;
        };
        let Some(end) = addr.checked_add(len.max(1)) else {
            return false;
        };
        end <= base + size && (addr / g * g..end).step_by(g).all(|p| pages.contains(&p))
    }

    /// Whether `addr` lies in a reserved range (mapped or not).
    pub fn holds(&self, addr: usize) -> bool {
        self.ranges
            .range(..=addr)
            .next_back()
            .is_some_and(|(&b, (s, _))| addr < b + s)
    }

    /// Bytes mapped in all ranges.
    pub fn mapped_bytes(&self) -> usize {
        self.ranges.values().map(|(_, p)| p.len()).sum::<usize>() * page_size()
    }

    /// Sets `len` bytes at `addr` (mapped pages) to `byte`.
    pub fn fill(&self, addr: usize, len: usize, byte: u8) -> Result<()> {
        if !self.is_mapped(addr, len) {
            return Err(fail("fill", len, addr, "not inside mapped pages"));
        }
        // SAFETY: [addr, addr + len) lies in mapped, writable pages of a
        // range this value owns (checked above).
        unsafe { std::ptr::write_bytes(addr as *mut u8, byte, len) };
        Ok(())
    }

    /// Copies the bytes at `addr` (mapped pages) into `dst`.
    pub fn read(&self, addr: usize, dst: &mut [u8]) -> Result<()> {
        if !self.is_mapped(addr, dst.len()) {
            return Err(fail("read", dst.len(), addr, "not inside mapped pages"));
        }
        // SAFETY: the source lies in mapped, readable pages of a range this
        // value owns (checked above); `dst` is a distinct Rust buffer.
        unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }
}

impl Drop for HostRanges {
    fn drop(&mut self) {
        let bases: Vec<usize> = self.ranges.keys().copied().collect();
        for b in bases {
            self.release(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_map_hold_bytes_and_unmap() {
        let g = page_size();
        let mut r = HostRanges::default();
        let base = r.reserve(16 * g).unwrap();
        assert!(r.holds(base + 3 * g) && !r.is_mapped(base, 1));
        r.map(base + g, 2 * g).unwrap();
        assert_eq!(r.mapped_bytes(), 2 * g);
        r.fill(base + g + 10, 100, 7).unwrap();
        let mut out = [0u8; 4];
        r.read(base + g + 10, &mut out).unwrap();
        assert_eq!(out, [7; 4]);
        assert!(r.fill(base, 10, 1).is_err(), "an unmapped page is refused");
        assert!(r.map(base + 2 * g, g).is_err(), "mapped twice");
        assert!(r.map(base + 16 * g, g).is_err(), "past the end");
        r.unmap(base + g, g).unwrap();
        assert!(r.unmap(base + g, g).is_err(), "unmapped twice");
        assert_eq!(r.release(base), Some(g));
        assert_eq!(r.mapped_bytes(), 0);
    }
}
