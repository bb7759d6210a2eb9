//! The whole-run comparison: what the caching allocator would have reserved
//! for the same run. Two models of it (the platform's defaults, and
//! `expandable_segments:True`) are fed every allocation and free of the
//! process, from its first request on, warm-up, recording and every
//! re-plan included, so that their peaks cover the same window as the
//! planned allocator's whole-run peak.
//!
//! Feeding a model costs about as much as serving a request, so it is not
//! done on the caller's thread: requests are appended to a buffer (reused,
//! so steady steps do not allocate) that a worker thread takes at each step
//! end and replays through both models. [`Comparison::figures`] waits for
//! the worker to catch up, so what it returns covers every request so far.

use crate::addr_hash::AddrMap;
use std::cell::{Cell, RefCell};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use tensor_arena::caching::{BlockId, CachingAllocator, CachingConfig};

use crate::stats::{ModelFigures, fragmentation};

/// Requests buffered on the caller's thread before they are handed over
/// even inside a step (a step of very many requests, or a long stretch
/// outside steps).
const HAND_OVER_AT: usize = 1 << 16;

/// One event for the models.
#[derive(Debug, Clone, Copy)]
enum Event {
    Alloc { addr: usize, size: u64, stream: u32 },
    Free { addr: usize },
}

/// What the caller and the worker share.
#[derive(Default)]
struct Inbox {
    events: Vec<Event>,
    busy: bool,
    closed: bool,
    figures: [ModelFigures; 2],
}

type Shared = Arc<(Mutex<Inbox>, Condvar)>;

/// The two models beside the allocator, on a worker thread.
pub struct Comparison {
    shared: Shared,
    /// Events not handed over yet (a cell: [`Comparison::figures`] hands
    /// them over from a shared reference).
    buffer: RefCell<Vec<Event>>,
    worker: Option<JoinHandle<()>>,
    /// The process that made the worker: a forked child (a DataLoader
    /// worker) has no such thread, so it stops feeding.
    pid: u32,
    enabled: Cell<bool>,
}

fn lock(shared: &Shared) -> MutexGuard<'_, Inbox> {
    shared.0.lock().unwrap_or_else(|e| e.into_inner())
}

impl Comparison {
    /// Starts the worker with `config`'s rules (the defaults of the
    /// platform; the expandable model is the same with
    /// `expandable_segments:True`). Without a thread (the system refused
    /// one), the comparison is off and its figures stay zero.
    pub fn new(config: CachingConfig, platform: &'static str) -> Comparison {
        let shared: Shared = Arc::default();
        let theirs = Arc::clone(&shared);
        let worker = std::thread::Builder::new()
            .name("tensor-arena-comparison".to_owned())
            .spawn(move || run(theirs, config, platform))
            .ok();
        Comparison {
            enabled: Cell::new(worker.is_some()),
            shared,
            buffer: RefCell::new(Vec::with_capacity(4096)),
            worker,
            pid: std::process::id(),
        }
    }

    /// A block of `size` bytes at `addr` on `stream` was handed out.
    #[inline]
    pub fn alloc(&mut self, addr: usize, size: u64, stream: u32) {
        self.push(Event::Alloc { addr, size, stream });
    }

    /// The block at `addr` was freed.
    #[inline]
    pub fn free(&mut self, addr: usize) {
        self.push(Event::Free { addr });
    }

    #[inline]
    fn push(&mut self, e: Event) {
        if self.enabled.get() {
            let buffer = self.buffer.get_mut();
            buffer.push(e);
            if buffer.len() >= HAND_OVER_AT {
                self.hand_over();
            }
        }
    }

    /// Gives the buffered events to the worker (at a step end).
    pub fn hand_over(&self) {
        let mut buffer = self.buffer.borrow_mut();
        if !self.enabled.get() || buffer.is_empty() {
            return;
        }
        if std::process::id() != self.pid {
            self.enabled.set(false);
            *buffer = Vec::new();
            return;
        }
        let mut inbox = lock(&self.shared);
        if inbox.events.is_empty() {
            // The worker's drained buffer comes back: no allocation.
            std::mem::swap(&mut inbox.events, &mut *buffer);
        } else {
            inbox.events.append(&mut buffer);
        }
        drop(inbox);
        self.shared.1.notify_all();
    }

    /// The models' figures over every request so far: `[defaults,
    /// expandable]` (zeros when the comparison is off).
    pub fn figures(&self) -> [ModelFigures; 2] {
        if std::process::id() != self.pid {
            // A forked child: the worker is the parent's (its lock may have
            // been copied held); nothing here is waited for.
            self.enabled.set(false);
        }
        self.hand_over();
        if !self.enabled.get() {
            return [ModelFigures::default(); 2];
        }
        let mut inbox = lock(&self.shared);
        while inbox.busy || !inbox.events.is_empty() {
            inbox = self.shared.1.wait(inbox).unwrap_or_else(|e| e.into_inner());
        }
        inbox.figures
    }
}

impl Comparison {
    /// In a forked child: the worker thread does not exist here. Its
    /// handle is forgotten (neither joined nor detached) and the models
    /// are fed no more; their figures read zero.
    pub fn forget_worker(&mut self) {
        self.enabled.set(false);
        *self.buffer.get_mut() = Vec::new();
        if let Some(worker) = self.worker.take() {
            std::mem::forget(worker);
        }
    }
}

impl Drop for Comparison {
    fn drop(&mut self) {
        if std::process::id() != self.pid {
            return;
        }
        lock(&self.shared).closed = true;
        self.shared.1.notify_all();
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

/// One model and the blocks it holds for the run's addresses.
struct Model {
    model: CachingAllocator,
    blocks: AddrMap<(BlockId, u64)>,
    live: u64,
    peak_live: u64,
    platform: &'static str,
}

impl Model {
    fn new(config: CachingConfig, platform: &'static str) -> Model {
        Model {
            model: CachingAllocator::new(config),
            blocks: AddrMap::with_capacity_and_hasher(4096, Default::default()),
            live: 0,
            peak_live: 0,
            platform,
        }
    }

    fn apply(&mut self, e: Event) {
        match e {
            Event::Alloc { addr, size, stream } => {
                if let Ok(id) = self.model.malloc_on(size, stream) {
                    self.blocks.insert(addr, (id, size));
                    self.live += size;
                    self.peak_live = self.peak_live.max(self.live);
                }
            }
            Event::Free { addr } => {
                if let Some((id, size)) = self.blocks.remove(&addr) {
                    self.model.free(id);
                    self.live -= size;
                }
            }
        }
    }

    fn figures(&self) -> ModelFigures {
        let stats = self.model.stats();
        let reserved = stats.reserved_bytes.peak;
        ModelFigures {
            peak_reserved_bytes: reserved,
            peak_live_bytes: self.peak_live,
            fragmentation: fragmentation(self.peak_live, reserved),
            platform: self.platform,
            device_allocations: stats.num_device_alloc,
            device_frees: stats.num_device_free,
        }
    }
}

fn run(shared: Shared, config: CachingConfig, platform: &'static str) {
    let mut models = [
        Model::new(config, platform),
        Model::new(
            CachingConfig {
                expandable_segments: true,
                max_split_size: None,
                garbage_collection_threshold: None,
                ..config
            },
            platform,
        ),
    ];
    let mut work: Vec<Event> = Vec::with_capacity(4096);
    loop {
        {
            let mut inbox = lock(&shared);
            while inbox.events.is_empty() && !inbox.closed {
                inbox = shared.1.wait(inbox).unwrap_or_else(|e| e.into_inner());
            }
            if inbox.events.is_empty() && inbox.closed {
                return;
            }
            std::mem::swap(&mut inbox.events, &mut work);
            inbox.busy = true;
        }
        for model in &mut models {
            for &e in &work {
                model.apply(e);
            }
        }
        work.clear();
        let mut inbox = lock(&shared);
        inbox.busy = false;
        inbox.figures = [models[0].figures(), models[1].figures()];
        drop(inbox);
        shared.1.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_models_see_every_request_and_expandable_segments_pack_tighter() {
        let mut c = Comparison::new(CachingConfig::cuda(), "cuda");
        // Kept blocks between freed temporaries: the default pools keep
        // the split segments, expandable segments map only what is used.
        let mut addr = 4096;
        for step in 0..20u64 {
            let mut temps = Vec::new();
            for i in 0..8u64 {
                temps.push(addr);
                c.alloc(addr, (3 << 20) + (step * 8 + i) * 4096, 0);
                addr += 1 << 24;
            }
            c.alloc(addr, 1 << 20, 0); // kept
            addr += 1 << 24;
            for t in temps {
                c.free(t);
            }
            c.hand_over();
        }
        let [defaults, expandable] = c.figures();
        assert_eq!(defaults.peak_live_bytes, expandable.peak_live_bytes);
        assert!(defaults.peak_live_bytes >= 8 * (3 << 20));
        assert!(defaults.peak_reserved_bytes >= defaults.peak_live_bytes);
        assert!(expandable.peak_reserved_bytes >= expandable.peak_live_bytes);
        assert!(expandable.peak_reserved_bytes <= defaults.peak_reserved_bytes);
    }

    #[test]
    fn figures_cover_requests_not_yet_handed_over() {
        let mut c = Comparison::new(CachingConfig::cuda(), "cuda");
        c.alloc(512, 1000, 0);
        let [d, e] = c.figures();
        assert_eq!((d.peak_live_bytes, e.peak_live_bytes), (1000, 1000));
        assert!(d.peak_reserved_bytes >= 2 << 20); // one small segment
    }
}
