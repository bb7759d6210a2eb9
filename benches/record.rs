//! The cost of asking for a temporary by site name on a frozen recorder,
//! against leasing the same planned buffer by handle on an arena, in the
//! same run (the baseline), and what a recording step costs.
//!
//! `single/*`: one request (or lease) with this step's shape, and its
//! release. `step/*`: a whole step of a two-layer MLP's eight temporaries
//! in two phases, the same workload as `benches/lease.rs`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tensor_arena::{Arena, Buffer, HostDevice, Phase, Planner, RecordStep, Recorder};

const BATCH: usize = 256;
const INPUT: usize = 64;
const HIDDEN: usize = 256;
const CLASSES: usize = 16;

/// Name and shape of each temporary, in the order the step asks for them.
const BUFFERS: [(&str, [usize; 2]); 8] = [
    ("x", [BATCH, INPUT]),
    ("mask", [BATCH, INPUT]),
    ("h", [BATCH, HIDDEN]),
    ("logits", [BATCH, CLASSES]),
    ("dlogits", [BATCH, CLASSES]),
    ("dh", [BATCH, HIDDEN]),
    ("dw1", [INPUT, HIDDEN]),
    ("dw2", [HIDDEN, CLASSES]),
];

/// The step on a recorder: forward temporaries, mask dropped, backward.
fn rec_step(s: &RecordStep<'_, HostDevice>, bwd: Phase) {
    let t = |i: usize| s.temp::<f32>(BUFFERS[i].0, &BUFFERS[i].1).expect("temp");
    let (x, mask, h, logits) = (t(0), t(1), t(2), t(3));
    drop(black_box(mask));
    s.enter(bwd).expect("backward");
    let rest: [_; 4] = std::array::from_fn(|i| t(4 + i));
    black_box((&x, &h, &logits, &rest));
}

fn recorder() -> (Recorder<HostDevice>, Phase) {
    let mut rec = Recorder::new(HostDevice::new());
    rec.phase("forward").expect("phase");
    let bwd = rec.phase("backward").expect("phase");
    rec.step(|s| rec_step(s, bwd));
    (rec, bwd)
}

/// The same buffers declared by hand.
fn arena() -> (Arena<HostDevice>, Vec<Buffer<f32>>, Phase) {
    let mut p = Planner::new();
    let fwd = p.phase("forward").expect("phase");
    let bwd = p.phase("backward").expect("phase");
    let spans = [
        (fwd, bwd),
        (fwd, fwd),
        (fwd, bwd),
        (fwd, bwd),
        (bwd, bwd),
        (bwd, bwd),
        (bwd, bwd),
        (bwd, bwd),
    ];
    let handles = BUFFERS
        .iter()
        .zip(spans)
        .map(|((name, shape), (a, b))| p.span::<f32>(name, shape, a, b).expect("spec"))
        .collect();
    let arena = Arena::new(HostDevice::new(), p.plan().expect("plan")).expect("arena");
    (arena, handles, bwd)
}

fn single(c: &mut Criterion) {
    let mut g = c.benchmark_group("record_single");
    g.throughput(Throughput::Elements(1));
    let shape = [BATCH - 1, HIDDEN];
    let (mut arena, handles, _) = arena();
    let h = handles[2];
    g.bench_function("arena_lease", |b| {
        arena.step(|s| {
            b.iter(|| {
                let lease = s
                    .lease(black_box(h))
                    .and_then(|l| l.with_shape(black_box(&shape)))
                    .expect("lease");
                black_box(lease.device_ptr());
            })
        })
    });
    let (mut rec, _) = recorder();
    rec.freeze().expect("freeze");
    g.bench_function("frozen_temp", |b| {
        rec.step(|s| {
            b.iter(|| {
                let lease = s
                    .temp::<f32>(black_box("h"), black_box(&shape))
                    .expect("temp");
                black_box(lease.len());
            })
        })
    });
    g.finish();
}

fn step(c: &mut Criterion) {
    let mut g = c.benchmark_group("record_step");
    g.throughput(Throughput::Elements(BUFFERS.len() as u64));
    let (mut arena, handles, bwd) = arena();
    g.bench_function("arena", |b| {
        b.iter(|| {
            arena.step(|s| {
                let t = |i: usize| {
                    s.lease(handles[i])
                        .and_then(|l| l.with_shape(&BUFFERS[i].1))
                        .expect("lease")
                };
                let (x, mask, h, logits) = (t(0), t(1), t(2), t(3));
                drop(black_box(mask));
                s.enter(bwd).expect("backward");
                let rest: [_; 4] = std::array::from_fn(|i| t(4 + i));
                black_box((&x, &h, &logits, &rest));
            })
        })
    });
    let (mut rec, bwd) = recorder();
    g.bench_function("recording", |b| b.iter(|| rec.step(|s| rec_step(s, bwd))));
    rec.freeze().expect("freeze");
    g.bench_function("frozen", |b| b.iter(|| rec.step(|s| rec_step(s, bwd))));
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(50)
}

criterion_group! { name = benches; config = config(); targets = single, step }
criterion_main!(benches);
