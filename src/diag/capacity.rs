//! The smallest device capacity a trace survives under the model, found
//! without assuming that more memory never hurts.
//!
//! Out of memory is not monotone in the capacity: a smaller device makes
//! the allocator release its cache and retry earlier, which changes every
//! later layout, so a trace can survive at 1224 MiB and fail at 1286 MiB.
//! A bisection would report a boundary and hide that. The scan here
//! instead replays every capacity in 2 MiB steps ([`CAPACITY_STEP`]):
//!
//! 1. upward from the first capacity that could work at all (the peak of
//!    allocated bytes, rounded up: below it the live blocks do not fit),
//!    until one survives: the smallest surviving capacity (with expandable
//!    segments it can lie above the unlimited run's reserved peak: a
//!    segment's address space is 1 1/8 of the capacity, and a capped run
//!    that exhausts it opens a second segment);
//! 2. over a window above it (at least [`DEFAULT_WINDOW`]), recording
//!    every capacity that still runs out of memory; the window grows while
//!    its top fails;
//! 3. the *safe* capacity is the smallest one above which every scanned
//!    capacity survives.
//!
//! Replays at different capacities are identical until the reserved bytes
//! first exceed the capacity (or the garbage-collection threshold), so
//! each starts from a saved state of the unlimited replay taken before
//! that point; capacities are replayed in parallel on the available cores.

use std::collections::HashMap;

use serde::Serialize;

use super::trace::{Trace, TraceEvent};
use crate::caching::{BlockId, CachingAllocator, CachingConfig};

/// Capacities are scanned in steps of this: every segment and page the
/// model obtains is a multiple of 2 MiB, so capacities in between behave
/// like the multiple below them.
pub const CAPACITY_STEP: u64 = crate::caching::rules::K_ROUND_LARGE;

/// How far above the smallest surviving capacity the scan looks for
/// capacities that still run out of memory, at least.
pub const DEFAULT_WINDOW: u64 = 64 << 20;

/// States of the unlimited replay saved along the trace.
const CHECKPOINTS: usize = 64;

/// The result of [`capacity_scan`]. Capacities are in bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CapacityScan {
    /// The first capacity scanned: the peak of allocated bytes rounded up
    /// to [`CAPACITY_STEP`] (every smaller one must fail).
    pub lower_limit: u64,
    /// The smallest capacity at which the whole trace replays without
    /// running out of memory (every capacity from `lower_limit` up to it
    /// was replayed and failed).
    pub min_capacity: u64,
    /// Every scanned capacity above `min_capacity` that still runs out of
    /// memory.
    pub oom_above_min: Vec<u64>,
    /// The smallest capacity from which every scanned capacity up to
    /// `window_top` survives.
    pub safe_capacity: u64,
    /// The highest capacity scanned.
    pub window_top: u64,
    /// Replays run.
    pub replays: usize,
}

/// A saved state of the unlimited replay.
#[derive(Clone)]
struct Checkpoint {
    /// Events replayed before it.
    event: usize,
    /// Highest reserved bytes up to here.
    max_reserved: u64,
    model: CachingAllocator,
    live: Vec<(usize, BlockId)>,
}

/// Replays one trace at many capacities from shared checkpoints.
pub(super) struct Replayer<'t> {
    trace: &'t Trace,
    config: CachingConfig,
    checkpoints: Vec<Checkpoint>,
    /// Peak reserved and allocated bytes of the unlimited replay.
    pub peak_reserved: u64,
    pub peak_allocated: u64,
}

impl<'t> Replayer<'t> {
    pub(super) fn new(trace: &'t Trace, config: CachingConfig) -> Replayer<'t> {
        let unlimited = CachingConfig {
            capacity: None,
            ..config
        };
        let events = trace.events();
        let every = events.len().div_ceil(CHECKPOINTS).max(1);
        let mut model = CachingAllocator::new(unlimited);
        let mut ids: HashMap<usize, BlockId> = HashMap::new();
        let mut checkpoints = Vec::with_capacity(CHECKPOINTS + 1);
        let mut max_reserved = 0;
        for (at, event) in events.iter().enumerate() {
            if at % every == 0 {
                let mut live: Vec<(usize, BlockId)> = ids.iter().map(|(&i, &b)| (i, b)).collect();
                live.sort_unstable_by_key(|&(i, _)| i);
                checkpoints.push(Checkpoint {
                    event: at,
                    max_reserved,
                    model: model.clone(),
                    live,
                });
            }
            step(trace, &mut model, &mut ids, at, *event);
            max_reserved = model.stats().reserved_bytes.current.max(max_reserved);
        }
        let stats = model.stats();
        Replayer {
            trace,
            config,
            checkpoints,
            peak_reserved: stats.reserved_bytes.peak,
            peak_allocated: stats.allocated_bytes.peak,
        }
    }

    /// Whether the whole trace survives at `capacity`.
    pub(super) fn fits(&self, capacity: u64) -> bool {
        let config = CachingConfig {
            capacity: Some(capacity),
            ..self.config
        };
        // Until reserved memory first exceeds this, the run at `capacity`
        // is the unlimited one: no device request fails and the collector
        // does not act.
        let limit = match config.garbage_collection_threshold {
            Some(t) => ((t.get() * capacity as f64) as u64).min(capacity),
            None => capacity,
        };
        // Expandable segments size their address space from the capacity,
        // so their replays always start from the beginning.
        let start = self
            .checkpoints
            .iter()
            .rev()
            .filter(|_| !config.expandable_segments)
            .find(|c| c.max_reserved <= limit);
        let (mut model, mut ids, from) = match start {
            Some(c) => {
                let mut model = c.model.clone();
                model.set_capacity(Some(capacity));
                let ids: HashMap<usize, BlockId> = c.live.iter().copied().collect();
                (model, ids, c.event)
            }
            None => (CachingAllocator::new(config), HashMap::new(), 0),
        };
        for (k, event) in self.trace.events()[from..].iter().enumerate() {
            if !step(self.trace, &mut model, &mut ids, from + k, *event) {
                return false;
            }
        }
        true
    }

    /// [`Replayer::fits`] for each capacity, in parallel.
    fn fits_all(&self, capacities: &[u64]) -> Vec<bool> {
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(capacities.len())
            .max(1);
        if threads == 1 {
            return capacities.iter().map(|&c| self.fits(c)).collect();
        }
        let mut out = vec![false; capacities.len()];
        std::thread::scope(|s| {
            let chunk = capacities.len().div_ceil(threads);
            for (caps, outs) in capacities.chunks(chunk).zip(out.chunks_mut(chunk)) {
                s.spawn(move || {
                    for (c, o) in caps.iter().zip(outs) {
                        *o = self.fits(*c);
                    }
                });
            }
        });
        out
    }

    /// The scan described in the module docs.
    pub(super) fn scan(&self, window: u64) -> CapacityScan {
        let step_up = |b: u64| b.div_ceil(CAPACITY_STEP).saturating_mul(CAPACITY_STEP);
        let lower_limit = step_up(self.peak_allocated);
        // Above this every replay is the unlimited one, which survives.
        let surely = match self.config.garbage_collection_threshold {
            Some(t) => step_up((self.peak_reserved as f64 / t.get()).ceil() as u64),
            None => step_up(self.peak_reserved),
        }
        .max(lower_limit);
        let batch = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
        let mut replays = 0;
        let mut min_capacity = surely;
        let mut at = lower_limit;
        // `surely` itself is replayed too: expandable segments size their
        // address space from the capacity (1 1/8 of it), so a capped run
        // can run out of address space, open a second segment and need
        // more pages than the unlimited run ever held. Where even `surely`
        // fails, the search goes on above it, up to `ceiling` (a random
        // trace of 28 allocations, expandable segments: unlimited peak 122
        // MiB, every capacity up to 124 MiB out of memory, 126 MiB the
        // least; the scan used to report 122 MiB).
        let ceiling = surely.saturating_mul(2).max(surely.saturating_add(1 << 30));
        'search: while at <= ceiling {
            let caps: Vec<u64> = (0..batch)
                .map(|k| at + k * CAPACITY_STEP)
                .take_while(|&c| c <= ceiling)
                .collect();
            replays += caps.len();
            for (&c, ok) in caps.iter().zip(self.fits_all(&caps)) {
                if ok {
                    min_capacity = c;
                    break 'search;
                }
            }
            at += caps.len() as u64 * CAPACITY_STEP;
        }
        let window = step_up(window.max(CAPACITY_STEP));
        let mut oom_above_min = Vec::new();
        let mut window_top = min_capacity;
        loop {
            let top = window_top.saturating_add(window);
            let caps: Vec<u64> = ((window_top / CAPACITY_STEP + 1)..=(top / CAPACITY_STEP))
                .map(|k| k * CAPACITY_STEP)
                .collect();
            replays += caps.len();
            let ok = self.fits_all(&caps);
            oom_above_min.extend(
                caps.iter()
                    .zip(&ok)
                    .filter(|(_, ok)| !**ok)
                    .map(|(c, _)| *c),
            );
            window_top = top;
            // A failing top means the unsafe range may go on: look further,
            // up to where the run is surely the unlimited one.
            if ok.last().copied().unwrap_or(true) || top >= surely {
                break;
            }
        }
        let safe_capacity = oom_above_min
            .last()
            .map_or(min_capacity, |&c| c + CAPACITY_STEP);
        CapacityScan {
            lower_limit,
            min_capacity,
            oom_above_min,
            safe_capacity,
            window_top,
            replays,
        }
    }
}

/// Replays one event; `false` when an allocation runs out of memory.
fn step(
    trace: &Trace,
    model: &mut CachingAllocator,
    ids: &mut HashMap<usize, BlockId>,
    at: usize,
    event: TraceEvent,
) -> bool {
    if trace.releases_before(at) {
        model.empty_cache();
    }
    match event {
        TraceEvent::Alloc(i) => {
            let a = &trace.allocations()[i];
            match model.malloc_on(a.size, a.stream) {
                Ok(id) => {
                    ids.insert(i, id);
                    true
                }
                Err(_) => false,
            }
        }
        TraceEvent::Free(i) => {
            if let Some(id) = ids.remove(&i) {
                model.free(id);
            }
            true
        }
    }
}

/// Scans capacities for `trace` under `config` (its capacity ignored), as
/// the module docs describe, looking at least `window` bytes above the
/// smallest surviving capacity.
///
/// ```
/// use tensor_arena::caching::CachingConfig;
/// use tensor_arena::diag::{capacity_scan, Trace};
/// let t = Trace::from_csv("t", "alloc,a,6291456\nalloc,b,6291456\nalloc,c,6291456\nfree,b\nalloc,d,7340032\n")?;
/// let scan = capacity_scan(&t, CachingConfig::default(), 8 << 20);
/// // 20 MiB holds a, b and c; d needs a second segment that only fits at 40 MiB.
/// assert_eq!((scan.lower_limit, scan.min_capacity), (20 << 20, 40 << 20));
/// assert!(scan.oom_above_min.is_empty());
/// assert_eq!(scan.safe_capacity, 40 << 20);
/// # Ok::<(), tensor_arena::Error>(())
/// ```
pub fn capacity_scan(trace: &Trace, config: CachingConfig, window: u64) -> CapacityScan {
    Replayer::new(trace, config).scan(window)
}

/// The smallest capacity (a multiple of 2 MiB) at which the trace replays
/// through the model with `config` (its capacity ignored) without running
/// out of memory: every smaller candidate is replayed and seen to fail, so
/// no monotonicity is assumed.
///
/// ```
/// use tensor_arena::caching::CachingConfig;
/// use tensor_arena::diag::{min_capacity, Trace};
/// let t = Trace::from_csv("t", "alloc,a,6291456\nalloc,b,6291456\nalloc,c,6291456\nfree,b\nalloc,d,7340032\n")?;
/// // Unlimited: two 20 MiB segments. At 38 MiB the first one cannot be
/// // released for d (a and c hold it), so 40 MiB is the least.
/// assert_eq!(min_capacity(&t, CachingConfig::default()), 40 << 20);
/// # Ok::<(), tensor_arena::Error>(())
/// ```
pub fn min_capacity(trace: &Trace, config: CachingConfig) -> u64 {
    capacity_scan(trace, config, CAPACITY_STEP).min_capacity
}
