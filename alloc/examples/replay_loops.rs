//! Replays the recorded training loops (alloc/tests/data/loops/*.csv.gz)
//! through the policy and prints, per loop, the whole-run figures the
//! allocator suite reports: peak reserved of the planned run against the
//! caching-allocator model (platform defaults, and expandable segments)
//! fed the same requests, served share after warm-up, re-plans and the
//! most fallback allocations in one serving step. A policy change is
//! judged with it in seconds, without torch.
//!
//! ```sh
//! cargo run --release -p tensor-arena-alloc --example replay_loops [POLICY_JSON]
//! TA_LOOPS_DIR=/work/gen-traces cargo run --release -p tensor-arena-alloc --example replay_loops
//! ```
//!
//! `TA_LOOPS_DIR` replays every `*.csv.gz` of another directory instead: the
//! traces the generated loops keep (`python python/benches/generated_loops
//! --keep-traces`). `TA_LOOP=NAME` replays one loop.

#[path = "../tests/support/loops.rs"]
mod loops;

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
        "| loop | steps | planned MiB | lower bound MiB | planned/LB | caching/LB | planned/caching | planned/expandable | served | re-plans | device calls | steady max | caching model allocations | slab/plan LB | planning wait ms | aligned / merged requests |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut logs = (0.0f64, 0.0f64, 0usize);
    let mut lb_logs = (0.0f64, 0.0f64);
    let only = std::env::var("TA_LOOP").ok();
    let all = match std::env::var_os("TA_LOOPS_DIR") {
        Some(dir) => loops::all_in(std::path::Path::new(&dir)),
        None => loops::all(),
    };
    for (name, events) in all {
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
        lb_logs = (lb_logs.0 + pl.ln(), lb_logs.1 + cl.ln());
        println!(
            "| {name} | {} | {:.2} | {:.2} | {pl:.3} | {cl:.3} | {rc:.3} | {re:.3} | {} | {} | {} | {} | {} | {:.3} | {:.1} | {} / {} |",
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
        );
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
    }
}
