//! Placement quality is in BENCHMARKS.md; this measures placement time, with
//! the baseline (greedy by size, TFLite's and XLA's planner) in the same run:
//!
//! - `minimalloc/{greedy,best,search}/X`: MiniMalloc's challenging instances
//!   A-F (tests/data/minimalloc) placed by greedy by size, by the best of
//!   every greedy order, and by the search fitting capacity 1048576 (which
//!   greedy misses by 24-41%);
//! - `large/*/10000`: 10,000 buffers with random training-like lifetimes,
//!   placed by greedy by size and best of orders, and planned end to end by
//!   the `Planner` (10,000 specs, default strategy).
//!
//! - `idealloc/{greedy,best,auto}/X`: idealloc's IOPDDL instances
//!   (tests/data/idealloc; G_1 816 buffers, S_1 28,526, Y_1 62,185) placed
//!   by greedy by size (the previous default above 2,048 buffers) and by
//!   the default strategy (`auto`: greedy, then re-ordered best fit until
//!   the lower bound or the time limit); best of orders on G_1 only (tens
//!   of seconds on the large ones). Ratios to the lower bound are printed
//!   once per instance and strategy.
//!
//! - `step/{sweep,by-size,auto}/Nx`: N time-shifted copies of Y_1 (1x, 2x,
//!   3x: 186,555 buffers, the size of a large model's step; 10x: 621,850),
//!   all with Y_1's lower bound: the default's first placement (best fit in
//!   start order, one sweep over time, O(n log n)), greedy by size (the
//!   previous default's first placement; best-fit scans, O(n²) in one
//!   piece, here per time-independent copy) and the default strategy
//!   (10 s time limit). Ratios to the lower bound are printed once per
//!   size and strategy; the 3x instance is written to
//!   `$TMPDIR/tensor-arena-Y_1x3.csv` for `tensor-arena plan --csv`.
//!
//! - `scale/{sweep,auto}/X`: generated instances of 0.6 to 1 million
//!   buffers (issue 33): ten copies of Y_1 one after the other (`shift1`)
//!   and shifted by half, a quarter and a tenth of Y_1's span so that the
//!   copies overlap in time; sixteen copies at half a span (994,960
//!   buffers); a random interval graph of 10^6 buffers. `sweep` is the
//!   first placement and also the previous default's answer at this size
//!   (its rounds did not finish one pass within the 10 s limit); `auto` is
//!   the default (windowed repair, window.rs). Ratios to the lower bound
//!   are printed once per instance; the same instances, one run each:
//!   `cargo run --release --example plan_scale`.
//!
//! ```sh
//! cargo bench --bench planner
//! cargo bench --bench planner -- scale
//! cargo bench --bench planner -- step
//! cargo bench --bench planner -- idealloc
//! python3 benches/medians.py
//! ```

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, SamplingMode, criterion_group, criterion_main};
use tensor_arena::Planner;
use tensor_arena::plan::placement::{self, AUTO_BEST_MAX, GreedyOrder, Interval, Strategy};
use tensor_arena::plan::{families, minimalloc};

const CAPACITY: usize = 1_048_576;

fn load(name: &str) -> Vec<Interval> {
    let path = format!(
        "{}/tests/data/minimalloc/{name}.1048576.csv",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(path).expect("instance file");
    minimalloc::parse(&text).expect("valid instance").buffers
}

fn instances(c: &mut Criterion) {
    let mut g = c.benchmark_group("minimalloc");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(4));
    for name in ["A", "B", "C", "D", "E", "F"] {
        let items = load(name);
        g.bench_with_input(BenchmarkId::new("greedy", name), &items, |b, items| {
            b.iter(|| placement::greedy(black_box(items), GreedyOrder::Size))
        });
        g.bench_with_input(BenchmarkId::new("best", name), &items, |b, items| {
            b.iter(|| placement::best_of_orders(black_box(items)))
        });
        let strategy = Strategy::search()
            .with_capacity(CAPACITY)
            .with_time_limit(Duration::from_secs(30));
        g.bench_with_input(BenchmarkId::new("search", name), &items, |b, items| {
            b.iter(|| {
                let s = placement::solve(black_box(items), &strategy).expect("solve");
                assert!(s.fits, "{name} not fitted");
                s.height
            })
        });
    }
    g.finish();
}

/// A deterministic stand-in for a large training step: buffers start
/// anywhere in 20,000 time steps, most live briefly, some long; sizes are
/// 512-byte multiples up to 128 KiB.
fn large_instance(n: usize) -> Vec<Interval> {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move |m: u64| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((state >> 33) % m) as usize
    };
    (0..n)
        .map(|_| {
            let lower = next(20_000);
            let len = if next(10) == 0 {
                1 + next(2_000)
            } else {
                1 + next(40)
            };
            Interval {
                lower,
                upper: lower + len,
                size: 512 * (1 + next(256)),
            }
        })
        .collect()
}

fn large(c: &mut Criterion) {
    const N: usize = 10_000;
    let items = large_instance(N);
    let mut g = c.benchmark_group("large");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(5));
    g.bench_with_input(BenchmarkId::new("greedy", N), &items, |b, items| {
        b.iter(|| placement::greedy(black_box(items), GreedyOrder::Size))
    });
    g.bench_with_input(BenchmarkId::new("best", N), &items, |b, items| {
        b.iter(|| placement::best_of_orders(black_box(items)))
    });
    // The same lifetimes as planner specs over 64 phases.
    let mut planner = Planner::new();
    let phases: Vec<_> = (0..64)
        .map(|i| planner.phase(&format!("p{i}")).expect("phase"))
        .collect();
    for (k, it) in items.iter().enumerate() {
        let first = it.lower * 64 / 20_000;
        let last = ((it.upper - 1) * 64 / 20_000).min(63);
        planner
            .span::<u8>(
                &format!("b{k}"),
                &[it.size - 32],
                phases[first],
                phases[last],
            )
            .expect("spec");
    }
    g.bench_function(BenchmarkId::new("planner", N), |b| {
        b.iter(|| planner.plan().expect("plan").slab_bytes())
    });
    g.finish();
}

fn load_idealloc(name: &str) -> Vec<Interval> {
    let path = format!(
        "{}/tests/data/idealloc/{name}.csv",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(path).expect("instance file");
    minimalloc::parse(&text).expect("valid instance").buffers
}

fn idealloc(c: &mut Criterion) {
    let mut g = c.benchmark_group("idealloc");
    // Seconds per run: one run per sample.
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for name in ["G_1", "S_1", "Y_1"] {
        let items = load_idealloc(name);
        let bound = placement::lower_bound(&items);
        let mut strategies = vec![
            ("greedy", Strategy::greedy()),
            ("auto", Strategy::default()),
        ];
        if items.len() <= AUTO_BEST_MAX {
            strategies.insert(1, ("best", Strategy::best()));
        }
        for (label, strategy) in strategies {
            let once = placement::solve(&items, &strategy).expect("solve");
            println!(
                "idealloc/{label}/{name}: {} buffers, height {} = {:.5}x the lower bound {bound}",
                items.len(),
                once.height,
                once.height as f64 / bound as f64
            );
            g.bench_with_input(BenchmarkId::new(label, name), &items, |b, items| {
                b.iter(|| {
                    placement::solve(black_box(items), &strategy)
                        .expect("solve")
                        .height
                })
            });
        }
    }
    g.finish();
}

/// Writes `items` as a MiniMalloc CSV file.
fn write_csv(items: &[Interval], path: &std::path::Path) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(out, "id,lower,upper,size")?;
    for (id, it) in items.iter().enumerate() {
        writeln!(out, "{id},{},{},{}", it.lower, it.upper, it.size)?;
    }
    out.flush()
}

/// A placement under test: offsets for the items.
type Placer = Box<dyn Fn(&[Interval]) -> Vec<usize>>;

fn step(c: &mut Criterion) {
    let y_1 = load_idealloc("Y_1");
    let mut g = c.benchmark_group("step");
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_secs(1));
    for copies in [1, 2, 3, 10] {
        let items = families::copies(&y_1, copies, 1.0);
        let bound = placement::lower_bound(&items);
        if copies == 3 {
            let path = std::env::temp_dir().join("tensor-arena-Y_1x3.csv");
            match write_csv(&items, &path) {
                Ok(()) => println!("step: 3 x Y_1 written to {}", path.display()),
                Err(e) => println!("step: could not write {}: {e}", path.display()),
            }
        }
        let id = format!("{copies}x");
        let mut runs: Vec<(&str, Placer)> = vec![
            (
                "sweep",
                Box::new(|items| placement::greedy(items, GreedyOrder::Start)),
            ),
            (
                "auto",
                Box::new(|items| {
                    placement::solve(items, &Strategy::default())
                        .expect("solve")
                        .offsets
                }),
            ),
        ];
        // The scans grow with each copy's square: 10x only for the others.
        if copies <= 3 {
            runs.insert(
                1,
                (
                    "by-size",
                    Box::new(|items| placement::greedy(items, GreedyOrder::Size)),
                ),
            );
        }
        for (label, run) in runs {
            let start = std::time::Instant::now();
            let offsets = run(&items);
            let seconds = start.elapsed().as_secs_f64();
            placement::validate(&items, &offsets, None).expect("valid placement");
            let h = placement::height(&items, &offsets);
            println!(
                "step/{label}/{id}: {} buffers, height {h} = {:.5}x the lower bound {bound} (one run: {seconds:.2} s)",
                items.len(),
                h as f64 / bound as f64
            );
            g.bench_with_input(BenchmarkId::new(label, &id), &items, |b, items| {
                b.iter(|| run(black_box(items)).len())
            });
        }
    }
    g.finish();
}

fn scale(c: &mut Criterion) {
    let y_1 = load_idealloc("Y_1");
    let mut cases: Vec<(String, Vec<Interval>)> = Vec::new();
    for shift in [1.0, 0.5, 0.25, 0.1] {
        cases.push((
            format!("Y_1x10-shift{shift}"),
            families::copies(&y_1, 10, shift),
        ));
    }
    cases.push(("Y_1x16-shift0.5".into(), families::copies(&y_1, 16, 0.5)));
    cases.push(("random-1M".into(), families::random_run(1_000_000, 7)));
    let mut g = c.benchmark_group("scale");
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_secs(1));
    for (id, items) in &cases {
        let bound = placement::lower_bound(items);
        let runs: Vec<(&str, Placer)> = vec![
            (
                "sweep",
                Box::new(|items| placement::greedy(items, GreedyOrder::Start)),
            ),
            (
                "auto",
                Box::new(|items| {
                    placement::solve(items, &Strategy::default())
                        .expect("solve")
                        .offsets
                }),
            ),
        ];
        for (label, run) in runs {
            let start = std::time::Instant::now();
            let offsets = run(items);
            let seconds = start.elapsed().as_secs_f64();
            placement::validate(items, &offsets, None).expect("valid placement");
            let h = placement::height(items, &offsets);
            println!(
                "scale/{label}/{id}: {} buffers, height {h} = {:.5}x the lower bound {bound} (one run: {seconds:.2} s)",
                items.len(),
                h as f64 / bound as f64
            );
            g.bench_with_input(BenchmarkId::new(label, id), items, |b, items| {
                b.iter(|| run(black_box(items)).len())
            });
        }
    }
    g.finish();
}

criterion_group!(benches, instances, large, idealloc, step, scale);
criterion_main!(benches);
