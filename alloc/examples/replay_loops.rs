//! Replays the recorded training loops (alloc/tests/data/loops/*.csv.gz)
//! through the policy and prints, per loop, the whole-run figures the
//! allocator suite reports: peak reserved of the planned run against the
//! caching-allocator model (platform defaults, and expandable segments)
//! fed the same requests, served share after warm-up, re-plans and the
//! most fallback allocations in one serving step. A policy change is
//! judged with it in seconds, without torch.
//!
//! Two columns read the step-by-step figures (tests/support/step_peaks.rs):
//! the worst reserved / live peak of a step that set a new largest live
//! peak, and the take-over step over the steps after it (issue 38).
//! `TA_LOOP=NAME` replays one loop; `TA_STEPS=1` also prints, on standard
//! error, every step's live and reserved peak, the misses by kind and the
//! allocations the plan did not serve, per step.
//!
//! ```sh
//! cargo run --release -p tensor-arena-alloc --example replay_loops [POLICY_JSON]
//! # the traces of generated loops instead of the suite's, with their distribution:
//! TA_LOOPS_DIR=DIR cargo run --release -p tensor-arena-alloc --example replay_loops
//! ```
//!
//! `TA_LOOPS_DIR` replays every `*.csv.gz` of another directory instead: the
//! traces the generated loops keep (`python python/benches/generated_loops
//! --keep-traces`).

#[path = "../tests/support/growing.rs"]
mod growing;
#[path = "../tests/support/loops.rs"]
mod loops;
#[path = "../tests/support/step_peaks.rs"]
mod step_peaks;

use tensor_arena_alloc::Config;
use tensor_arena_alloc::replay::{self, ReplayConfig};

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
    println!(
        "| loop | steps | planned MiB | lower bound MiB | planned/LB | caching/LB | planned/caching | planned/expandable | served | re-plans | device calls | steady max | caching model allocations | slab/plan LB | planning wait ms | aligned / merged requests | new-peak step reserved/live (step) | take-over / later steps (step) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let verbose = std::env::var("TA_STEPS").is_ok();
    let mut logs = (0.0f64, 0.0f64, 0usize);
    let mut lb_logs = (0.0f64, 0.0f64);
    let only = std::env::var("TA_LOOP").ok();
    let mut dist = Distribution::default();
    for (name, events) in loops::all() {
        if only.as_ref().is_some_and(|o| *o != name) {
            continue;
        }
        let config = ReplayConfig {
            policy: policy.clone(),
            capacity: None,
        };
        let p = match replay::replay(&events, &config) {
            Ok(p) => p,
            Err(e) => {
                println!("| {name} | error: {e} |");
                continue;
            }
        };
        let s = &p.stats;
        let steps = step_peaks::step_peaks(&events, &policy);
        let t = step_peaks::targets(&steps);
        if verbose {
            eprintln!("{name}: misses {:?}", p.misses);
            // Allocations the plan did not serve, per step.
            let mut per_step = vec![0u32; p.steps as usize + 1];
            let mut step = 0usize;
            let mut next = p.fallback_events.iter().peekable();
            for (i, e) in events.iter().enumerate() {
                if matches!(e, tensor_arena_alloc::trace::TraceEvent::StepBegin) {
                    step += 1;
                }
                if next.peek() == Some(&&i) {
                    next.next();
                    if let Some(c) = per_step.get_mut(step) {
                        *c += 1;
                    }
                }
            }
            eprintln!("{name}: not from the plan, per step {:?}", &per_step[1..]);
            for (i, st) in steps.iter().enumerate() {
                eprintln!(
                    "{name} step {:3} live {:8.2} MiB reserved {:8.2} MiB ratio {:.3} at peak: slab {:.2} slab live {:.2} exact {:.2}{}",
                    i + 1,
                    mib(st.live),
                    mib(st.reserved),
                    st.reserved as f64 / st.live.max(1) as f64,
                    mib(st.at_peak.0),
                    mib(st.at_peak.1),
                    mib(st.at_peak.2),
                    if st.serving { "" } else { " (not serving)" }
                );
            }
        }
        let (c, e) = (
            s.caching_model.peak_reserved_bytes,
            s.expandable_model.peak_reserved_bytes,
        );
        let (rc, re) = (
            p.peak_reserved_bytes as f64 / c.max(1) as f64,
            p.peak_reserved_bytes as f64 / e.max(1) as f64,
        );
        logs = (logs.0 + rc.ln(), logs.1 + re.ln(), logs.2 + 1);
        let lb = p.live_lower_bound_bytes.max(1) as f64;
        let (pl, cl) = (p.peak_reserved_bytes as f64 / lb, c as f64 / lb);
        dist.push(pl, rc, re, p.served_share, p.replans);
        dist.overlap.0 += s.misses.overlap;
        dist.overlap.1 += s.overlap_behind_gap_blocks;
        lb_logs = (lb_logs.0 + pl.ln(), lb_logs.1 + cl.ln());
        println!(
            "| {name} | {} | {:.2} | {:.2} | {pl:.3} | {cl:.3} | {rc:.3} | {re:.3} | {} | {} | {} | {} | {} | {:.3} | {:.1} | {} / {} | {:.3} ({}) | {:.3} ({}) |",
            p.steps,
            mib(p.peak_reserved_bytes),
            mib(p.live_lower_bound_bytes),
            p.served_share.map_or_else(
                || "none served".to_owned(),
                |x| format!("{:.2}%", 100.0 * x)
            ),
            p.replans,
            p.backing_calls.memory(),
            s.backing_calls_max_steady_step,
            s.caching_model.device_allocations,
            s.slab_ratio,
            1000.0 * s.planning_wait_seconds_max,
            s.plan_requests_aligned,
            s.plan_requests_merged,
            t.new_peak.0,
            t.new_peak.1,
            t.take_over.0,
            t.take_over.1,
        );
    }
    // Synthetic loops whose shapes grow every step (not in the means).
    if only.is_none() {
        println!(
            "\n| synthetic growing loop (60 steps) | planned/LB | caching/LB | served | re-plans | device calls | new-peak step reserved/live (step) |"
        );
        println!("|---|---|---|---|---|---|---|");
        for growth in [1.01, 1.03, 1.10] {
            let events = growing::growing_loop(60, growth);
            let config = ReplayConfig {
                policy: policy.clone(),
                capacity: None,
            };
            let Ok(p) = replay::replay(&events, &config) else {
                continue;
            };
            let lb = p.live_lower_bound_bytes.max(1) as f64;
            let t = step_peaks::targets(&step_peaks::step_peaks(&events, &policy));
            println!(
                "| x{growth:.2} a step | {:.3} | {:.3} | {} | {} | {} | {:.3} ({}) |",
                p.peak_reserved_bytes as f64 / lb,
                p.stats.caching_model.peak_reserved_bytes as f64 / lb,
                p.served_share.map_or_else(
                    || "none served".to_owned(),
                    |x| format!("{:.2}%", 100.0 * x)
                ),
                p.replans,
                p.backing_calls.memory(),
                t.new_peak.0,
                t.new_peak.1,
            );
        }
    }
    if logs.2 > 0 {
        let n = logs.2 as f64;
        println!(
            "\ngeometric mean: planned/LB {:.3} (caching model/LB {:.3}), planned/caching {:.3}, planned/expandable {:.3} over {} loops",
            (lb_logs.0 / n).exp(),
            (lb_logs.1 / n).exp(),
            (logs.0 / n).exp(),
            (logs.1 / n).exp(),
            logs.2
        );
        dist.print();
    }
}

/// The per-loop figures, for their distribution over many loops.
#[derive(Default)]
struct Distribution {
    planned_lb: Vec<f64>,
    planned_caching: Vec<f64>,
    planned_expandable: Vec<f64>,
    served: Vec<f64>,
    replans: Vec<f64>,
    /// Overlap misses, and those behind a block a miss of the same step
    /// was put in a gap (the cascade), summed over the loops.
    overlap: (u64, u64),
}

impl Distribution {
    fn push(&mut self, pl: f64, rc: f64, re: f64, served: Option<f64>, replans: u64) {
        self.planned_lb.push(pl);
        self.planned_caching.push(rc);
        self.planned_expandable.push(re);
        if let Some(s) = served {
            self.served.push(s);
        }
        self.replans.push(replans as f64);
    }

    fn print(&self) {
        println!("\n| figure | min | median | p90 | max |\n|---|---|---|---|---|");
        for (name, v) in [
            ("planned/LB", &self.planned_lb),
            ("planned/caching", &self.planned_caching),
            ("planned/expandable", &self.planned_expandable),
            ("served", &self.served),
            ("re-plans", &self.replans),
        ] {
            let mut v = v.clone();
            v.sort_by(f64::total_cmp);
            let q = |f: f64| v[((v.len() - 1) as f64 * f).round() as usize];
            if !v.is_empty() {
                println!(
                    "| {name} | {:.3} | {:.3} | {:.3} | {:.3} |",
                    q(0.0),
                    q(0.5),
                    q(0.9),
                    q(1.0)
                );
            }
        }
        let over = |v: &[f64]| v.iter().filter(|&&r| r > 1.0).count();
        println!(
            "\nloops above the caching model: {}, above expandable segments: {} (of {})",
            over(&self.planned_caching),
            over(&self.planned_expandable),
            self.planned_lb.len()
        );
        println!(
            "overlap misses: {}, of them behind a block a miss of the same step put in a gap: {}",
            self.overlap.0, self.overlap.1
        );
    }
}
