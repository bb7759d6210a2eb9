//! Kernels on 64 MiB f32 buffers, each beside its baseline in the same run:
//!
//! - `memcpy`: copying the same bytes (the machine's bandwidth limit);
//! - `rand_bernoulli`: the `rand` crate (SmallRng + `Bernoulli`) filling the
//!   same buffer with 0/1;
//! - `bernoulli_` and `dropout_` through an arena lease on the host device,
//!   one thread and two;
//! - `three_passes`: dropout as separate bernoulli_, mul_ and mul_scalar_
//!   passes through a stored mask, against the fused `dropout_`;
//! - `mul_` (reads two buffers, writes one) against memcpy bandwidth;
//! - `dropout_pair`: forward and backward of the regenerating
//!   `dropout_` / `dropout_backward_` against the bit-mask
//!   `dropout_with_bits_` / `dropout_backward_with_bits_`, and each
//!   backward alone, one thread.
//!
//! numpy's rate comes from `benches/numpy_bernoulli.py` (see BENCHMARKS.md).

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rand::distr::{Bernoulli, Distribution};
use rand::{SeedableRng, rngs::SmallRng};
use tensor_arena::ops::bit_mask_bytes;
use tensor_arena::{Arena, Buffer, HostDevice, Planner};

const N: usize = 16 << 20; // 16 Mi f32 = 64 MiB

struct Setup {
    arena: Arena<HostDevice>,
    x: Buffer<f32>,
    y: Buffer<f32>,
    mask: Buffer<f32>,
    bits: Buffer<u8>,
}

fn setup(threads: usize) -> Setup {
    let mut p = Planner::new();
    let x = p.step::<f32>("x", &[N]).expect("x");
    let y = p.step::<f32>("y", &[N]).expect("y");
    let mask = p.step::<f32>("mask", &[N]).expect("mask");
    let bits = p.step::<u8>("bits", &[bit_mask_bytes(N)]).expect("bits");
    let dev = HostDevice::new().with_threads(threads).expect("threads");
    let mut arena = Arena::new(dev, p.plan().expect("plan")).expect("arena");
    arena.write(x, &vec![1.0; N]).expect("x");
    arena.write(y, &vec![1.0; N]).expect("y");
    Setup {
        arena,
        x,
        y,
        mask,
        bits,
    }
}

fn rng_kernels(c: &mut Criterion) {
    let mut g = c.benchmark_group("rng");
    g.throughput(Throughput::Elements(N as u64));

    let src = vec![1.0f32; N];
    let mut dst = vec![0.0f32; N];
    g.bench_function("memcpy", |b| {
        b.iter(|| dst.copy_from_slice(black_box(&src)))
    });

    let dist = Bernoulli::new(0.5).expect("p");
    let mut rng = SmallRng::seed_from_u64(1);
    g.bench_function("rand_bernoulli", |b| {
        b.iter(|| {
            for v in dst.iter_mut() {
                *v = if dist.sample(&mut rng) { 1.0 } else { 0.0 };
            }
        })
    });

    for threads in [1, 2] {
        let mut s = setup(threads);
        let (x, mask) = (s.x, s.mask);
        g.bench_function(format!("bernoulli_/{threads}t"), |b| {
            s.arena.step(|st| {
                let mut m = st.lease(mask).expect("mask");
                b.iter(|| m.bernoulli_(0.5).expect("bernoulli_"))
            })
        });
        g.bench_function(format!("dropout_/{threads}t"), |b| {
            s.arena.step(|st| {
                let mut x = st.lease(x).expect("x");
                b.iter(|| x.dropout_(0.1).expect("dropout_"))
            })
        });
        g.bench_function(format!("three_passes/{threads}t"), |b| {
            s.arena.step(|st| {
                let mut x = st.lease(x).expect("x");
                let mut m = st.lease(mask).expect("mask");
                b.iter(|| {
                    m.bernoulli_(0.9).expect("bernoulli_");
                    x.mul_(&m).expect("mul_");
                    x.mul_scalar_(1.0 / 0.9).expect("mul_scalar_");
                })
            })
        });
    }
    g.finish();
}

fn bandwidth(c: &mut Criterion) {
    let mut g = c.benchmark_group("bandwidth");
    let src = vec![1.0f32; N];
    let mut dst = vec![0.0f32; N];
    // Bytes moved: memcpy reads and writes N floats; mul_ reads two, writes one.
    g.throughput(Throughput::Bytes((2 * N * 4) as u64));
    g.bench_function("memcpy", |b| {
        b.iter(|| dst.copy_from_slice(black_box(&src)))
    });
    let mut s = setup(1);
    let (x, y) = (s.x, s.y);
    g.throughput(Throughput::Bytes((3 * N * 4) as u64));
    g.bench_function("mul_", |b| {
        s.arena.step(|st| {
            let mut x = st.lease(x).expect("x");
            let y = st.lease(y).expect("y");
            b.iter(|| x.mul_(&y).expect("mul_"))
        })
    });
    g.finish();
}

fn dropout_pair(c: &mut Criterion) {
    let mut g = c.benchmark_group("dropout_pair");
    g.throughput(Throughput::Elements(N as u64));
    let mut s = setup(1);
    let (x, y, bits) = (s.x, s.y, s.bits);
    s.arena.step(|st| {
        let mut x = st.lease(x).expect("x");
        let mut y = st.lease(y).expect("y");
        let mut bits = st.lease(bits).expect("bits");
        g.bench_function("regenerate/forward+backward", |b| {
            b.iter(|| {
                let mask = x.dropout_(0.1).expect("dropout_");
                y.dropout_backward_(&mask).expect("dropout_backward_");
            })
        });
        g.bench_function("bits/forward+backward", |b| {
            b.iter(|| {
                let mask = x.dropout_with_bits_(0.1, &mut bits).expect("forward");
                y.dropout_backward_with_bits_(&mask, &bits)
                    .expect("backward");
            })
        });
        let mask = x.dropout_(0.1).expect("dropout_");
        g.bench_function("regenerate/backward", |b| {
            b.iter(|| y.dropout_backward_(&mask).expect("dropout_backward_"))
        });
        let mask = x.dropout_with_bits_(0.1, &mut bits).expect("forward");
        g.bench_function("bits/backward", |b| {
            b.iter(|| {
                y.dropout_backward_with_bits_(&mask, &bits)
                    .expect("backward")
            })
        });
    });
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(4))
        .sample_size(10)
}

criterion_group! { name = benches; config = config(); targets = rng_kernels, bandwidth, dropout_pair }
criterion_main!(benches);
