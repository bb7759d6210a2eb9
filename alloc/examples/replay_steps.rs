//! Replays recorded training loops step by step and says where each loop's
//! whole-run peak reserved goes beyond its live lower bound (issue 38's
//! diagnosis): per step the live peak, the reserved (mapped) peak, the
//! slab, the regions outside it, the misses by reason and whether the step
//! re-planned; per loop the excess over the lower bound split by cause.
//!
//! ```sh
//! cargo run --release -p tensor-arena-alloc --example replay_steps [POLICY_JSON]
//! TA_LOOPS_DIR=TRACES_DIR TA_STEPS=1 TA_LOOP=loop-1-010 cargo run ... --example replay_steps
//! ```
//!
//! At the moment of the whole-run peak reserved, the mapped bytes are
//! split exactly: reserved = slab regions + live outside the slab + idle
//! mapped pages no region touches + slack (page and 512-byte rounding of
//! the regions outside the slab). So reserved - LB = B + idle + slack,
//! with B = slab regions + live outside - LB (what the slab holds beyond
//! the room the bound leaves beside the blocks outside it). The causes:
//!
//! - (a) outgrow: in a serving step that sets a new largest live peak,
//!   the part of B the step's misses (live outside the slab) make:
//!   min(B, misses live outside);
//! - (e) the same in any other step (misses and kept blocks outside the
//!   slab while its bytes sit unused);
//! - (d) slab over-provisioned: the rest of B (sites sized for the largest
//!   or the next bucket, fragmentation, a slab larger than the steps it
//!   serves; negative when the peak moment holds less than the bound);
//! - (b) take-over / warm-up: idle mapped pages at or before the step the
//!   first slab is mapped in (the warm-up's chunks);
//! - (c) idle pages in a later step (never unmapped after a shrink or a
//!   re-plan);
//! - (f) region slack.

#[path = "../tests/support/loops.rs"]
mod loops;

use std::collections::{HashMap, HashSet};

use tensor_arena_alloc::replay::{HOST_PAGE, NullBacking};
use tensor_arena_alloc::trace::TraceEvent;
use tensor_arena_alloc::{Config, Misses, Phase, PlannedAllocator};

/// The mapped bytes at a step's reserved peak, split.
#[derive(Debug, Clone, Copy, Default)]
struct Snapshot {
    reserved: u64,
    live: u64,
    slab_regions: u64,
    live_in_slab: u64,
    misses_live_outside: u64,
    idle: u64,
}

impl Snapshot {
    fn take(a: &PlannedAllocator, live: u64, misses_live_outside: u64) -> Snapshot {
        let slabs = a.slab().into_iter().chain(a.retiring().iter());
        let (mut regions, mut in_slab) = (0u64, 0u64);
        // A region's mapped bytes: a step that missed may have lent the
        // slab's idle pages (unmapped; allocator/lending.rs).
        let space = a.backing_metered().space();
        let unmapped = |base: usize, len: u64| -> u64 {
            space.filter(|sp| sp.contains(base)).map_or(0, |sp| {
                sp.unmapped_runs(base - sp.base(), len as usize)
                    .iter()
                    .map(|r| r.1 as u64)
                    .sum()
            })
        };
        for s in slabs {
            regions += s
                .regions()
                .map(|(b, l)| l - unmapped(b, l).min(l))
                .sum::<u64>();
            in_slab += s.live_blocks().map(|(_, slot, _)| slot).sum::<u64>();
        }
        Snapshot {
            reserved: a.backing_metered().current(),
            live,
            slab_regions: regions,
            live_in_slab: in_slab.min(regions),
            misses_live_outside,
            idle: a.backing_metered().idle_mapped_bytes() as u64,
        }
    }
}

/// One step's figures.
#[derive(Debug, Clone, Default)]
struct Step {
    n: u64,
    phase: &'static str,
    live_peak: u64,
    at_peak: Snapshot,
    slab_bytes: u64,
    plan_lb: u64,
    misses: Misses,
    replanned: bool,
    /// A re-plan made at this step's end was declined (`lending.rs`).
    declined: bool,
    /// The first step a slab is mapped in.
    take_over: bool,
    /// Sets a new largest live peak (over every earlier step).
    new_live_max: bool,
    /// Slot bytes of the slabs held, at the step's start, by blocks made
    /// two or more steps before (kept past their planned lifetime: they
    /// pin bytes the plan's sites need).
    pinned_old: u64,
    /// Requests of a serving step, and those served from the plan.
    requests_serving: u64,
    served: u64,
    /// No earlier step made the same number of requests with every size
    /// at most this step's at the same place ([`Novelty`]).
    novel: bool,
}

/// Steps' request sizes in order, to tell a step that repeats an earlier
/// one (the same count of requests, each at most the earlier one's size
/// at its place: a plan made from that step could hold it) from a novel
/// one (a new shape, a new data-dependent size, an eval pass seen for the
/// first time), which no plan made from the steps before it can know.
#[derive(Default)]
struct Novelty {
    seen: HashMap<usize, Vec<Vec<usize>>>,
    current: Vec<usize>,
}

impl Novelty {
    /// Ends the step: whether it was novel.
    fn end_step(&mut self) -> bool {
        let step = std::mem::take(&mut self.current);
        let earlier = self.seen.entry(step.len()).or_default();
        let novel = !earlier
            .iter()
            .any(|e| e.iter().zip(&step).all(|(a, b)| b <= a));
        if novel {
            earlier.push(step);
        }
        novel
    }
}

const CAUSES: [&str; 6] = [
    "a outgrow",
    "b take-over/warm-up",
    "c idle pages",
    "d slab over-provisioned",
    "e misses outside slab",
    "f region slack",
];

fn diff(a: &Misses, b: &Misses) -> Misses {
    Misses {
        size: a.size - b.size,
        order: a.order - b.order,
        unmatched: a.unmatched - b.unmatched,
        overlap: a.overlap - b.overlap,
        stream: a.stream - b.stream,
        outside_step: a.outside_step - b.outside_step,
        pending: a.pending - b.pending,
    }
}

/// Replays `events` and returns every step's figures and the live lower
/// bound.
fn run(events: &[TraceEvent], policy: &Config) -> (Vec<Step>, u64, u64) {
    let granularity = match policy.map_granularity {
        None => Some(HOST_PAGE),
        Some(0) => None,
        Some(g) => Some(g as usize),
    };
    let mut policy = policy.clone();
    policy.trace = None;
    policy.log_errors = false;
    let backing = NullBacking::new(None).with_map_granularity(granularity);
    let mut a = PlannedAllocator::with_backing(policy, Box::new(backing));
    let mut live_map: HashMap<usize, (usize, u64)> = HashMap::new();
    let mut outside_this_step: HashSet<usize> = HashSet::new();
    let (mut live, mut lb, mut miss_live) = (0u64, 0u64, 0u64);
    let mut steps: Vec<Step> = Vec::new();
    let mut cur = Step::default();
    let mut misses_at = Misses::default();
    let mut replans_at = 0u64;
    let mut declined_at = 0u64;
    let mut slab_seen = false;
    let mut max_live_before = 0u64;
    let mut peak_reserved = 0u64;
    let mut novelty = Novelty::default();
    let (mut served_at, mut serving_at) = (0u64, 0u64);
    for e in events {
        match *e {
            TraceEvent::StepBegin => {
                let _ = a.step_begin();
                let n = a.step();
                let pinned_old = a
                    .slab()
                    .into_iter()
                    .chain(a.retiring().iter())
                    .flat_map(|s| {
                        s.live_blocks()
                            .filter_map(|(addr, slot, _)| Some((s.live_block_at(addr)?, slot)))
                            .collect::<Vec<_>>()
                    })
                    .filter(|(b, _)| b.origin.step > 0 && b.origin.step + 1 < n)
                    .map(|(_, slot)| slot)
                    .sum();
                cur = Step {
                    n,
                    pinned_old,
                    ..Step::default()
                };
                outside_this_step.clear();
                miss_live = 0;
            }
            TraceEvent::StepEnd => {
                let _ = a.step_end();
            }
            TraceEvent::Alloc { addr, size, stream } => {
                novelty.current.push(size);
                let serving = a.phase() == Phase::Serving;
                let got = a.alloc(size, 0, stream);
                if let Some(p) = got {
                    let rounded = (size as u64).next_multiple_of(512);
                    if addr != 0 {
                        if let Some((old, osz)) = live_map.insert(addr, (p, rounded)) {
                            a.free(old);
                            live -= osz;
                            if outside_this_step.remove(&old) {
                                miss_live -= osz;
                            }
                        }
                        live += rounded;
                        lb = lb.max(live);
                        if serving && !a.slab().is_some_and(|s| s.contains(p)) {
                            outside_this_step.insert(p);
                            miss_live += rounded;
                        }
                    } else {
                        a.free(p);
                    }
                }
            }
            TraceEvent::Free { addr, .. } => {
                if let Some((p, sz)) = live_map.remove(&addr) {
                    a.free(p);
                    live -= sz;
                    if outside_this_step.remove(&p) {
                        miss_live -= sz;
                    }
                }
            }
            TraceEvent::Phase(p) => a.set_request_phase(p),
            TraceEvent::SegmentAlloc { .. } | TraceEvent::SegmentFree { .. } => {}
        }
        cur.live_peak = cur.live_peak.max(live);
        let reserved = a.backing_metered().current();
        peak_reserved = peak_reserved.max(reserved);
        if reserved > cur.at_peak.reserved {
            cur.at_peak = Snapshot::take(&a, live, miss_live);
        }
        if matches!(e, TraceEvent::StepEnd) {
            let s = a.stats();
            cur.phase = s.phase;
            cur.misses = diff(&s.misses, &misses_at);
            misses_at = s.misses;
            cur.replanned = s.replans > replans_at;
            replans_at = s.replans;
            cur.declined = s.replans_declined > declined_at;
            declined_at = s.replans_declined;
            if let Some(slab) = a.slab() {
                cur.slab_bytes = slab.plan.slab_bytes;
                cur.plan_lb = slab.plan.lower_bound;
            }
            cur.take_over = a.slab().is_some() && !slab_seen;
            slab_seen |= a.slab().is_some();
            cur.requests_serving = s.requests_after_warmup - serving_at;
            cur.served = s.served_from_plan - served_at;
            (serving_at, served_at) = (s.requests_after_warmup, s.served_from_plan);
            cur.novel = novelty.end_step();
            cur.new_live_max = cur.live_peak > max_live_before;
            max_live_before = max_live_before.max(cur.live_peak);
            steps.push(std::mem::take(&mut cur));
        }
    }
    (steps, lb, peak_reserved)
}

/// Each cause's share of the excess over the bound, in bytes: an exact
/// split of the whole-run peak reserved minus the bound (see the file's
/// comment), and the peak's step.
fn attribute(steps: &[Step], lb: u64) -> ([f64; 6], usize) {
    let Some((i, peak)) = steps
        .iter()
        .enumerate()
        .max_by_key(|(i, s)| (s.at_peak.reserved, std::cmp::Reverse(*i)))
    else {
        return ([0.0; 6], 0);
    };
    let p = peak.at_peak;
    let take_over_at = steps.iter().position(|s| s.take_over).unwrap_or(usize::MAX);
    let live_outside = p.live.saturating_sub(p.live_in_slab) as f64;
    let slab = p.slab_regions as f64;
    let idle = p.idle as f64;
    let slack = p.reserved as f64 - slab - live_outside - idle;
    // The slab and the blocks outside it beyond the bound: what the slab
    // holds that the bound did not need at this moment, given the blocks
    // outside it (misses duplicate slab room; the rest is the plan's).
    let beyond = slab + live_outside - lb as f64;
    let mut w = [0.0f64; 6];
    let m = beyond.max(0.0).min(p.misses_live_outside as f64);
    if peak.new_live_max && i > take_over_at {
        w[0] = m;
    } else {
        w[4] = m;
    }
    w[3] = beyond - m;
    if i <= take_over_at {
        w[1] = idle;
    } else {
        w[2] = idle;
    }
    w[5] = slack;
    (w, i)
}

fn schedule(name: &str) -> &'static str {
    let Some(i) = name
        .rsplit('-')
        .next()
        .and_then(|n| n.parse::<usize>().ok())
        .filter(|_| name.starts_with("loop-"))
    else {
        return "suite";
    };
    ["fixed", "bucketed", "random", "growing"][(i / 4) % 4]
}

fn main() {
    let policy = std::env::args().nth(1).unwrap_or_default();
    let policy = match Config::from_json(&policy) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let only = std::env::var("TA_LOOP").ok();
    let every_step = std::env::var_os("TA_STEPS").is_some();
    // Per schedule: sums of the causes' bytes, of the bounds, loops.
    let mut by_schedule: Vec<(&'static str, [f64; 6], f64, usize)> = Vec::new();
    let mut served_split = ServedSplit::default();
    println!(
        "| loop | schedule | planned/LB | peak step | its kind | worst new-live-max step reserved/live | take-over reserved / later peak | {} |",
        CAUSES.join(" | ")
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (name, events) in loops::all() {
        if only.as_ref().is_some_and(|o| *o != name) {
            continue;
        }
        let (steps, lb, peak) = run(&events, &policy);
        if every_step {
            println!(
                "\n{name}: step | phase | live peak MiB | reserved peak MiB | r/l | slab MiB | plan LB MiB | at peak: slab regions, live in slab, outside slab, misses live outside, idle MiB | misses size/order/unmatched/overlap/stream | re-plan | new live max | take-over | slab bytes pinned by blocks kept past their step MiB"
            );
            for s in &steps {
                let p = s.at_peak;
                println!(
                    "{} | {} | {:.2} | {:.2} | {:.3} | {:.2} | {:.2} | {:.2}, {:.2}, {:.2}, {:.2}, {:.2} | {}/{}/{}/{}/{} | {} | {} | {} | {:.2}",
                    s.n,
                    s.phase,
                    mib(s.live_peak),
                    mib(p.reserved),
                    p.reserved as f64 / s.live_peak.max(1) as f64,
                    mib(s.slab_bytes),
                    mib(s.plan_lb),
                    mib(p.slab_regions),
                    mib(p.live_in_slab),
                    mib(p.reserved.saturating_sub(p.slab_regions)),
                    mib(p.misses_live_outside),
                    mib(p.idle),
                    s.misses.size,
                    s.misses.order,
                    s.misses.unmatched,
                    s.misses.overlap,
                    s.misses.stream,
                    if s.replanned {
                        "yes"
                    } else if s.declined {
                        "declined"
                    } else {
                        ""
                    },
                    if s.new_live_max { "yes" } else { "" },
                    if s.take_over { "yes" } else { "" },
                    mib(s.pinned_old),
                );
            }
        }
        let (w, i) = attribute(&steps, lb);
        let kind = match steps.get(i) {
            Some(s) if s.take_over => "take-over",
            Some(s) if s.phase != "serving" => "pre-plan",
            Some(s) if s.new_live_max => "new live max",
            Some(s) if s.replanned => "re-plan",
            Some(_) => "serving",
            None => "-",
        };
        let serving_after = steps.iter().position(|s| s.take_over);
        let worst_new = steps
            .iter()
            .skip(1)
            .filter(|s| s.new_live_max && s.phase == "serving")
            .map(|s| s.at_peak.reserved as f64 / s.live_peak.max(1) as f64)
            .fold(0.0f64, f64::max);
        let take_over = serving_after.map_or(0.0, |t| {
            let later = steps[t + 1..]
                .iter()
                .map(|s| s.at_peak.reserved)
                .max()
                .unwrap_or(0);
            steps[t].at_peak.reserved as f64 / later.max(1) as f64
        });
        served_split.push(&steps);
        let lbf = lb.max(1) as f64;
        if std::env::var_os("TA_SPLIT").is_some()
            && let Some(s) = steps.get(i)
        {
            let p = s.at_peak;
            let out = p.live.saturating_sub(p.live_in_slab);
            println!(
                "split {name}: LB {:.2} MiB; at the peak (step {}, {}): reserved {:.3} LB = live {:.3} + slab free {:.3} + idle pages {:.3} + slack {:.3}; live outside slab {:.3} (misses of the step {:.3}); slab regions {:.3}; plan slab {:.3}, plan LB {:.3}; step live peak {:.3}; most slab bytes pinned by kept blocks in one step {:.3}",
                mib(lb),
                s.n,
                s.phase,
                p.reserved as f64 / lbf,
                p.live as f64 / lbf,
                p.slab_regions.saturating_sub(p.live_in_slab) as f64 / lbf,
                p.idle as f64 / lbf,
                p.reserved.saturating_sub(p.slab_regions + out + p.idle) as f64 / lbf,
                out as f64 / lbf,
                p.misses_live_outside as f64 / lbf,
                p.slab_regions as f64 / lbf,
                s.slab_bytes as f64 / lbf,
                s.plan_lb as f64 / lbf,
                s.live_peak as f64 / lbf,
                steps.iter().map(|s| s.pinned_old).max().unwrap_or(0) as f64 / lbf,
            );
        }
        println!(
            "| {name} | {} | {:.3} | {} | {kind} | {worst_new:.3} | {take_over:.3} | {} |",
            schedule(&name),
            peak as f64 / lbf,
            steps.get(i).map_or(0, |s| s.n),
            w.iter()
                .map(|x| format!("{:+.3}", x / lbf))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        let sched = schedule(&name);
        let slot = match by_schedule.iter().position(|(s, ..)| *s == sched) {
            Some(j) => j,
            None => {
                by_schedule.push((sched, [0.0; 6], 0.0, 0));
                by_schedule.len() - 1
            }
        };
        let e = &mut by_schedule[slot];
        for (sum, x) in e.1.iter_mut().zip(w) {
            *sum += x / lbf;
        }
        e.2 += peak as f64 / lbf - 1.0;
        e.3 += 1;
    }
    println!(
        "\nmean excess over LB per loop (in LB units) by cause:\n| schedule | loops | mean excess | {} |",
        CAUSES.join(" | ")
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut all = ([0.0f64; 6], 0.0f64, 0usize);
    for (s, w, ex, n) in &by_schedule {
        let nf = *n as f64;
        println!(
            "| {s} | {n} | {:.3} | {} |",
            ex / nf,
            w.iter()
                .map(|x| format!("{:.3} ({:.0}%)", x / nf, 100.0 * x / ex.max(1e-12)))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        for (sum, x) in all.0.iter_mut().zip(w) {
            *sum += x;
        }
        all.1 += ex;
        all.2 += n;
    }
    let nf = all.2.max(1) as f64;
    println!(
        "| all | {} | {:.3} | {} |",
        all.2,
        all.1 / nf,
        all.0
            .iter()
            .map(|x| format!("{:.3} ({:.0}%)", x / nf, 100.0 * x / all.1.max(1e-12)))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    served_split.print();
}

/// Served from the plan, split by whether the step repeats an earlier one
/// ([`Novelty`]), per loop and over the loops.
#[derive(Default)]
struct ServedSplit {
    /// Per loop: the share of its serving requests made in novel steps.
    novel_share: Vec<f64>,
    /// Per loop with such steps: served share on repeated / novel steps.
    on_repeated: Vec<f64>,
    on_novel: Vec<f64>,
    /// Requests not served, summed over the loops: in novel, repeated steps.
    missed: (u64, u64),
    /// Misses by reason in repeated steps, summed over the loops.
    repeated_misses: Misses,
}

impl ServedSplit {
    fn push(&mut self, steps: &[Step]) {
        let (mut rn, mut sn, mut rr, mut sr) = (0u64, 0u64, 0u64, 0u64);
        for s in steps {
            if s.novel {
                (rn, sn) = (rn + s.requests_serving, sn + s.served);
            } else {
                (rr, sr) = (rr + s.requests_serving, sr + s.served);
                let m = &mut self.repeated_misses;
                m.size += s.misses.size;
                m.order += s.misses.order;
                m.unmatched += s.misses.unmatched;
                m.overlap += s.misses.overlap;
                m.stream += s.misses.stream;
            }
        }
        if rn + rr == 0 {
            return;
        }
        self.novel_share.push(rn as f64 / (rn + rr) as f64);
        if rr > 0 {
            self.on_repeated.push(sr as f64 / rr as f64);
        }
        if rn > 0 {
            self.on_novel.push(sn as f64 / rn as f64);
        }
        self.missed.0 += rn - sn;
        self.missed.1 += rr - sr;
    }

    fn print(&self) {
        let median = |v: &[f64]| -> f64 {
            let mut v = v.to_vec();
            v.sort_by(f64::total_cmp);
            match v.len() {
                0 => f64::NAN,
                n if n % 2 == 1 => v[n / 2],
                n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
            }
        };
        println!(
            "\nserved from the plan by step kind (a step is novel when no earlier step made as many requests, each at least as large at its place): loops {}; serving requests in novel steps, median {:.1}% of a loop's; served on repeated steps, median {:.2}% ({} loops); on novel steps, median {:.2}% ({} loops); requests not served: {} in novel steps, {} in repeated steps (misses there: size {}, order {}, unmatched {}, overlap {}, stream {}; the rest blocks kept past their step, outside the plan by design)",
            self.novel_share.len(),
            100.0 * median(&self.novel_share),
            100.0 * median(&self.on_repeated),
            self.on_repeated.len(),
            100.0 * median(&self.on_novel),
            self.on_novel.len(),
            self.missed.0,
            self.missed.1,
            self.repeated_misses.size,
            self.repeated_misses.order,
            self.repeated_misses.unmatched,
            self.repeated_misses.overlap,
            self.repeated_misses.stream,
        );
    }
}
