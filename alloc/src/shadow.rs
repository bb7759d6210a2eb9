//! The comparison: the caching-allocator model fed with every request the
//! process makes until the first plan, from the process's first request
//! on, so that its figures for the recorded steps start from the same
//! state (weights, optimizer state, whatever the warm-up left cached) and
//! see the same requests. Dropped once the plan is made.

use std::collections::HashMap;

use tensor_arena::caching::{BlockId, CachingAllocator, CachingConfig};

use crate::stats::{ModelFigures, fragmentation};

/// The caching model beside the fallback, before the first plan.
pub struct Shadow {
    model: CachingAllocator,
    ids: HashMap<usize, (BlockId, u64)>,
    live: u64,
    recording: bool,
    peak_reserved: u64,
    peak_live: u64,
}

impl Shadow {
    /// An empty model with `config`'s rules.
    pub fn new(config: CachingConfig) -> Shadow {
        Shadow {
            model: CachingAllocator::new(config),
            ids: HashMap::new(),
            live: 0,
            recording: false,
            peak_reserved: 0,
            peak_live: 0,
        }
    }

    /// The recorded steps start: peaks count from here.
    pub fn start_recording(&mut self) {
        if !self.recording {
            self.recording = true;
            self.peak_reserved = self.model.stats().reserved_bytes.current;
            self.peak_live = self.live;
        }
    }

    /// The block at `addr` of `size` bytes was allocated.
    pub fn alloc(&mut self, addr: usize, size: u64, stream: u32) {
        if let Ok(id) = self.model.malloc_on(size, stream) {
            self.ids.insert(addr, (id, size));
            self.live += size;
            if self.recording {
                self.peak_live = self.peak_live.max(self.live);
                let reserved = self.model.stats().reserved_bytes.current;
                self.peak_reserved = self.peak_reserved.max(reserved);
            }
        }
    }

    /// The block at `addr` was freed.
    pub fn free(&mut self, addr: usize) {
        if let Some((id, size)) = self.ids.remove(&addr) {
            self.model.free(id);
            self.live -= size;
        }
    }

    /// The figures for the recorded steps.
    pub fn figures(&self, platform: &'static str) -> ModelFigures {
        ModelFigures {
            peak_reserved_bytes: self.peak_reserved,
            peak_live_bytes: self.peak_live,
            fragmentation: fragmentation(self.peak_live, self.peak_reserved),
            platform,
        }
    }
}
