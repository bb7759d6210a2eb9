//! The policy: warm-up and recorded steps served by the fallback, a plan
//! made at a step boundary, later steps served from the slab, re-plans
//! when misses persist.

use std::collections::HashMap;
use std::time::Duration;

use tensor_arena::arena::{GUARD_BYTE, POISON_BYTE};
use tensor_arena::caching::CachingConfig;

use crate::backing::{self, Backing};
use crate::config::{Config, Platform};
use crate::error::{Error, Result};
use crate::exact::ExactPool;
use crate::fallback::Fallback;
use crate::record::{FreedAt, Origin, Records};
use crate::shadow::Shadow;
use crate::site_plan::{self, GUARD};
use crate::slab::{PlannedSlab, Refusal};
use crate::stats::{ErrorCounts, Misses, ModelFigures, Stats, fragmentation};
use crate::trace::TraceWriter;

// torch's contract beyond alloc/free: device statistics, stream-safe
// reuse, empty_cache, the memory fraction (hooks called below).
mod streams;
use streams::Freeing;

/// How long one placement may search (it stops earlier at the lower
/// bound).
const PLACEMENT_TIME_LIMIT: Duration = Duration::from_secs(5);

/// The largest re-plan back-off: at most this many consecutive missing
/// steps are waited for before re-planning again.
const MAX_REPLAN_WAIT: u32 = 64;

/// Where the allocator is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Steps served by the fallback, not used for planning.
    Warmup,
    /// Steps served by the fallback and recorded for the first plan.
    Recording,
    /// Steps served from the plan.
    Serving,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Warmup => "warmup",
            Phase::Recording => "recording",
            Phase::Serving => "serving",
        }
    }
}

/// Bits of [`PlannedAllocator::logged`], one per error kind.
#[derive(Debug, Clone, Copy)]
enum Kind {
    UnknownFree = 1,
    DoubleFree = 2,
    ZeroSize = 4,
    TooLarge = 8,
    OutOfMemory = 16,
    OtherDevice = 256,
    Guard = 32,
    Replan = 128,
    Event = 512,
}

/// A planned allocator over one backing. Not thread-safe by itself: the C
/// ABI keeps one behind a mutex.
///
/// ```
/// use tensor_arena_alloc::{Config, PlannedAllocator};
/// let mut a = PlannedAllocator::new(Config::default())?;
/// for _ in 0..6 {
///     a.step_begin()?;
///     let x = a.alloc(4096, 0, 0).unwrap();
///     let y = a.alloc(1000, 0, 0).unwrap();
///     a.free(x);
///     a.free(y);
///     a.step_end()?;
/// }
/// let s = a.stats();
/// assert_eq!(s.phase, "serving");
/// assert_eq!(s.served_from_plan, s.requests_after_warmup);
/// assert_eq!(s.served_share, 1.0);
/// # Ok::<(), tensor_arena_alloc::Error>(())
/// ```
pub struct PlannedAllocator {
    config: Config,
    platform: Platform,
    checked: bool,
    backing: Box<dyn Backing>,
    /// Requests outside steps, kept ones and misses.
    fallback: Fallback,
    /// In-step requests before the first plan: its cache served the warm-up
    /// and recorded steps' temporaries, and goes back to the device once
    /// the slab serves them, instead of staying mixed with blocks that
    /// live on (weights, optimizer state).
    scratch: Fallback,
    /// In-step requests of warm-up steps, one region each.
    exact: ExactPool,
    /// The caching model beside them until the first plan.
    shadow: Option<Shadow>,
    records: Records,
    phase: Phase,
    /// Steps begun; the current (or last) step's number.
    step: u64,
    in_step: bool,
    /// Requests made in the current step.
    clock: u32,
    slab: Option<PlannedSlab>,
    /// Slabs of earlier plans that still hold live blocks.
    retiring: Vec<PlannedSlab>,
    /// Stream handles -> small ids (0 is the null stream).
    streams: HashMap<usize, u32>,
    /// Live bytes of blocks allocated outside steps.
    counters: Counters,
    caching_model: Option<ModelFigures>,
    miss_streak: u32,
    clean_streak: u32,
    /// The step after which the peaks restart (the first a plan serves).
    restart_peaks_at: u64,
    replans_unchanged: u64,
    replan_wait: u32,
    logged: u32,
    last_null: String,
    trace: Option<TraceWriter>,
    /// Device statistics and stream state (allocator/streams.rs).
    side: streams::Side,
}

#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    requests: u64,
    requests_serving: u64,
    served: u64,
    fallback_this_step: u64,
    fallback_last_step: u64,
    fallback_max_step: u64,
    misses: Misses,
    misses_at_step_start: u64,
    plans: u64,
    live_bytes: u64,
    peak_live: u64,
    peak_reserved: u64,
    reservations_at_step_start: u64,
    reservations_last_step: u64,
    errors: ErrorCounts,
}

impl PlannedAllocator {
    /// Opens the backing `config` names and starts in warm-up.
    pub fn new(config: Config) -> Result<PlannedAllocator> {
        let trace = config
            .trace
            .as_deref()
            .map(TraceWriter::create)
            .transpose()?;
        let backing = backing::open(&config)?;
        let mut a = PlannedAllocator::with_backing(config, backing);
        a.trace = trace;
        Ok(a)
    }

    /// Starts over a backing of the caller's (tests, benchmarks).
    pub fn with_backing(config: Config, backing: Box<dyn Backing>) -> PlannedAllocator {
        let platform = config.platform();
        let checked = config.checked();
        let keep = (config
            .recent_steps
            .max(config.record_steps)
            .max(config.record_steps_changing)
            + 1) as usize;
        PlannedAllocator {
            fallback: Fallback::new(caching_config(platform)),
            scratch: Fallback::new(caching_config(platform)),
            shadow: Some(Shadow::new(caching_config(platform))),
            exact: ExactPool::default(),
            records: Records::new(keep),
            phase: if config.warmup_steps == 0 {
                Phase::Recording
            } else {
                Phase::Warmup
            },
            config,
            platform,
            checked,
            backing,
            step: 0,
            in_step: false,
            clock: 0,
            slab: None,
            retiring: Vec::new(),
            streams: HashMap::new(),
            counters: Counters::default(),
            caching_model: None,
            miss_streak: 0,
            clean_streak: 0,
            restart_peaks_at: 0,
            replans_unchanged: 0,
            replan_wait: 0,
            logged: 0,
            last_null: String::new(),
            trace: None,
            side: streams::Side::new(caching_config(platform).max_split_size),
        }
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Where the allocator is in its life.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Requests served so far.
    pub fn requests(&self) -> u64 {
        self.counters.requests
    }

    /// Serves `size` bytes for `device` on `stream` (an opaque handle, 0
    /// for the default stream); `None` is out of memory or bad input
    /// (counted in [`Stats::errors`]).
    pub fn alloc(&mut self, size: usize, device: i32, stream: usize) -> Option<usize> {
        self.poll_pending();
        let mine = self.backing.device();
        if device >= 0 && mine >= 0 && device != mine {
            self.error(Kind::OtherDevice, || {
                format!(
                    "alloc for device {device}: this allocator serves device {mine}; answered NULL"
                )
            });
            return None;
        }
        if size == 0 {
            self.error(Kind::ZeroSize, || {
                "alloc of 0 bytes: answered NULL (torch asks none of its allocators for 0 bytes)"
                    .to_owned()
            });
            return None;
        }
        if let Some(total) = self.backing.total_memory()
            && size > total
        {
            let name = self.backing.name();
            self.error(Kind::TooLarge, || {
                format!("alloc of {size} bytes on {name}: the device has {total}; answered NULL")
            });
            return None;
        }
        let addr = self.alloc_inner(size, stream);
        self.after_alloc(size as u64);
        if let Some(t) = self.trace.as_mut() {
            t.event("alloc", addr.unwrap_or(0), size, stream);
        }
        addr
    }

    fn alloc_inner(&mut self, size: usize, stream: usize) -> Option<usize> {
        let size64 = size as u64;
        let stream = self.stream_id(stream);
        self.counters.requests += 1;
        let origin = if self.in_step {
            let k = self.records.push(size64, stream);
            self.clock += 1;
            Origin { step: self.step, k }
        } else {
            Origin::OUTSIDE
        };
        let serving = self.phase == Phase::Serving;
        if serving && self.in_step {
            self.counters.requests_serving += 1;
            if let Some(addr) = self
                .serve_planned(origin, size64, stream)
                .and_then(|a| self.planned_served(origin, size64, a))
            {
                self.counters.served += 1;
                // The slab is reserved already: only the live bytes move.
                let c = &mut self.counters;
                c.live_bytes += size64;
                c.peak_live = c.peak_live.max(c.live_bytes);
                return Some(addr);
            }
        } else if serving {
            self.counters.misses.outside_step += 1;
        }
        let backing = self.backing.as_mut();
        // Before the first plan, what may live on (weights, optimizer
        // state, data) gets exact regions; the recorded steps' temporaries a
        // scratch pool that goes back once the slab serves them.
        let got = match (self.phase, self.in_step) {
            (Phase::Warmup, _) | (Phase::Recording, false) if self.config.exact_before_plan => {
                self.exact.malloc(backing, size64, origin)
            }
            (Phase::Warmup, true) => self.scratch.malloc(backing, size64, stream, origin),
            (Phase::Warmup | Phase::Recording, false) => {
                self.fallback.malloc(backing, size64, stream, origin)
            }
            (Phase::Recording, true) => self.scratch.malloc(backing, size64, stream, origin),
            (Phase::Serving, _) => self.fallback.malloc(backing, size64, stream, origin),
        };
        match got {
            Some(addr) => {
                if let Some(shadow) = self.shadow.as_mut() {
                    shadow.alloc(addr, size64, stream);
                }
                if serving && self.in_step {
                    self.counters.fallback_this_step += 1;
                }
                self.add_live(size64);
                Some(addr)
            }
            None => {
                let slab = self.slab.as_ref().map_or(0, |s| s.plan.slab_bytes);
                let fallback = self.fallback_reserved();
                let name = self.backing.name();
                self.error(Kind::OutOfMemory, || {
                    format!(
                        "out of memory on {name}: {size} bytes asked; the plan holds a {slab}-byte slab, the fallback {fallback} bytes; answered NULL so that torch raises its out-of-memory error"
                    )
                });
                None
            }
        }
    }

    /// Frees a block `alloc` gave. Unknown pointers and double frees are
    /// counted and logged, never acted on.
    pub fn free(&mut self, addr: usize) {
        if addr == 0 {
            return;
        }
        if let Some(t) = self.trace.as_mut() {
            t.event("free", addr, 0, 0);
        }
        let checked = self.checked;
        if let Some(shadow) = self.shadow.as_mut() {
            shadow.free(addr);
        }
        let at = match self.before_free(addr) {
            Freeing::Done => return,
            Freeing::Late(at) => at,
            Freeing::Plain => self.now(),
        };
        if let Some(slab) = self.slab.as_mut().filter(|s| s.contains(addr)) {
            if let Some((k, step, size)) = slab.free(addr) {
                let site = slab.plan.sites[k];
                self.records.freed(Origin { step, k: k as u32 }, at);
                self.counters.live_bytes -= size;
                self.stats_planned_free(site.slot, size);
                if checked {
                    self.check_and_poison(addr, size, site.slot);
                }
            } else {
                self.error(Kind::DoubleFree, || {
                    format!(
                        "free of {addr:#x}: no live block starts there in the slab (double free?)"
                    )
                });
            }
            return;
        }
        if let Some(i) = self.retiring.iter().position(|s| s.contains(addr)) {
            match self.retiring[i].free(addr) {
                Some((k, step, size)) => {
                    let slot = self.retiring[i].plan.sites[k].slot;
                    self.records.freed(Origin { step, k: k as u32 }, at);
                    self.counters.live_bytes -= size;
                    self.stats_planned_free(slot, size);
                    if checked {
                        self.check_and_poison(addr, size, slot);
                    }
                    let (base, bytes) = (self.retiring[i].base, self.retiring[i].region_bytes);
                    if self.retiring[i].live_count() == 0 && !self.pending_in(base, bytes) {
                        let old = self.retiring.swap_remove(i);
                        self.backing.release(old.base);
                        self.sync_slabs();
                    }
                }
                None => self.error(Kind::DoubleFree, || {
                    format!("free of {addr:#x}: no live block starts there in a retiring slab (double free?)")
                }),
            }
            return;
        }
        let backing = self.backing.as_mut();
        let freed = match self.fallback.free(backing, addr) {
            Some(block) => Some((block.size, block.origin)),
            None => match self.scratch.free(backing, addr) {
                Some(block) => Some((block.size, block.origin)),
                None => self.exact.free(backing, addr),
            },
        };
        match freed {
            Some((size, origin)) => {
                if origin.step > 0 {
                    self.records.freed(origin, at);
                }
                self.counters.live_bytes -= size;
                self.stats_pool_sync(size);
            }
            None if self.fallback.owns_region_of(addr)
                || self.scratch.owns_region_of(addr)
                || self.exact.was_released(addr) =>
            {
                self.error(Kind::DoubleFree, || {
                    format!("free of {addr:#x}: no live block starts there (double free?)")
                })
            }
            None => self.error(Kind::UnknownFree, || {
                format!("free of {addr:#x}: this allocator never gave that pointer; ignored")
            }),
        }
    }

    /// A step begins.
    pub fn step_begin(&mut self) -> Result<()> {
        if self.in_step {
            self.counters.errors.step_order += 1;
            return Err(Error::StepOrder {
                call: "step_begin",
                state: "inside a step",
                step: self.step,
            });
        }
        if let Some(t) = self.trace.as_mut() {
            t.event("step_begin", 0, 0, 0);
        }
        self.step += 1;
        self.in_step = true;
        self.clock = 0;
        let expected = self.records.latest_len();
        self.records.begin(self.step, expected);
        if self.phase == Phase::Recording
            && let Some(shadow) = self.shadow.as_mut()
        {
            shadow.start_recording();
        }
        self.counters.fallback_this_step = 0;
        self.counters.misses_at_step_start = self.counters.misses.curable();
        self.counters.reservations_at_step_start = self.backing.reservations();
        self.at_step_begin();
        Ok(())
    }

    /// The step ends: the allocator records, plans or re-plans here.
    pub fn step_end(&mut self) -> Result<()> {
        if !self.in_step {
            self.counters.errors.step_order += 1;
            return Err(Error::StepOrder {
                call: "step_end",
                state: "outside any step",
                step: self.step,
            });
        }
        self.in_step = false;
        if let Some(t) = self.trace.as_mut() {
            t.event("step_end", 0, 0, 0);
            t.flush();
        }
        let c = &mut self.counters;
        c.reservations_last_step = self.backing.reservations() - c.reservations_at_step_start;
        let warmup = u64::from(self.config.warmup_steps);
        let record = u64::from(self.config.record_steps);
        match self.phase {
            Phase::Warmup => {
                if self.step >= warmup {
                    self.phase = Phase::Recording;
                }
            }
            Phase::Recording => {
                let recorded = self.step.saturating_sub(warmup);
                if recorded >= record {
                    // Shapes that change from step to step: record more
                    // steps (up to `record_steps_changing`) before the
                    // first plan, so that it sees more of their range.
                    let steps: Vec<_> = self.records.last(recorded as usize).collect();
                    let longer = u64::from(self.config.record_steps_changing);
                    if recorded >= longer || !site_plan::shapes_change(&steps) {
                        self.plan(recorded as usize);
                    }
                }
            }
            Phase::Serving => {
                c.fallback_last_step = c.fallback_this_step;
                c.fallback_max_step = c.fallback_max_step.max(c.fallback_this_step);
                let missed = c.misses.curable() > c.misses_at_step_start;
                if missed {
                    self.miss_streak += 1;
                    self.clean_streak = 0;
                } else {
                    self.miss_streak = 0;
                    self.clean_streak += 1;
                }
                // Carried fallback blocks of the recorded steps are freed by
                // now: what they pinned of the scratch cache goes back.
                if self.scratch.reserved_bytes() > 0 {
                    self.scratch.release_cached(self.backing.as_mut());
                }
                if self.step == self.restart_peaks_at {
                    self.counters.peak_live = self.counters.live_bytes;
                    self.counters.peak_reserved = self.reserved_now();
                }
                let wait = self.config.replan_miss_steps.max(self.replan_wait);
                if self.miss_streak >= wait {
                    // Back off when re-plans do not cure the misses (a
                    // program that never repeats itself).
                    self.replan_wait = (wait * 2).min(MAX_REPLAN_WAIT);
                    self.miss_streak = 0;
                    self.plan(self.config.recent_steps as usize);
                } else if self.clean_streak >= 2 * wait {
                    // Long enough without misses: the next ones are new.
                    self.replan_wait = self.config.replan_miss_steps;
                }
            }
        }
        self.at_step_end();
        Ok(())
    }

    /// Drops plans, slabs and the fallback's cache. Returns the live blocks
    /// found (their memory is released too: they count as leaked) and
    /// starts over in warm-up with the same settings.
    pub fn reset(&mut self) -> usize {
        self.forget_streams();
        let leaked = self.live_blocks();
        for slab in self.slab.take().into_iter().chain(self.retiring.drain(..)) {
            self.backing.release(slab.base);
        }
        self.fallback.clear(self.backing.as_mut());
        self.scratch.clear(self.backing.as_mut());
        self.exact.clear(self.backing.as_mut());
        let config = self.config.clone();
        let backing = std::mem::replace(&mut self.backing, Box::new(backing::host_backing()));
        let trace = self.trace.take();
        *self = PlannedAllocator::with_backing(config, backing);
        self.trace = trace;
        leaked
    }

    /// Live blocks, planned and fallback.
    pub fn live_blocks(&self) -> usize {
        self.slab.as_ref().map_or(0, PlannedSlab::live_count)
            + self
                .retiring
                .iter()
                .map(PlannedSlab::live_count)
                .sum::<usize>()
            + self.fallback.live_count()
            + self.scratch.live_count()
            + self.exact.live_count()
    }

    /// The counters, as the stats JSON reports them.
    pub fn stats(&self) -> Stats {
        let c = &self.counters;
        let (slab_bytes, lower_bound, sites) = self.slab.as_ref().map_or((0, 0, 0), |s| {
            (
                s.plan.slab_bytes,
                s.plan.lower_bound,
                s.plan.sites.len() as u64,
            )
        });
        Stats {
            phase: self.phase.name(),
            backing: self.backing.name(),
            steps: self.step,
            requests: c.requests,
            requests_after_warmup: c.requests_serving,
            served_from_plan: c.served,
            served_share: if c.requests_serving == 0 {
                1.0
            } else {
                c.served as f64 / c.requests_serving as f64
            },
            fallback_allocations_last_step: c.fallback_last_step,
            fallback_allocations_max_step: c.fallback_max_step,
            misses: c.misses,
            replans: c.plans.saturating_sub(1),
            plans: c.plans,
            plan_sites: sites,
            slab_bytes,
            lower_bound,
            slab_ratio: if lower_bound == 0 {
                if slab_bytes == 0 { 1.0 } else { 0.0 }
            } else {
                slab_bytes as f64 / lower_bound as f64
            },
            fallback_reserved_bytes: self.fallback_reserved(),
            replans_unchanged: self.replans_unchanged,
            reserved_bytes: self.reserved_now(),
            peak_reserved_bytes: c.peak_reserved,
            peak_live_bytes: c.peak_live,
            fragmentation: fragmentation(c.peak_live, c.peak_reserved),
            backing_reservations: self.backing.reservations(),
            backing_reservations_last_step: c.reservations_last_step,
            caching_model: self.caching_model,
            errors: c.errors,
            live_blocks: self.live_blocks() as u64,
            retiring_live_blocks: self.retiring.iter().map(|s| s.live_count() as u64).sum(),
            checked: self.checked,
        }
    }

    /// The current slab, if a plan serves.
    pub fn slab(&self) -> Option<&PlannedSlab> {
        self.slab.as_ref()
    }

    /// The fallback.
    pub fn fallback(&self) -> &Fallback {
        &self.fallback
    }

    /// The recent steps' records.
    pub fn records(&self) -> &Records {
        &self.records
    }

    /// The platform whose rules the fallback follows.
    pub fn platform(&self) -> Platform {
        self.platform
    }

    /// The device it serves (-1 for host memory).
    pub fn device(&self) -> i32 {
        self.backing.device()
    }

    /// The step being run or last run.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// The pool of in-step requests of the recorded steps.
    pub fn scratch(&self) -> &Fallback {
        &self.scratch
    }

    /// The regions of in-step requests of the warm-up steps.
    pub fn exact(&self) -> &ExactPool {
        &self.exact
    }

    fn serve_planned(&mut self, origin: Origin, size: u64, stream: u32) -> Option<usize> {
        let slab = self.slab.as_mut()?;
        if stream != slab.plan.stream {
            self.counters.misses.stream += 1;
            return None;
        }
        match slab.serve(origin.k as usize, size, origin.step) {
            Ok(addr) => {
                if self.checked {
                    let slot = slab.plan.sites[origin.k as usize].slot;
                    let guard_at = addr + (slot - GUARD) as usize;
                    if self
                        .backing
                        .fill(guard_at, GUARD as usize, GUARD_BYTE)
                        .is_err()
                    {
                        self.counters.errors.guard_violations += 1;
                    }
                }
                Some(addr)
            }
            Err(Refusal::Order) => {
                self.counters.misses.order += 1;
                None
            }
            Err(Refusal::Size) => {
                self.counters.misses.size += 1;
                None
            }
            Err(Refusal::Overlap) => {
                self.counters.misses.overlap += 1;
                None
            }
            // By design: the request outlives its step, the fallback
            // region holds it.
            Err(Refusal::Unplanned) => None,
        }
    }

    /// Plans from the last `n` recorded steps, reserves the slab and
    /// serves from the next step on.
    fn plan(&mut self, n: usize) {
        let steps: Vec<_> = self.records.last(n).collect();
        let pad = self.platform.pad() as u64;
        let plan = site_plan::plan(&steps, self.step, pad, self.checked, PLACEMENT_TIME_LIMIT);
        if let Some(shadow) = self.shadow.take() {
            self.caching_model = Some(shadow.figures(self.platform.name()));
        }
        // A re-plan that lands on the plan it replaces keeps the slab: its
        // live blocks stay valid, nothing is reserved.
        if self
            .slab
            .as_ref()
            .is_some_and(|s| s.plan.sites == plan.sites)
        {
            self.replans_unchanged += 1;
            return;
        }
        // The caches served the recorded steps' temporaries; from now on
        // the slab does.
        self.fallback.release_cached(self.backing.as_mut());
        self.scratch.release_cached(self.backing.as_mut());
        let bytes = plan.slab_bytes.max(site_plan::GRANULE) as usize;
        // An idle slab large enough is kept: a re-plan that needs no more
        // bytes reserves nothing.
        let region = match self.slab.take() {
            Some(old)
                if old.live_count() == 0
                    && old.region_bytes >= bytes
                    && !self.pending_in(old.base, old.region_bytes) =>
            {
                Some((old.base, old.region_bytes))
            }
            Some(old) => {
                if old.live_count() == 0 && !self.pending_in(old.base, old.region_bytes) {
                    self.backing.release(old.base);
                } else {
                    self.retiring.push(old);
                }
                None
            }
            None => None,
        };
        let region = match region {
            Some(r) => r,
            None => match self.backing.reserve(bytes) {
                Ok(base) => (base, bytes),
                Err(e) => {
                    self.error(Kind::Replan, || {
                        format!("the plan's {bytes}-byte slab could not be reserved: {e}; the fallback serves")
                    });
                    return;
                }
            },
        };
        if self.checked {
            let _ = self.backing.fill(region.0, region.1, POISON_BYTE);
        }
        let slab = PlannedSlab::new(plan, region.0, region.1);
        self.slab = Some(slab);
        self.phase = Phase::Serving;
        self.counters.plans += 1;
        // Peaks restart after the first step this plan serves: from then
        // on they describe steady planned steps (the first one still frees
        // the blocks the recorded steps carried into it).
        self.restart_peaks_at = self.step + 1;
    }

    fn check_and_poison(&mut self, addr: usize, size: u64, slot: u64) {
        let guard_at = addr + (slot - GUARD) as usize;
        let mut guard = [0u8; GUARD as usize];
        let intact = self.backing.read(guard_at, &mut guard).is_ok()
            && guard.iter().all(|&b| b == GUARD_BYTE);
        if !intact {
            self.error(Kind::Guard, || {
                format!(
                    "checked mode: the guard bytes after the {size}-byte block at {addr:#x} were overwritten"
                )
            });
            self.counters.errors.guard_violations += 1;
        }
        let _ = self.backing.fill(addr, slot as usize, POISON_BYTE);
    }

    fn now(&self) -> FreedAt {
        if self.in_step {
            FreedAt {
                step: self.step,
                clock: self.clock,
            }
        } else {
            // Between steps: before the next step's first request.
            FreedAt {
                step: self.step + 1,
                clock: 0,
            }
        }
    }

    fn stream_id(&mut self, stream: usize) -> u32 {
        if stream == 0 {
            return 0;
        }
        let next = self.streams.len() as u32 + 1;
        *self.streams.entry(stream).or_insert(next)
    }

    fn reserved_now(&self) -> u64 {
        self.slab.as_ref().map_or(0, |s| s.region_bytes as u64)
            + self
                .retiring
                .iter()
                .map(|s| s.region_bytes as u64)
                .sum::<u64>()
            + self.fallback_reserved()
    }

    /// Bytes every pool but the slabs holds.
    fn fallback_reserved(&self) -> u64 {
        self.fallback.reserved_bytes() + self.scratch.reserved_bytes() + self.exact.reserved_bytes()
    }

    fn add_live(&mut self, size: u64) {
        let c = &mut self.counters;
        c.live_bytes += size;
        c.peak_live = c.peak_live.max(c.live_bytes);
        let reserved = self.reserved_now();
        let c = &mut self.counters;
        c.peak_reserved = c.peak_reserved.max(reserved);
    }

    /// Counts an error and logs the first of its kind.
    fn error(&mut self, kind: Kind, message: impl FnOnce() -> String) {
        let e = &mut self.counters.errors;
        match kind {
            Kind::UnknownFree => e.unknown_free += 1,
            Kind::DoubleFree => e.double_free += 1,
            Kind::ZeroSize => e.zero_size += 1,
            Kind::TooLarge => e.too_large += 1,
            Kind::OutOfMemory => e.out_of_memory += 1,
            Kind::OtherDevice => e.other_device += 1,
            Kind::Guard => {}
            Kind::Replan => e.replan_failed += 1,
            // Counted where it happens (errors.event_failed).
            Kind::Event => {}
        }
        // Only NULL answers keep their message (for last_error, so torch's
        // out-of-memory error can say why); the rest format it once, to log.
        let null_answer = matches!(
            kind,
            Kind::ZeroSize | Kind::TooLarge | Kind::OutOfMemory | Kind::OtherDevice
        );
        let first = self.logged & kind as u32 == 0;
        if null_answer || (first && self.config.log_errors) {
            let text = message();
            if first && self.config.log_errors {
                self.logged |= kind as u32;
                eprintln!(
                    "tensor-arena allocator: {text} (further errors of this kind are counted in stats().errors, not logged)"
                );
            }
            if null_answer {
                self.last_null = text;
            }
        }
    }

    /// Why the last NULL answer was NULL (empty before one).
    pub fn last_null_reason(&self) -> &str {
        &self.last_null
    }
}

/// The caching-allocator rules of `platform` (the fallback's and the
/// comparison's).
pub fn caching_config(platform: Platform) -> CachingConfig {
    match platform {
        // torch_npu's NPUCachingAllocator: the 32-byte ACL pad, then 512.
        Platform::Npu => CachingConfig::npu(),
        // PyTorch's CUDACachingAllocator: 512-byte rounding, no pad.
        Platform::Cuda => CachingConfig::cuda(),
    }
}
