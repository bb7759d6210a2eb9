//! A backing with a cap on reserved bytes (`set_memory_fraction`): a
//! reservation that would take the reserved bytes past the cap is refused
//! as the device refuses one it has no room for, so the callers' usual
//! path follows (the fallback empties its cache and retries once, then the
//! request is answered NULL: out of memory).

use super::Backing;
use crate::error::{Error, Result};

/// Another backing, capped.
pub struct Capped {
    inner: Box<dyn Backing>,
    cap: u64,
}

impl Capped {
    /// `inner` with at most `cap` bytes reserved at once.
    pub fn new(inner: Box<dyn Backing>, cap: u64) -> Capped {
        Capped { inner, cap }
    }
}

impl Backing for Capped {
    fn name(&self) -> String {
        self.inner.name()
    }
    fn reserve(&mut self, bytes: usize) -> Result<usize> {
        let reserved = self.inner.reserved_bytes();
        if reserved.saturating_add(bytes as u64) > self.cap {
            return Err(Error::Backing {
                backend: self.inner.name(),
                reason: format!(
                    "{bytes} bytes asked with {reserved} reserved: over the memory fraction's cap of {} bytes (set_memory_fraction)",
                    self.cap
                ),
            });
        }
        self.inner.reserve(bytes)
    }
    fn release(&mut self, addr: usize) {
        self.inner.release(addr)
    }
    fn fill(&mut self, addr: usize, len: usize, byte: u8) -> Result<()> {
        self.inner.fill(addr, len, byte)
    }
    fn read(&mut self, addr: usize, dst: &mut [u8]) -> Result<()> {
        self.inner.read(addr, dst)
    }
    fn free_memory(&self) -> Option<usize> {
        let room = self.cap.saturating_sub(self.inner.reserved_bytes()) as usize;
        Some(self.inner.free_memory().map_or(room, |f| f.min(room)))
    }
    fn total_memory(&self) -> Option<usize> {
        self.inner.total_memory()
    }
    fn reservations(&self) -> u64 {
        self.inner.reservations()
    }
    fn reserved_bytes(&self) -> u64 {
        self.inner.reserved_bytes()
    }
    fn device(&self) -> i32 {
        self.inner.device()
    }
    fn record_event(&mut self, stream: usize) -> Result<usize> {
        self.inner.record_event(stream)
    }
    fn event_done(&mut self, event: usize) -> Result<bool> {
        self.inner.event_done(event)
    }
    fn destroy_event(&mut self, event: usize) {
        self.inner.destroy_event(event)
    }
    fn set_reserve_cap(&mut self, cap: u64) -> bool {
        self.cap = cap;
        true
    }
    fn map_granularity(&self) -> Option<usize> {
        self.inner.map_granularity()
    }
    fn reserve_address(&mut self, bytes: usize) -> Result<usize> {
        // Address space alone costs no device memory: not capped.
        self.inner.reserve_address(bytes)
    }
    fn map(&mut self, addr: usize, len: usize) -> Result<()> {
        let reserved = self.inner.reserved_bytes();
        if reserved.saturating_add(len as u64) > self.cap {
            return Err(Error::Backing {
                backend: self.inner.name(),
                reason: format!(
                    "map of {len} bytes with {reserved} reserved: over the memory fraction's cap of {} bytes (set_memory_fraction)",
                    self.cap
                ),
            });
        }
        self.inner.map(addr, len)
    }
    fn unmap(&mut self, addr: usize, len: usize) -> Result<()> {
        self.inner.unmap(addr, len)
    }
    fn release_address(&mut self, base: usize) {
        self.inner.release_address(base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backing::host_backing;

    #[test]
    fn refuses_past_the_cap_and_moves_it() {
        let mut b = Capped::new(Box::new(host_backing()), 8 << 20);
        let a = b.reserve(4 << 20).unwrap();
        assert!(b.reserve(6 << 20).is_err());
        assert_eq!(b.reserved_bytes(), 4 << 20);
        assert!(b.set_reserve_cap(16 << 20));
        let c = b.reserve(6 << 20).unwrap();
        b.release(a);
        b.release(c);
        assert_eq!(b.reserved_bytes(), 0);
    }
}
