//! Lease + release cost, against the two ways a step gets memory without an
//! arena, in the same run:
//!
//! - `vec`: a fresh `Vec` of the same size, allocated and dropped (the
//!   system allocator's cost);
//! - `caching_model`: the crate's model of the torch_npu / PyTorch caching
//!   allocator (size-ordered free blocks, best fit, split and merge),
//!   already warmed up so it serves from its cache, as in steady state.
//!
//! `single/*` times one lease + release (or malloc + free) of one buffer;
//! `step/*` replays a whole step of a two-layer MLP's temporaries;
//! `by_name/arena_temp` is `single/arena` asked for by name with a shape
//! (`Step::temp`, what a model written against `StepScope` calls).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use tensor_arena::caching::{CachingAllocator, CachingConfig};
use tensor_arena::{Arena, Buffer, HostDevice, Planner};

struct Mlp {
    arena: Arena<HostDevice>,
    /// Handles in the order the step leases them, with their byte sizes.
    order: Vec<(Buffer<f32>, usize)>,
    bwd: tensor_arena::Phase,
}

const BATCH: usize = 256;
const INPUT: usize = 64;
const HIDDEN: usize = 256;
const CLASSES: usize = 16;

fn mlp() -> Mlp {
    let mut p = Planner::new();
    let fwd = p.phase("forward").expect("phase");
    let bwd = p.phase("backward").expect("phase");
    let mut order = Vec::new();
    let mut add = |p: &mut Planner, name: &str, shape: &[usize], first, last| {
        let b = p.span::<f32>(name, shape, first, last).expect("spec");
        order.push((b, shape.iter().product::<usize>() * 4));
    };
    add(&mut p, "x", &[BATCH, INPUT], fwd, bwd);
    add(&mut p, "mask", &[BATCH, INPUT], fwd, fwd);
    add(&mut p, "h", &[BATCH, HIDDEN], fwd, bwd);
    add(&mut p, "logits", &[BATCH, CLASSES], fwd, bwd);
    add(&mut p, "dlogits", &[BATCH, CLASSES], bwd, bwd);
    add(&mut p, "dh", &[BATCH, HIDDEN], bwd, bwd);
    add(&mut p, "dw1", &[INPUT, HIDDEN], bwd, bwd);
    add(&mut p, "dw2", &[HIDDEN, CLASSES], bwd, bwd);
    let arena = Arena::new(HostDevice::new(), p.plan().expect("plan")).expect("arena");
    Mlp { arena, order, bwd }
}

fn single(c: &mut Criterion) {
    let mut mlp = mlp();
    let (h, bytes) = mlp.order[2];
    let mut g = c.benchmark_group("single");
    g.throughput(Throughput::Elements(1));
    g.bench_function(BenchmarkId::new("arena", bytes), |b| {
        mlp.arena.step(|s| {
            b.iter(|| {
                let lease = s.lease(black_box(h)).expect("lease");
                black_box(lease.device_ptr());
            })
        })
    });
    g.bench_function(BenchmarkId::new("vec", bytes), |b| {
        b.iter(|| {
            let v: Vec<f32> = Vec::with_capacity(black_box(bytes / 4));
            black_box(v.as_ptr());
        })
    });
    let mut model = CachingAllocator::new(CachingConfig::default());
    let warm = model.malloc(bytes as u64).expect("model");
    model.free(warm);
    g.bench_function(BenchmarkId::new("caching_model", bytes), |b| {
        b.iter(|| {
            let id = model.malloc(black_box(bytes as u64)).expect("model");
            black_box(model.free(id));
        })
    });
    g.finish();
}

/// The same lease as `single/arena`, asked for by name with a shape, as a
/// model written against `StepScope` does: the name hashed, the shape
/// checked. Its own function, so that it leaves the code of `single/*`
/// as it was.
fn by_name(c: &mut Criterion) {
    let mut mlp = mlp();
    let bytes = mlp.order[2].1;
    let shape = [BATCH, HIDDEN];
    let mut g = c.benchmark_group("by_name");
    g.throughput(Throughput::Elements(1));
    g.bench_function(BenchmarkId::new("arena_temp", bytes), |b| {
        mlp.arena.step(|s| {
            b.iter(|| {
                let lease = s
                    .temp::<f32>(black_box("h"), black_box(&shape))
                    .expect("temp");
                black_box(lease.device_ptr());
            })
        })
    });
    g.finish();
}

fn step(c: &mut Criterion) {
    let mut mlp = mlp();
    let n = mlp.order.len() as u64;
    let mut g = c.benchmark_group("step");
    g.throughput(Throughput::Elements(n));
    let order = mlp.order.clone();
    let bwd = mlp.bwd;
    g.bench_function("arena", |b| {
        b.iter(|| {
            mlp.arena.step(|s| {
                let x = s.lease(order[0].0).expect("x");
                let mask = s.lease(order[1].0).expect("mask");
                let h = s.lease(order[2].0).expect("h");
                let logits = s.lease(order[3].0).expect("logits");
                drop(black_box(mask));
                s.enter(bwd).expect("backward");
                let rest: [_; 4] = std::array::from_fn(|i| s.lease(order[4 + i].0).expect("grad"));
                black_box((&x, &h, &logits, &rest));
            })
        })
    });
    g.bench_function("vec", |b| {
        b.iter(|| {
            let bufs: [Vec<f32>; 8] = std::array::from_fn(|i| Vec::with_capacity(order[i].1 / 4));
            black_box(&bufs);
        })
    });
    let mut model = CachingAllocator::new(CachingConfig::default());
    let run_model = |model: &mut CachingAllocator| {
        let ids: [_; 8] = std::array::from_fn(|i| model.malloc(order[i].1 as u64).expect("model"));
        for id in ids {
            model.free(id);
        }
    };
    run_model(&mut model);
    g.bench_function("caching_model", |b| {
        b.iter(|| run_model(black_box(&mut model)))
    });
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(50)
}

criterion_group! { name = benches; config = config(); targets = single, step, by_name }
criterion_main!(benches);
