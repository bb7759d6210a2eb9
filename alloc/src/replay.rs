//! Offline replay: a trace ([`crate::trace`]) driven through the policy
//! over a backing that holds no memory, to predict what the planned
//! allocator would have done on the traced run (the doctor's
//! `tensor-arena replay TRACE --planned`, policy experiments without torch).
//!
//! The replay makes the calls a live run's C ABI makes
//! (`tensor_arena_alloc` -> [`PlannedAllocator::alloc`], `tensor_arena_free`
//! -> [`PlannedAllocator::free`], the step calls) on a
//! [`PlannedAllocator::with_backing`], in the trace's order: the same code
//! decides. The trace's addresses are mapped to the replay's.
//!
//! ```
//! use tensor_arena_alloc::replay::{self, ReplayConfig};
//! use tensor_arena_alloc::trace;
//! let mut text = String::from("event,addr,size,stream\n");
//! for _ in 0..6 {
//!     text += "step_begin,0,0,0\nalloc,4096,1000,0\nalloc,8192,300,0\nfree,4096,1000,0\nfree,8192,300,0\nstep_end,0,0,0\n";
//! }
//! let p = replay::replay(&trace::parse(&text)?, &ReplayConfig::default())?;
//! assert_eq!((p.steps, p.replans, p.served_share), (6, 0, Some(1.0)));
//! assert_eq!(p.slab_bytes, 1536); // 1024 + 512: both blocks live at once
//! assert_eq!(p.fits, None); // no capacity given
//! # Ok::<(), tensor_arena_alloc::Error>(())
//! ```

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::allocator::{Phase, PlannedAllocator};
use crate::backing::Backing;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::site_plan::SitePlan;
use crate::stats::{Misses, Stats};
use crate::trace::TraceEvent;

/// Alignment of [`NullBacking`]'s addresses (torch's block granule).
const ALIGN: usize = 512;

/// Where [`NullBacking`]'s first region starts: far from 0, so that no
/// address is NULL.
const BASE: usize = 1 << 40;

/// Reserved bytes of a backing, now and at their whole-run peak; shared
/// between a backing (which the allocator owns) and whoever reads it.
#[derive(Debug, Clone, Default)]
pub struct Gauge(Arc<GaugeCells>);

#[derive(Debug, Default)]
struct GaugeCells {
    now: AtomicU64,
    peak: AtomicU64,
    refused: AtomicU64,
}

impl Gauge {
    /// Bytes reserved now.
    pub fn reserved_bytes(&self) -> u64 {
        self.0.now.load(Ordering::Relaxed)
    }
    /// The most bytes reserved at once so far (warm-up, recording and
    /// every re-plan included).
    pub fn peak_reserved_bytes(&self) -> u64 {
        self.0.peak.load(Ordering::Relaxed)
    }
    /// Reservations refused (past the capacity, or by the device).
    pub fn refused(&self) -> u64 {
        self.0.refused.load(Ordering::Relaxed)
    }
    fn add(&self, bytes: u64) {
        let now = self.0.now.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.0.peak.fetch_max(now, Ordering::Relaxed);
    }
    fn sub(&self, bytes: u64) {
        self.0.now.fetch_sub(bytes, Ordering::Relaxed);
    }
    fn refuse(&self) {
        self.0.refused.fetch_add(1, Ordering::Relaxed);
    }
}

/// A backing that holds no memory: 512-aligned fake addresses that never
/// overlap, the reserved bytes and their peak counted, an optional
/// capacity past which reservations are refused. `fill` and `read` do
/// nothing and succeed (checked mode finds no guard violations here).
pub struct NullBacking {
    next: usize,
    regions: HashMap<usize, usize>,
    /// Reserved ranges: base -> (bytes of address space, mapped pages).
    ranges: std::collections::BTreeMap<usize, (usize, std::collections::BTreeSet<usize>)>,
    granularity: Option<usize>,
    capacity: Option<u64>,
    reservations: u64,
    gauge: Gauge,
}

impl NullBacking {
    /// A backing that refuses reservations past `capacity` bytes reserved
    /// at once (`None`: never).
    pub fn new(capacity: Option<u64>) -> NullBacking {
        NullBacking {
            next: BASE,
            regions: HashMap::new(),
            ranges: std::collections::BTreeMap::new(),
            granularity: None,
            capacity,
            reservations: 0,
            gauge: Gauge::default(),
        }
    }

    /// Mapped ranges of `granularity` bytes' pages from now on (the host's
    /// page, CUDA's 2 MiB): a replay then predicts a backing with a
    /// virtual-memory API. `None`: whole regions only.
    pub fn with_map_granularity(mut self, granularity: Option<usize>) -> NullBacking {
        self.granularity = granularity.filter(|&g| g > 0);
        self
    }

    /// Its reserved bytes, readable after the allocator took the backing.
    pub fn gauge(&self) -> Gauge {
        self.gauge.clone()
    }
}

impl Backing for NullBacking {
    fn name(&self) -> String {
        "null".to_owned()
    }
    fn reserve(&mut self, bytes: usize) -> Result<usize> {
        let now = self.gauge.reserved_bytes();
        if let Some(cap) = self.capacity
            && now.saturating_add(bytes as u64) > cap
        {
            self.gauge.refuse();
            return Err(Error::Backing {
                backend: self.name(),
                reason: format!(
                    "{bytes} bytes asked with {now} reserved: past the capacity of {cap} bytes"
                ),
            });
        }
        let span = bytes
            .checked_next_multiple_of(ALIGN)
            .and_then(|s| s.checked_add(self.next))
            .ok_or_else(|| Error::Backing {
                backend: self.name(),
                reason: format!("{bytes} bytes: the address space is spent"),
            })?;
        let addr = self.next;
        // A gap after every region, so that no two are adjacent.
        self.next = span + ALIGN;
        self.regions.insert(addr, bytes);
        self.reservations += 1;
        self.gauge.add(bytes as u64);
        Ok(addr)
    }
    fn release(&mut self, addr: usize) {
        if let Some(bytes) = self.regions.remove(&addr) {
            self.gauge.sub(bytes as u64);
        }
    }
    fn map_granularity(&self) -> Option<usize> {
        self.granularity
    }
    fn reserve_address(&mut self, bytes: usize) -> Result<usize> {
        let g = self
            .granularity
            .ok_or_else(|| crate::backing::no_ranges("null", "reserve_address", bytes))?;
        // Ranges start on a granule, past every region handed out so far.
        let base = self.next.next_multiple_of(g);
        let end = base.checked_add(bytes).ok_or_else(|| Error::Backing {
            backend: self.name(),
            reason: format!("{bytes} bytes of address space: the address space is spent"),
        })?;
        self.next = end + ALIGN;
        self.ranges.insert(base, (bytes, Default::default()));
        Ok(base)
    }
    fn map(&mut self, addr: usize, len: usize) -> Result<()> {
        let g = self
            .granularity
            .ok_or_else(|| crate::backing::no_ranges("null", "map", len))?;
        let now = self.gauge.reserved_bytes();
        if let Some(cap) = self.capacity
            && now.saturating_add(len as u64) > cap
        {
            self.gauge.refuse();
            return Err(Error::Backing {
                backend: self.name(),
                reason: format!(
                    "map of {len} bytes with {now} reserved: past the capacity of {cap} bytes"
                ),
            });
        }
        let bad = |why: &str| Error::Backing {
            backend: "null".to_owned(),
            reason: format!("map of {len} bytes at {addr:#x}: {why}"),
        };
        if !addr.is_multiple_of(g) || !len.is_multiple_of(g) || len == 0 {
            return Err(bad("not whole pages of the granularity"));
        }
        let (&base, (size, pages)) = self
            .ranges
            .range_mut(..=addr)
            .next_back()
            .ok_or_else(|| bad("outside every reserved range"))?;
        if addr + len > base + *size {
            return Err(bad("past the end of its range"));
        }
        if (addr..addr + len).step_by(g).any(|p| pages.contains(&p)) {
            return Err(bad("a page of it is mapped already"));
        }
        pages.extend((addr..addr + len).step_by(g));
        self.reservations += 1;
        self.gauge.add(len as u64);
        Ok(())
    }
    fn unmap(&mut self, addr: usize, len: usize) -> Result<()> {
        let g = self
            .granularity
            .ok_or_else(|| crate::backing::no_ranges("null", "unmap", len))?;
        let bad = |why: &str| Error::Backing {
            backend: "null".to_owned(),
            reason: format!("unmap of {len} bytes at {addr:#x}: {why}"),
        };
        if !addr.is_multiple_of(g) || !len.is_multiple_of(g) {
            return Err(bad("not whole pages of the granularity"));
        }
        let (_, (_, pages)) = self
            .ranges
            .range_mut(..=addr)
            .next_back()
            .ok_or_else(|| bad("outside every reserved range"))?;
        if (addr..addr + len).step_by(g).any(|p| !pages.contains(&p)) {
            return Err(bad("a page of it is not mapped"));
        }
        for p in (addr..addr + len).step_by(g) {
            pages.remove(&p);
        }
        self.gauge.sub(len as u64);
        Ok(())
    }
    fn release_address(&mut self, base: usize) {
        if let (Some((_, pages)), Some(g)) = (self.ranges.remove(&base), self.granularity) {
            self.gauge.sub((pages.len() * g) as u64);
        }
    }
    fn fill(&mut self, _addr: usize, _len: usize, _byte: u8) -> Result<()> {
        Ok(())
    }
    fn read(&mut self, _addr: usize, _dst: &mut [u8]) -> Result<()> {
        Ok(())
    }
    fn free_memory(&self) -> Option<usize> {
        self.capacity
            .map(|c| c.saturating_sub(self.gauge.reserved_bytes()) as usize)
    }
    fn total_memory(&self) -> Option<usize> {
        self.capacity.map(|c| c as usize)
    }
    fn reservations(&self) -> u64 {
        self.reservations
    }
    fn reserved_bytes(&self) -> u64 {
        self.gauge.reserved_bytes()
    }
    fn device(&self) -> i32 {
        -1
    }
}

/// What to replay with.
#[derive(Debug, Clone, Default)]
pub struct ReplayConfig {
    /// The policy (its `trace` key is ignored: a replay writes no trace).
    pub policy: Config,
    /// Bytes the device could reserve at once (for instance the capacity
    /// a snapshot ran out of); `None`: unlimited, and
    /// [`Prediction::fits`] is `None`.
    pub capacity: Option<u64>,
}

/// What the planned allocator would have done on a traced run.
#[derive(Debug, Clone)]
pub struct Prediction {
    /// The allocator's counters at the end of the replay (per-plan peaks
    /// as the live stats report them).
    pub stats: Stats,
    /// The most bytes reserved at once over the whole run (warm-up,
    /// recording, every re-plan), from the backing.
    pub peak_reserved_bytes: u64,
    /// Share of in-step requests of serving steps served from the plan
    /// (`None`: no serving step made a request).
    pub served_share: Option<f64>,
    /// The live lower bound: the most bytes live at once over the whole
    /// run, each request rounded to 512 bytes.
    pub live_lower_bound_bytes: u64,
    /// Backing calls over the whole run, by kind.
    pub backing_calls: crate::metered::BackingCalls,
    /// Plans made after the first.
    pub replans: u64,
    /// Steps replayed.
    pub steps: u64,
    /// Bytes of the final plan's slab (0 without a plan).
    pub slab_bytes: u64,
    /// The final plan's lower bound.
    pub lower_bound: u64,
    /// The most fallback allocations in one serving step.
    pub fallback_allocations_max_step: u64,
    /// Misses by reason.
    pub misses: Misses,
    /// Requests the replay answered NULL for want of memory (out of
    /// memory, or larger than the whole capacity).
    pub out_of_memory: u64,
    /// Reservations the backing refused (a failed re-plan counts here
    /// and not in `out_of_memory`).
    pub refused_reservations: u64,
    /// With a capacity: whether the run fit in it (no request answered
    /// NULL, no reservation refused); `None` without one.
    pub fits: Option<bool>,
    /// The final plan, if one serves.
    pub plan: Option<SitePlan>,
    /// Indices into the replayed events of the `alloc` events inside
    /// serving steps that the plan did not serve (the fallback did): where
    /// the misses and the kept blocks are.
    pub fallback_events: Vec<usize>,
}

/// Replays `events` through the policy over a [`NullBacking`] of
/// `config.capacity`.
pub fn replay(events: &[TraceEvent], config: &ReplayConfig) -> Result<Prediction> {
    // The mapping unit of the device predicted: the policy's, else the
    // host page the CPU backend maps (0: none, whole regions).
    let granularity = match config.policy.map_granularity {
        None => Some(HOST_PAGE),
        Some(0) => None,
        Some(g) => Some(g as usize),
    };
    let backing = NullBacking::new(config.capacity).with_map_granularity(granularity);
    replay_on(events, config, Box::new(backing))
}

/// The host page a replay predicts by default (x86-64's, what the CPU
/// backend maps there).
pub const HOST_PAGE: usize = 4096;

/// Replays `events` through the policy over `backing` (a real one: a live
/// run, as the C ABI makes it). `config.capacity` only decides whether
/// [`Prediction::fits`] is answered; the backing enforces its own limit.
pub fn replay_on(
    events: &[TraceEvent],
    config: &ReplayConfig,
    backing: Box<dyn Backing>,
) -> Result<Prediction> {
    let mut policy = config.policy.clone();
    policy.trace = None;
    // The live run logged its errors already; the replay counts them.
    policy.log_errors = false;
    // The checks of the configuration string, on the configuration given.
    let policy =
        Config::from_json(&serde_json::to_string(&policy).map_err(|e| Error::Config {
            config: format!("{policy:?}"),
            reason: e.to_string(),
        })?)?;
    // The allocator meters its backing itself: its whole-run peak is the
    // prediction's.
    let mut a = PlannedAllocator::with_backing(policy, backing);
    let fallback_events = drive(&mut a, events)?;
    let stats = a.stats();
    let plan = a.slab().map(|s| s.plan.clone());
    let refused = stats.errors.replan_failed;
    let out_of_memory = stats.errors.out_of_memory + stats.errors.too_large;
    Ok(Prediction {
        peak_reserved_bytes: stats.peak_reserved_bytes,
        served_share: stats.served_share,
        live_lower_bound_bytes: stats.lower_bound_bytes,
        backing_calls: stats.backing_calls,
        replans: stats.replans,
        steps: stats.steps,
        slab_bytes: stats.slab_bytes,
        lower_bound: stats.lower_bound,
        fallback_allocations_max_step: stats.fallback_allocations_max_step,
        misses: stats.misses,
        out_of_memory,
        refused_reservations: refused,
        fits: config.capacity.map(|_| out_of_memory == 0 && refused == 0),
        plan,
        fallback_events,
        stats,
    })
}

/// A step call the allocator refused, at the `i`-th event (0-based; the
/// parser refuses such files, so only hand-made event lists get here).
/// Makes the calls a live run's C ABI made, in the trace's order, on an
/// allocator of the caller's: `alloc` for every `alloc` line (device 0,
/// the line's stream), `free` of the replay's address for every `free`
/// line of a block it gave, the step calls, and the phase of the requests
/// that follow for every `phase` line (as a caller's mark); segment lines are the
/// run's own reservations and drive nothing. Blocks still live at the end
/// stay live (as in the traced run). Returns the indices of the `alloc`
/// events inside serving steps whose block is not in the plan's slab.
/// Errors: a step call out of order (only hand-made event lists have one:
/// [`crate::trace::parse`] refuses such files).
pub fn drive(a: &mut PlannedAllocator, events: &[TraceEvent]) -> Result<Vec<usize>> {
    // Trace address -> replay address of live blocks.
    let mut live: HashMap<usize, usize> = HashMap::new();
    let mut fallback = Vec::new();
    let mut in_step = false;
    for (i, e) in events.iter().enumerate() {
        match *e {
            TraceEvent::StepBegin => {
                a.step_begin().map_err(|e| at_event(i, e))?;
                in_step = true;
            }
            TraceEvent::StepEnd => {
                a.step_end().map_err(|e| at_event(i, e))?;
                in_step = false;
            }
            TraceEvent::Alloc { addr, size, stream } => {
                let serving = in_step && a.phase() == Phase::Serving;
                // Device 0 as torch passes it; a host or null backing
                // serves any device.
                let got = a.alloc(size, 0, stream);
                if serving && !got.is_some_and(|p| a.slab().is_some_and(|s| s.contains(p))) {
                    fallback.push(i);
                }
                match got {
                    Some(p) if addr != 0 => {
                        if let Some(old) = live.insert(addr, p) {
                            // The trace reused a live address (a free
                            // missing from the file): the old block goes.
                            a.free(old);
                        }
                    }
                    // The traced run got NULL here: nothing will free it.
                    Some(p) => a.free(p),
                    None => {}
                }
            }
            TraceEvent::Free { addr, .. } => {
                if let Some(p) = live.remove(&addr) {
                    a.free(p);
                }
            }
            // The phase the run's requests were made in from here on.
            TraceEvent::Phase(p) => a.set_request_phase(p),
            TraceEvent::SegmentAlloc { .. } | TraceEvent::SegmentFree { .. } => {}
        }
    }
    Ok(fallback)
}

fn at_event(i: usize, e: Error) -> Error {
    Error::Config {
        config: format!("trace event {i}"),
        reason: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_regions_are_aligned_disjoint_and_counted() {
        let mut b = NullBacking::new(Some(10_000));
        let g = b.gauge();
        let x = b.reserve(1000).unwrap();
        let y = b.reserve(513).unwrap();
        assert_eq!((x % ALIGN, y % ALIGN), (0, 0));
        assert!(y >= x + 1000);
        assert_eq!((g.reserved_bytes(), g.peak_reserved_bytes()), (1513, 1513));
        assert!(b.reserve(9000).is_err());
        assert_eq!(g.refused(), 1);
        b.release(x);
        b.release(x);
        assert_eq!((g.reserved_bytes(), g.peak_reserved_bytes()), (513, 1513));
        assert_eq!(b.free_memory(), Some(10_000 - 513));
        assert!(b.fill(y, 513, 0).is_ok());
    }

    #[test]
    fn a_capacity_too_small_does_not_fit() {
        let mut text = String::from("event,addr,size,stream\n");
        for _ in 0..4 {
            text += "step_begin,0,0,0\nalloc,4096,100000,0\nfree,4096,100000,0\nstep_end,0,0,0\n";
        }
        let events = crate::trace::parse(&text).unwrap();
        let small = ReplayConfig {
            capacity: Some(50_000),
            ..ReplayConfig::default()
        };
        let p = replay(&events, &small).unwrap();
        assert_eq!(p.fits, Some(false));
        assert!(p.out_of_memory > 0);
        let large = ReplayConfig {
            capacity: Some(1 << 30),
            ..ReplayConfig::default()
        };
        assert_eq!(replay(&events, &large).unwrap().fits, Some(true));
    }

    #[test]
    fn a_bad_policy_is_refused() {
        let config = ReplayConfig {
            policy: Config {
                record_steps: 0,
                ..Config::default()
            },
            capacity: None,
        };
        assert!(replay(&[], &config).is_err());
    }
}
