//! The bytes the allocator holds from its backing, counted where they are
//! asked for: every region reserved and released goes through [`Metered`],
//! which keeps their sizes, the total now and its peak over the whole run.
//! These are the figures the stats call `reserved_bytes` and
//! `peak_reserved_bytes`, and the sizes a trace's `segment_alloc` /
//! `segment_free` lines carry, so one is recomputed from the other.

use std::collections::HashMap;

use crate::backing::Backing;
use crate::error::Result;
use crate::trace::TraceLog;

/// A backing with its regions counted.
pub struct Metered {
    inner: Box<dyn Backing>,
    /// Live regions: address -> bytes asked for.
    regions: HashMap<usize, u64>,
    current: u64,
    peak: u64,
    /// The trace whose `segment_alloc` / `segment_free` lines are these
    /// regions, if one is written.
    trace: Option<TraceLog>,
}

impl Metered {
    /// Counts the regions of `inner` from now on.
    pub fn new(inner: Box<dyn Backing>) -> Metered {
        Metered {
            inner,
            regions: HashMap::with_capacity(1024),
            current: 0,
            peak: 0,
            trace: None,
        }
    }

    /// Writes every reservation and release to `trace` from now on.
    pub fn set_trace(&mut self, trace: TraceLog) {
        self.trace = Some(trace);
    }

    /// Bytes of the regions held now (as asked for: the backing may round
    /// them further, as the host rounds large ones to 2 MiB pages).
    pub fn current(&self) -> u64 {
        self.current
    }

    /// The most bytes held at once since the start (or the last
    /// [`Metered::reset_peak`]).
    pub fn peak(&self) -> u64 {
        self.peak
    }

    /// Restarts the peak at the bytes held now.
    pub fn reset_peak(&mut self) {
        self.peak = self.current;
    }

    /// Replaces the backing underneath by `f` of it (a wrapper, such as
    /// the memory fraction's cap), keeping the counts.
    pub fn map_inner(&mut self, f: impl FnOnce(Box<dyn Backing>) -> Box<dyn Backing>) {
        let placeholder: Box<dyn Backing> = Box::new(crate::backing::host_backing());
        let inner = std::mem::replace(&mut self.inner, placeholder);
        self.inner = f(inner);
    }

    /// The backing underneath, given back (for [`crate::PlannedAllocator::reset`]).
    pub fn into_inner(self) -> Box<dyn Backing> {
        self.inner
    }
}

impl Backing for Metered {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn reserve(&mut self, bytes: usize) -> Result<usize> {
        let addr = self.inner.reserve(bytes)?;
        self.regions.insert(addr, bytes as u64);
        self.current += bytes as u64;
        self.peak = self.peak.max(self.current);
        if let Some(t) = &self.trace {
            t.segment("segment_alloc", addr, bytes);
        }
        Ok(addr)
    }

    fn release(&mut self, addr: usize) {
        if let Some(bytes) = self.regions.remove(&addr) {
            self.current -= bytes;
            self.inner.release(addr);
            if let Some(t) = &self.trace {
                t.segment("segment_free", addr, bytes as usize);
            }
        }
    }

    fn fill(&mut self, addr: usize, len: usize, byte: u8) -> Result<()> {
        self.inner.fill(addr, len, byte)
    }

    fn read(&mut self, addr: usize, dst: &mut [u8]) -> Result<()> {
        self.inner.read(addr, dst)
    }

    fn free_memory(&self) -> Option<usize> {
        self.inner.free_memory()
    }

    fn total_memory(&self) -> Option<usize> {
        self.inner.total_memory()
    }

    fn reservations(&self) -> u64 {
        self.inner.reservations()
    }

    fn reserved_bytes(&self) -> u64 {
        self.current
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
        self.inner.set_reserve_cap(cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backing::host_backing;

    #[test]
    fn counts_what_is_asked_and_keeps_the_peak() {
        let mut m = Metered::new(Box::new(host_backing()));
        let a = m.reserve(4096).unwrap();
        let b = m.reserve(3 << 20).unwrap();
        assert_eq!(
            (m.current(), m.peak()),
            (4096 + (3 << 20), 4096 + (3 << 20))
        );
        m.release(b);
        m.release(b); // a second release of the same region is ignored
        assert_eq!((m.current(), m.peak()), (4096, 4096 + (3 << 20)));
        m.reset_peak();
        assert_eq!(m.peak(), 4096);
        m.release(a);
        assert_eq!(m.current(), 0);
    }
}
