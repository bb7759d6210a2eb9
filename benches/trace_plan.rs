//! Time to plan the arena of a trace (`diag::plan_trace`) at 50k, 200k and
//! 1M allocations, with two baselines in the same run:
//!
//! - `trace_plan/lower_bound/N`: the lower bound alone over the same
//!   intervals (one sort and one sweep): the least any planner must do;
//! - `trace_plan/greedy_whole/50k`: the planner's plain greedy placement
//!   (by size, best fit) of the whole trace by real lifetimes, which is
//!   quadratic, at 50k only.
//!
//! The traces are synthetic training loops with a prefetched batch
//! crossing every step boundary and 42 buffers made at random steps and
//! never freed. The footprint ratios (slab / lower bound) are printed once
//! per size.
//!
//! ```sh
//! cargo bench --bench trace_plan
//! python3 benches/medians.py trace_plan
//! ```

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use tensor_arena::diag::{SyntheticConfig, Trace, intervals, plan_trace, synthetic};
use tensor_arena::plan::placement::{self, GreedyOrder};

/// About 40 allocations a step.
fn trace(steps: usize) -> Trace {
    synthetic(&SyntheticConfig {
        steps,
        prefetch: true,
        late_held: 42,
        ..SyntheticConfig::default()
    })
    .expect("valid synthetic config")
}

fn plans(c: &mut Criterion) {
    let mut g = c.benchmark_group("trace_plan");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(5));
    for (label, steps) in [("50k", 1250), ("200k", 5000), ("1M", 25000)] {
        let t = trace(steps);
        let plan = plan_trace(&t);
        eprintln!(
            "{label}: {} allocations, slab {} / lower bound {} = {:.5} ({} windows, {} long)",
            t.allocations().len(),
            plan.slab_bytes,
            plan.lower_bound,
            plan.footprint_ratio(),
            plan.windows,
            plan.long_lived
        );
        g.bench_with_input(BenchmarkId::new("plan", label), &t, |b, t| {
            b.iter(|| plan_trace(black_box(t)).slab_bytes)
        });
        let items = intervals(&t);
        g.bench_with_input(
            BenchmarkId::new("lower_bound", label),
            &items,
            |b, items| b.iter(|| placement::lower_bound(black_box(items))),
        );
        if label == "50k" {
            let off = placement::greedy(&items, GreedyOrder::Size);
            eprintln!(
                "50k greedy whole: {:.5}",
                placement::height(&items, &off) as f64 / plan.lower_bound as f64
            );
            g.bench_with_input(
                BenchmarkId::new("greedy_whole", label),
                &items,
                |b, items| b.iter(|| placement::greedy(black_box(items), GreedyOrder::Size)),
            );
        }
    }
    g.finish();
}

criterion_group!(benches, plans);
criterion_main!(benches);
