//! Warm-up steps' requests, one backing region each. The warm-up step is
//! where a training loop creates what it keeps (optimizer state) between
//! temporaries it frees; a caching pool would scatter the kept blocks over
//! segments the temporaries made, pinning them for the rest of the run.
//! Exact regions pin nothing: a freed one goes back at once, a kept one
//! holds only its own bytes. One device call per request, for the warm-up
//! steps only.

use std::collections::HashMap;

use crate::backing::Backing;
use crate::metered::Metered;
use crate::record::Origin;
use crate::site_plan::GRANULE;

/// Regions remembered after release, to tell a double free from an
/// unknown pointer.
const RELEASED_MEMORY: usize = 256;

/// Live exact regions by address: bytes asked for, bytes reserved, origin.
#[derive(Default)]
pub struct ExactPool {
    blocks: HashMap<usize, (u64, u64, Origin)>,
    /// The stream each live region was asked for on.
    streams: HashMap<usize, u32>,
    reserved: u64,
    released: Vec<usize>,
    next_released: usize,
}

impl ExactPool {
    /// Reserves a region for `size` bytes.
    pub fn malloc(
        &mut self,
        backing: &mut Metered,
        size: u64,
        stream: u32,
        origin: Origin,
    ) -> Option<usize> {
        self.malloc_at(backing, size, stream, origin, false)
    }

    /// Reserves a region for `size` bytes; with `low`, at the low end of a
    /// mapped range (where the slab goes: a recorded step's temporary,
    /// whose pages the slab takes over), else at the high end.
    pub fn malloc_at(
        &mut self,
        backing: &mut Metered,
        size: u64,
        stream: u32,
        origin: Origin,
        low: bool,
    ) -> Option<usize> {
        let asked = size.div_ceil(GRANULE).saturating_mul(GRANULE);
        let before = backing.reserved_bytes();
        let addr = if low {
            backing.reserve_low_keep(asked as usize).ok()?
        } else {
            // From the stream's own range: bytes freed on one stream are not
            // handed to another while it may still use them.
            backing.reserve_for(asked as usize, stream).ok()?
        };
        // What the device really set aside (the host rounds large regions
        // to 2 MiB pages). In a mapped range the region may have unmapped
        // idle pages before mapping its own (metered/deferred.rs): the
        // figure then falls below its own bytes, and is at least those.
        let bytes = backing.reserved_bytes().saturating_sub(before).max(asked);
        self.blocks.insert(addr, (size, bytes, origin));
        if stream != 0 {
            self.streams.insert(addr, stream);
        }
        self.reserved += bytes;
        Some(addr)
    }

    /// Releases the region at `addr`: its size and origin.
    pub fn free(&mut self, backing: &mut dyn Backing, addr: usize) -> Option<(u64, Origin)> {
        let (size, bytes, origin) = self.blocks.remove(&addr)?;
        self.streams.remove(&addr);
        backing.release(addr);
        self.reserved -= bytes;
        if self.released.len() < RELEASED_MEMORY {
            self.released.push(addr);
        } else {
            self.released[self.next_released] = addr;
            self.next_released = (self.next_released + 1) % RELEASED_MEMORY;
        }
        Some((size, origin))
    }

    /// Whether `addr` is one of the last regions released (and not live
    /// again): a second free of it is a double free.
    pub fn was_released(&self, addr: usize) -> bool {
        !self.blocks.contains_key(&addr) && self.released.contains(&addr)
    }

    /// The live region at `addr`: bytes asked for, bytes reserved, origin.
    pub fn region(&self, addr: usize) -> Option<(u64, u64, Origin)> {
        self.blocks.get(&addr).copied()
    }

    /// The stream the live region at `addr` was asked for on.
    pub fn stream_of(&self, addr: usize) -> Option<u32> {
        self.blocks
            .contains_key(&addr)
            .then(|| self.streams.get(&addr).copied().unwrap_or(0))
    }

    /// Bytes reserved.
    pub fn reserved_bytes(&self) -> u64 {
        self.reserved
    }

    /// Live regions.
    pub fn live_count(&self) -> usize {
        self.blocks.len()
    }

    /// Live regions: address, bytes asked for, bytes reserved.
    pub fn regions(&self) -> impl Iterator<Item = (usize, u64, u64)> + '_ {
        self.blocks.iter().map(|(&a, &(s, b, _))| (a, s, b))
    }

    /// Releases every region.
    pub fn clear(&mut self, backing: &mut dyn Backing) {
        for &addr in self.blocks.keys() {
            backing.release(addr);
        }
        self.blocks.clear();
        self.streams.clear();
        self.reserved = 0;
    }
}
