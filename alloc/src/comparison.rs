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
//!
//! A steady training loop hands over the same events step after step, and
//! the models soon stop changing: the worker then stops replaying them
//! (see [`Replayer`]), with figures exactly those of a full replay.

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

/// Whether the worker skips repeated hand-overs at a fixed point (off only
/// in tests, to compare against a full replay).
const SKIP_REPEATS: bool = true;

/// One event for the models.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    Alloc { addr: usize, size: u64, stream: u32 },
    Free { addr: usize },
}

/// What the caller and the worker share.
#[derive(Default)]
struct Inbox {
    events: Vec<Event>,
    /// Where each hand-over's events end in `events`: the worker replays
    /// (or skips) one hand-over at a time, even when it took several.
    marks: Vec<usize>,
    busy: bool,
    closed: bool,
    figures: [ModelFigures; 2],
    /// Hand-overs skipped so far (for tests).
    skipped: u64,
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
        Comparison::start(config, platform, SKIP_REPEATS)
    }

    /// [`Comparison::new`], with skipping of repeated hand-overs on or off.
    fn start(config: CachingConfig, platform: &'static str, skip: bool) -> Comparison {
        let shared: Shared = Arc::default();
        let theirs = Arc::clone(&shared);
        let worker = std::thread::Builder::new()
            .name("tensor-arena-comparison".to_owned())
            .spawn(move || run(theirs, config, platform, skip))
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
        let end = inbox.events.len();
        inbox.marks.push(end);
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

    /// Model hand-overs the worker skipped so far, once it caught up.
    #[cfg(test)]
    fn skipped(&self) -> u64 {
        self.figures();
        lock(&self.shared).skipped
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
#[derive(Clone)]
struct Model {
    model: CachingAllocator,
    blocks: AddrMap<(BlockId, u64)>,
    live: u64,
    peak_live: u64,
    platform: &'static str,
    /// What one repeat of the hand-over that reached the fixed point adds
    /// to the device call counts: `(allocations, frees)`.
    repeat_calls: (u64, u64),
    /// Device calls of the hand-overs skipped so far.
    skipped_calls: (u64, u64),
}

impl Model {
    fn new(config: CachingConfig, platform: &'static str) -> Model {
        Model {
            model: CachingAllocator::new(config),
            blocks: AddrMap::with_capacity_and_hasher(4096, Default::default()),
            live: 0,
            peak_live: 0,
            platform,
            repeat_calls: (0, 0),
            skipped_calls: (0, 0),
        }
    }

    fn apply_all(&mut self, events: &[Event]) {
        for &e in events {
            self.apply(e);
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

    /// Copies `other` into `self`, reusing the map's table.
    fn copy_from(&mut self, other: &Model) {
        self.model.clone_from(&other.model);
        self.blocks.clone_from(&other.blocks);
        self.live = other.live;
        self.peak_live = other.peak_live;
    }

    /// Whether the two are in the same state for every event to come (see
    /// [`CachingAllocator::same_state`] for the model's part).
    ///
    /// The map's ids are compared by the modelled address of the block
    /// they name: every id in the map names a live allocated block of its
    /// own model (ids enter it when `malloc_on` hands them out and leave it
    /// when that block is freed; nothing else frees an allocated block), so
    /// the lookup succeeds, and blocks do not overlap, so equal addresses
    /// in equal slot tables are the same slot. The ids may then differ in
    /// generation only, each matching its own model: a later free does the
    /// same in both.
    fn same_state(&self, other: &Model) -> bool {
        let addr = |m: &Model, id: BlockId| m.model.address(id);
        self.live == other.live
            && self.peak_live == other.peak_live
            && self.model.same_state(&other.model)
            && self.blocks.len() == other.blocks.len()
            && self.blocks.iter().all(|(k, &(id, size))| {
                other.blocks.get(k).is_some_and(|&(oid, osize)| {
                    osize == size && addr(self, id).is_some() && addr(self, id) == addr(other, oid)
                })
            })
    }

    /// Counts the device calls since `before` as those of one repeat.
    fn note_repeat_calls(&mut self, before: &Model) {
        let (now, then) = (self.model.stats(), before.model.stats());
        self.repeat_calls = (
            now.num_device_alloc - then.num_device_alloc,
            now.num_device_free - then.num_device_free,
        );
    }

    /// A repeat skipped: the state stays, the call counts grow as one
    /// replay would have grown them.
    fn skip_repeat(&mut self) {
        self.skipped_calls.0 += self.repeat_calls.0;
        self.skipped_calls.1 += self.repeat_calls.1;
    }

    fn figures(&self) -> ModelFigures {
        let stats = self.model.stats();
        let reserved = stats.reserved_bytes.peak;
        ModelFigures {
            peak_reserved_bytes: reserved,
            peak_live_bytes: self.peak_live,
            fragmentation: fragmentation(self.peak_live, reserved),
            platform: self.platform,
            device_allocations: stats.num_device_alloc + self.skipped_calls.0,
            device_frees: stats.num_device_free + self.skipped_calls.1,
        }
    }
}

/// The worker's side: both models, and what it needs to skip repeats.
///
/// A model is deterministic: its state after a hand-over is a function of
/// its state before and of the hand-over's events. So if hand-over `k`
/// left a model in the state it was in before (`S_k == S_{k-1}`) and
/// hand-over `k+1` has the same events as `k`, then
/// `S_{k+1} = f(S_k, E_{k+1}) = f(S_{k-1}, E_k) = S_k`: replaying it
/// changes nothing, and the same holds for every further identical
/// hand-over. The figures are read from the state (the peaks are part of
/// it), except the device call counts, running totals that the state
/// leaves out: they grow on each skipped hand-over by what hand-over `k`
/// added (`k+1` makes the same calls from the same state). None of this depends on where
/// hand-overs fall: a step split by a mid-step hand-over only makes
/// repeats rarer.
///
/// "Same state" is [`Model::same_state`]. It is tested for each model on
/// its own (a model with a fixed point skips while the other replays),
/// only on repeats: the state kept before a repeated hand-over against
/// the state after it. A run of repeats that does not settle is tested on
/// its 1st, 2nd, 4th, ... and every 64th repeat, so that it pays for few
/// copies.
struct Replayer {
    models: [Model; 2],
    /// Off: every event is replayed (tests compare the two).
    skip: bool,
    /// The events of the last hand-over.
    last: Vec<Event>,
    /// How many hand-overs in a row had `last`'s events.
    repeats: u64,
    /// Per model: whether replaying `last` is known to leave it unchanged.
    fixed: [bool; 2],
    /// Per model: its state before the hand-over being tested.
    before: [Option<Box<Model>>; 2],
    /// Model hand-overs skipped so far (two per hand-over both skip).
    skipped: u64,
}

impl Replayer {
    fn new(config: CachingConfig, platform: &'static str, skip: bool) -> Replayer {
        let expandable = CachingConfig {
            expandable_segments: true,
            max_split_size: None,
            garbage_collection_threshold: None,
            ..config
        };
        Replayer {
            models: [
                Model::new(config, platform),
                Model::new(expandable, platform),
            ],
            skip,
            last: Vec::new(),
            repeats: 0,
            fixed: [false; 2],
            before: [None, None],
            skipped: 0,
        }
    }

    /// Replays one hand-over's events, or skips them for a model at its
    /// fixed point.
    fn feed(&mut self, events: &[Event]) {
        if !self.skip || events != self.last.as_slice() {
            for model in &mut self.models {
                model.apply_all(events);
            }
            if self.skip {
                self.last.clear();
                self.last.extend_from_slice(events);
                self.repeats = 0;
                self.fixed = [false; 2];
            }
            return;
        }
        self.repeats += 1;
        let test = self.repeats.is_power_of_two() || self.repeats.is_multiple_of(64);
        let slots = self.models.iter_mut().zip(&mut self.fixed);
        for ((model, fixed), before) in slots.zip(&mut self.before) {
            if *fixed {
                model.skip_repeat();
                self.skipped += 1;
                continue;
            }
            if !test {
                model.apply_all(events);
                continue;
            }
            let before: &Model = match before {
                Some(b) => {
                    b.copy_from(model);
                    b
                }
                none => none.insert(Box::new(model.clone())),
            };
            model.apply_all(events);
            *fixed = model.same_state(before);
            if *fixed {
                model.note_repeat_calls(before);
            }
        }
    }

    fn figures(&self) -> [ModelFigures; 2] {
        [self.models[0].figures(), self.models[1].figures()]
    }
}

fn run(shared: Shared, config: CachingConfig, platform: &'static str, skip: bool) {
    let mut replayer = Replayer::new(config, platform, skip);
    let mut work: Vec<Event> = Vec::with_capacity(4096);
    let mut marks: Vec<usize> = Vec::with_capacity(16);
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
            std::mem::swap(&mut inbox.marks, &mut marks);
            inbox.busy = true;
        }
        let mut start = 0;
        for &end in &marks {
            replayer.feed(&work[start..end]);
            start = end;
        }
        // Every hand-over marks its end; nothing is left, but if it were,
        // it is replayed all the same.
        if start < work.len() {
            replayer.feed(&work[start..]);
        }
        work.clear();
        marks.clear();
        let mut inbox = lock(&shared);
        inbox.busy = false;
        inbox.figures = replayer.figures();
        inbox.skipped = replayer.skipped;
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

    /// One step's events for the tests.
    #[derive(Debug, Clone)]
    enum Op {
        Alloc(usize, u64, u32),
        Free(usize),
        /// A hand-over inside the step (as `HAND_OVER_AT` makes one).
        HandOver,
    }

    /// Runs `steps` through a comparison with skipping on and one with it
    /// off; returns both figures and how many model hand-overs were
    /// skipped.
    fn both(config: CachingConfig, steps: &[&[Op]]) -> ([ModelFigures; 2], [ModelFigures; 2], u64) {
        let mut full = Comparison::start(config, "cuda", false);
        let mut skipping = Comparison::start(config, "cuda", true);
        for c in [&mut full, &mut skipping] {
            for step in steps {
                for op in *step {
                    match *op {
                        Op::Alloc(addr, size, stream) => c.alloc(addr, size, stream),
                        Op::Free(addr) => c.free(addr),
                        Op::HandOver => c.hand_over(),
                    }
                }
                c.hand_over();
            }
        }
        assert_eq!(full.skipped(), 0);
        (full.figures(), skipping.figures(), skipping.skipped())
    }

    const MIB: u64 = 1 << 20;

    /// Temporaries of a few sizes, allocated and freed in the step.
    fn temps(sizes: &[u64]) -> Vec<Op> {
        let mut ops: Vec<Op> = (0..sizes.len())
            .map(|i| Op::Alloc(0x10_0000 + i * 0x1000, sizes[i], 0))
            .collect();
        ops.extend((0..sizes.len()).map(|i| Op::Free(0x10_0000 + i * 0x1000)));
        ops
    }

    #[test]
    fn identical_steps_are_skipped_with_the_figures_of_a_full_replay() {
        let first = vec![Op::Alloc(8, 5 * MIB, 0), Op::Alloc(16, 700, 0)];
        let step = temps(&[3 * MIB, 1000, 12 * MIB, 64 << 10]);
        let mut steps: Vec<&[Op]> = vec![&first];
        steps.extend(std::iter::repeat_n(step.as_slice(), 30));
        let (full, skipping, skipped) = both(CachingConfig::cuda(), &steps);
        assert_eq!(full, skipping);
        // Both models settle within a few steps and skip the rest.
        assert!(skipped >= 2 * 20, "{skipped}");
    }

    #[test]
    fn a_different_step_after_a_fixed_point_is_replayed() {
        let step = temps(&[3 * MIB, 1000, 12 * MIB]);
        // Larger than any before: a new segment, new peaks.
        let big = temps(&[3 * MIB, 1000, 12 * MIB, 30 * MIB]);
        let mut steps: Vec<&[Op]> = vec![step.as_slice(); 10];
        steps.push(&big);
        steps.extend(std::iter::repeat_n(step.as_slice(), 10));
        steps.push(&big);
        steps.extend(std::iter::repeat_n(step.as_slice(), 10));
        let (full, skipping, skipped) = both(CachingConfig::cuda(), &steps);
        assert_eq!(full, skipping);
        assert!(full[0].peak_live_bytes >= 45 * MIB);
        assert!(skipped > 0);
    }

    #[test]
    fn growing_kept_tensors_have_no_fixed_point() {
        // New addresses every step: no two steps' events are equal.
        let steps: Vec<Vec<Op>> = (0..20)
            .map(|i| {
                let mut ops = temps(&[3 * MIB, 1000]);
                ops.push(Op::Alloc(0x1000_0000 + i * 8, 2 * MIB, 0));
                ops
            })
            .collect();
        let steps: Vec<&[Op]> = steps.iter().map(Vec::as_slice).collect();
        let (full, skipping, skipped) = both(CachingConfig::cuda(), &steps);
        assert_eq!(full, skipping);
        assert_eq!(skipped, 0);
    }

    #[test]
    fn the_same_events_that_keep_growing_the_model_are_replayed() {
        // Each step allocates at the same address without freeing it: the
        // events repeat but the model holds one more block every step.
        let mut step = temps(&[3 * MIB, 1000]);
        step.push(Op::Alloc(0x1000_0000, 2 * MIB, 0));
        let steps = vec![step.as_slice(); 20];
        let (full, skipping, skipped) = both(CachingConfig::cuda(), &steps);
        assert_eq!(full, skipping);
        assert_eq!(skipped, 0);
        assert!(full[0].peak_reserved_bytes >= 40 * MIB);
    }

    #[test]
    fn mid_step_hand_overs_keep_the_figures_exact() {
        // The same events, handed over in three parts: each part is
        // replayed (no part repeats the one before it), the whole steps
        // before and after are skipped.
        let step = temps(&[3 * MIB, 1000, 12 * MIB]);
        let mut split = step.clone();
        split.insert(2, Op::HandOver);
        split.insert(5, Op::HandOver);
        let mut steps: Vec<&[Op]> = vec![step.as_slice(); 10];
        steps.extend(std::iter::repeat_n(split.as_slice(), 3));
        steps.extend(std::iter::repeat_n(step.as_slice(), 10));
        let (full, skipping, skipped) = both(CachingConfig::cuda(), &steps);
        assert_eq!(full, skipping);
        assert!(skipped >= 2 * 10, "{skipped}");
    }

    #[test]
    fn device_calls_of_skipped_steps_are_counted() {
        // With a capacity, expandable segments unmap one stream's cached
        // pages to map the other's, every step, in the same address range:
        // the expandable model settles while it calls the device each
        // step (the defaults model, whose new segments move up in the
        // address space, never settles).
        let config = CachingConfig {
            capacity: Some(70 * MIB),
            ..CachingConfig::cuda()
        };
        let first = vec![Op::Alloc(8, 2 * MIB, 0), Op::Alloc(16, 2 * MIB, 1)];
        let step = vec![
            Op::Alloc(32, 30 * MIB, 0),
            Op::Free(32),
            Op::Alloc(48, 30 * MIB, 1),
            Op::Free(48),
        ];
        let mut steps: Vec<&[Op]> = vec![&first];
        steps.extend(std::iter::repeat_n(step.as_slice(), 20));
        let (full, skipping, skipped) = both(config, &steps);
        assert_eq!(full, skipping);
        assert!(skipped >= 10, "{skipped}");
        assert!(full[1].device_allocations >= 20, "{:?}", full[1]);
        assert!(full[1].device_frees >= 20, "{:?}", full[1]);
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        /// A step: allocations and frees over a few addresses (some kept
        /// past the step, some freed twice or never allocated), and maybe
        /// a hand-over inside it.
        fn step() -> impl Strategy<Value = Vec<Op>> {
            let op = prop_oneof![
                4 => (0..12usize, 1..(24 * MIB), 0..2u32)
                    .prop_map(|(a, size, stream)| Op::Alloc(8 + a * 8, size, stream)),
                4 => (0..12usize).prop_map(|a| Op::Free(8 + a * 8)),
                1 => Just(Op::HandOver),
            ];
            proptest::collection::vec(op, 1..16)
        }

        fn config() -> impl Strategy<Value = CachingConfig> {
            let cuda = CachingConfig::cuda();
            prop_oneof![
                Just(cuda),
                Just(CachingConfig::npu()),
                (60..200u64).prop_map(move |c| CachingConfig {
                    capacity: Some(c * MIB),
                    ..cuda
                }),
                (60..200u64).prop_map(move |c| CachingConfig {
                    capacity: Some(c * MIB),
                    max_split_size: Some(32 * MIB),
                    garbage_collection_threshold: tensor_arena::caching::GcThreshold::new(0.5).ok(),
                    ..cuda
                }),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]

            /// Random steps, each repeated a random number of times:
            /// skipping gives the figures of a full replay.
            #[test]
            fn skipping_gives_the_figures_of_a_full_replay(
                config in config(),
                run in proptest::collection::vec((step(), 1..12usize), 1..8),
            ) {
                let steps: Vec<&[Op]> = run
                    .iter()
                    .flat_map(|(s, n)| std::iter::repeat_n(s.as_slice(), *n))
                    .collect();
                let (full, skipping, _) = both(config, &steps);
                prop_assert_eq!(full, skipping);
            }
        }
    }
}
