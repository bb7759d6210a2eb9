//! Per-step figures of a replay: each step's live peak (every live block
//! rounded to 512 bytes, the live lower bound of that step) and the most
//! bytes the backing held during it. The issue-38 targets are read from
//! them: a step that sets a new largest live peak reserves at most 1.10x
//! its own live peak, and the take-over step (the first that maps the
//! slab) at most 1.05x the peak of the steps after it.

use std::collections::HashMap;

use tensor_arena_alloc::replay::NullBacking;
use tensor_arena_alloc::trace::TraceEvent;
use tensor_arena_alloc::{Config, Phase, PlannedAllocator};

/// One step's figures.
#[derive(Debug, Clone, Copy, Default)]
pub struct StepPeak {
    /// Most live bytes (512-rounded) at once in the step.
    pub live: u64,
    /// Most bytes held from the backing at once in the step (its end's
    /// plan work included).
    pub reserved: u64,
    /// Whether a plan served the step (from its start).
    pub serving: bool,
    /// At the step's reserved peak: the slab's region bytes, the slot
    /// bytes of its live blocks, the exact regions' bytes.
    pub at_peak: (u64, u64, u64),
}

/// What the targets read from the steps.
#[derive(Debug, Clone, Copy, Default)]
pub struct StepTargets {
    /// The worst reserved / live of a step (after the first) that set a
    /// new largest live peak, and that step.
    pub new_peak: (f64, u64),
    /// The first serving step's reserved peak over the largest reserved
    /// peak of the steps after it, and that step.
    pub take_over: (f64, u64),
}

/// Replays `events` under `policy` (host pages, no capacity) step by step.
pub fn step_peaks(events: &[TraceEvent], policy: &Config) -> Vec<StepPeak> {
    let backing = NullBacking::new(None).with_map_granularity(Some(4096));
    let gauge = backing.gauge();
    let mut policy = policy.clone();
    policy.trace = None;
    policy.log_errors = false;
    let mut a = PlannedAllocator::with_backing(policy, Box::new(backing));
    let mut live: HashMap<usize, (usize, u64)> = HashMap::new();
    let mut live_bytes = 0u64;
    let mut steps = Vec::new();
    let mut cur = StepPeak::default();
    for e in events {
        match *e {
            TraceEvent::StepBegin => {
                a.step_begin().ok();
                cur = StepPeak {
                    live: live_bytes,
                    reserved: gauge.reserved_bytes(),
                    serving: a.phase() == Phase::Serving,
                    at_peak: snapshot(&a),
                };
            }
            TraceEvent::StepEnd => {
                a.step_end().ok();
                cur.reserved = cur.reserved.max(gauge.reserved_bytes());
                steps.push(cur);
            }
            TraceEvent::Alloc { addr, size, stream } => {
                let got = a.alloc(size, 0, stream);
                match got {
                    Some(p) if addr != 0 => {
                        let r = (size as u64).next_multiple_of(512);
                        live_bytes += r;
                        if let Some((old, ob)) = live.insert(addr, (p, r)) {
                            a.free(old);
                            live_bytes -= ob;
                        }
                    }
                    Some(p) => a.free(p),
                    None => {}
                }
                cur.live = cur.live.max(live_bytes);
                if gauge.reserved_bytes() > cur.reserved {
                    cur.reserved = gauge.reserved_bytes();
                    cur.at_peak = snapshot(&a);
                }
            }
            TraceEvent::Free { addr, .. } => {
                if let Some((p, r)) = live.remove(&addr) {
                    a.free(p);
                    live_bytes -= r;
                }
            }
            TraceEvent::Phase(p) => a.set_request_phase(p),
            TraceEvent::SegmentAlloc { .. } | TraceEvent::SegmentFree { .. } => {}
        }
    }
    steps
}

fn snapshot(a: &PlannedAllocator) -> (u64, u64, u64) {
    let (region, live) = a.slab().map_or((0, 0), |s| {
        (
            s.region_bytes as u64,
            s.live_blocks().map(|(_, slot, _)| slot).sum(),
        )
    });
    (region, live, a.exact().reserved_bytes())
}

/// The targets' figures of `steps`.
pub fn targets(steps: &[StepPeak]) -> StepTargets {
    let mut t = StepTargets::default();
    let mut best_live = 0u64;
    for (i, s) in steps.iter().enumerate() {
        if s.live > best_live {
            if i > 0 {
                let r = s.reserved as f64 / s.live.max(1) as f64;
                if r > t.new_peak.0 {
                    t.new_peak = (r, i as u64 + 1);
                }
            }
            best_live = s.live;
        }
    }
    if let Some(first) = steps.iter().position(|s| s.serving) {
        // The take-over is the step whose start the plan's region waits
        // for: the first serving step.
        let after = steps[first + 1..]
            .iter()
            .map(|s| s.reserved)
            .max()
            .unwrap_or(0);
        t.take_over = (
            steps[first].reserved as f64 / after.max(1) as f64,
            first as u64 + 1,
        );
    }
    t
}
