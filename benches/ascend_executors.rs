//! The host-side cost of a training step of the main example on the Ascend
//! backend, with aclnn executors reused across steps (repeatable, cached:
//! the second phase only) and without (`AscendConfig::executor_cache(0)`:
//! both phases every call, the baseline), in the same run.
//!
//! Against the CPU simulation of the ACL runtime (`kernels/sim/`): every
//! figure is host CPU time, the simulated operators' arithmetic included
//! (plain C++ on the CPU), not NPU time. What reuse saves here is the
//! simulation's first phase (building tensors and the executor, checking
//! shapes); CANN's real first phase (shape inference, tiling, kernel
//! selection) is not modelled and its cost on a real host is unknown.
//!
//! `ascend_step_*`: whole training steps (22 aclnn calls, 6 kernel launches,
//! uploads and downloads) at two model sizes. `ascend_calls`: one call of
//! each of the ten operators on 4 x 4 tensors, where the arithmetic is
//! negligible and the per-call host cost (the crate's FFI, the simulated
//! runtime's phases) is what is measured.
//!
//! `cargo bench --bench ascend_executors`

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};

#[path = "../examples/mask_and_train/ascend.rs"]
#[allow(dead_code)]
mod ascend;
#[path = "../examples/mask_and_train/backend.rs"]
#[allow(dead_code)]
mod backend;
#[path = "../examples/mask_and_train/data.rs"]
#[allow(dead_code)]
mod data;
#[path = "../examples/mask_and_train/model.rs"]
#[allow(dead_code)]
mod model;
#[path = "../examples/mask_and_train/naive.rs"]
#[allow(dead_code)]
mod naive;
#[path = "../tests/support/sim.rs"]
mod sim;
#[path = "../examples/mask_and_train/train.rs"]
#[allow(dead_code)]
mod train;

use backend::Setup;
use tensor_arena::device::ascend::{AscendDevice, Op};
use tensor_arena::{Arena, Buffer, Planner};

/// The example's model on the simulated device, ready to train.
struct Rig {
    backend: ascend::AscendBackend,
    arena: Arena<AscendDevice>,
    net: model::Net,
    train: data::Dataset,
    loader: data::Loader,
    cfg: train::Config,
}

impl Rig {
    fn new(batch: usize, hidden: usize, max_len: usize, executors: usize) -> Rig {
        let mut cfg = train::Config::new(0, batch, 5);
        cfg.train_samples = 8 * batch;
        cfg.eval_samples = batch;
        cfg.sizes.max_len = max_len;
        cfg.sizes.hidden = hidden;
        let mut sizes = cfg.sizes;
        sizes.max_batch = cfg.batch;
        let (train, _) = train::datasets(&cfg);
        let backend = ascend::AscendBackend::new(sim::config().executor_cache(executors))
            .unwrap_or_else(|e| panic!("the simulated runtime did not open: {e}"));
        let mut planner = tensor_arena::Planner::new();
        let ws = backend
            .workspace_bytes(&sizes)
            .unwrap_or_else(|e| panic!("{e}"));
        let net = model::Net::declare(&mut planner, sizes, ws).unwrap_or_else(|e| panic!("{e}"));
        backend.bind_workspace(net.workspace);
        let plan = planner.plan().unwrap_or_else(|e| panic!("{e}"));
        let mut arena = Arena::new(backend.device(), plan).unwrap_or_else(|e| panic!("{e}"));
        arena.set_seed(cfg.seed);
        net.init(&mut arena, cfg.seed)
            .unwrap_or_else(|e| panic!("{e}"));
        let loader = data::Loader::new(train.len(), cfg.batch, cfg.seed);
        Rig {
            backend,
            arena,
            net,
            train,
            loader,
            cfg,
        }
    }

    fn step(&mut self) {
        let batch = self.loader.next(&self.train);
        self.net
            .train_step(
                &self.backend,
                &mut self.arena,
                &self.train,
                &batch,
                &self.cfg.hyper,
            )
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

fn steps(c: &mut Criterion) {
    for (name, batch, hidden, max_len) in [("small", 8, 32, 16), ("medium", 16, 64, 32)] {
        let mut g = c.benchmark_group(format!("ascend_step_{name}"));
        for (variant, executors) in [("reuse", 256), ("no_reuse", 0)] {
            let mut rig = Rig::new(batch, hidden, max_len, executors);
            // One epoch first, so every batch shape has been seen.
            for _ in 0..8 {
                rig.step();
            }
            g.bench_function(variant, |b| b.iter(|| rig.step()));
            let stats = rig.backend.device().executor_stats();
            eprintln!("{name}/{variant}: {stats:?}");
        }
        g.finish();
    }
}

/// The buffers of [`calls`]: 4 x 4 operands and a workspace.
struct Calls {
    arena: Arena<AscendDevice>,
    x: Buffer<f32>,
    y: Buffer<f32>,
    z: Buffer<f32>,
    row: Buffer<f32>,
    m: Buffer<f32>,
    v: Buffer<f32>,
    t: Buffer<f32>,
    ws: Buffer<u8>,
}

impl Calls {
    fn new(executors: usize) -> Calls {
        let dev = AscendDevice::new(sim::config().executor_cache(executors))
            .unwrap_or_else(|e| panic!("the simulated runtime did not open: {e}"));
        let mut p = Planner::new();
        let sq = |p: &mut Planner, n: &str| {
            p.persistent::<f32>(n, &[4, 4])
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let (x, y, z, m, v) = (
            sq(&mut p, "x"),
            sq(&mut p, "y"),
            sq(&mut p, "z"),
            sq(&mut p, "m"),
            sq(&mut p, "v"),
        );
        let row = p
            .persistent::<f32>("row", &[4])
            .unwrap_or_else(|e| panic!("{e}"));
        let t = p
            .persistent::<f32>("t", &[1])
            .unwrap_or_else(|e| panic!("{e}"));
        let ws = p
            .persistent::<u8>("ws", &[16 << 20])
            .unwrap_or_else(|e| panic!("{e}"));
        let mut arena = Arena::new(dev, p.plan().unwrap_or_else(|e| panic!("{e}")))
            .unwrap_or_else(|e| panic!("{e}"));
        for b in [x, y, z, m, v] {
            arena
                .write(b, &[0.25f32; 16])
                .unwrap_or_else(|e| panic!("{e}"));
        }
        arena.write(t, &[1.0f32]).unwrap_or_else(|e| panic!("{e}"));
        Calls {
            arena,
            x,
            y,
            z,
            row,
            m,
            v,
            t,
            ws,
        }
    }

    fn round(&mut self) {
        let Calls {
            x,
            y,
            z,
            row,
            m,
            v,
            t,
            ws,
            ..
        } = *self;
        self.arena
            .step(|s| {
                let (xl, yl, zl, rl) = (s.lease(x)?, s.lease(y)?, s.lease(z)?, s.lease(row)?);
                let (ml, vl, tl) = (s.lease(m)?, s.lease(v)?, s.lease(t)?);
                let mut wl = s.lease(ws)?;
                let ops = [
                    Op::Mm {
                        a: xl.tensor(),
                        b: yl.tensor(),
                        out: zl.tensor(),
                    },
                    Op::AddInplace {
                        x: zl.tensor(),
                        other: rl.tensor(),
                        alpha: 1.0,
                    },
                    Op::SubInplace {
                        x: zl.tensor(),
                        other: yl.tensor(),
                        alpha: 0.5,
                    },
                    Op::MulInplace {
                        x: zl.tensor(),
                        other: rl.tensor(),
                    },
                    Op::Mul {
                        a: xl.tensor(),
                        b: yl.tensor(),
                        out: zl.tensor(),
                    },
                    Op::ReluInplace { x: zl.tensor() },
                    Op::GtScalar {
                        x: zl.tensor(),
                        value: 0.0,
                        out: yl.tensor(),
                    },
                    Op::ReduceSum {
                        x: zl.tensor(),
                        dims: &[0],
                        keep_dims: false,
                        out: rl.tensor(),
                    },
                    Op::Softmax {
                        x: zl.tensor(),
                        dim: 1,
                        out: yl.tensor(),
                    },
                    Op::AdamW {
                        var: xl.tensor(),
                        m: ml.tensor(),
                        v: vl.tensor(),
                        grad: yl.tensor(),
                        step: tl.tensor(),
                        lr: 1e-3,
                        beta1: 0.9,
                        beta2: 0.999,
                        weight_decay: 0.0,
                        eps: 1e-8,
                    },
                ];
                for op in &ops {
                    s.aclnn(op, Some(&mut wl))?;
                }
                Ok::<_, tensor_arena::Error>(())
            })
            .unwrap_or_else(|e| panic!("{e}"));
        // Wait for the queued calls, as a step's copies would.
        self.arena
            .device()
            .synchronize()
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

fn calls(c: &mut Criterion) {
    let mut g = c.benchmark_group("ascend_calls");
    for (variant, executors) in [("no_reuse", 0), ("reuse", 256)] {
        let mut calls = Calls::new(executors);
        calls.round();
        g.bench_function(variant, |b| b.iter(|| calls.round()));
        let stats = calls.arena.device().executor_stats();
        eprintln!("calls/{variant}: {stats:?}");
    }
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30)
}

criterion_group! { name = benches; config = config(); targets = calls, steps }
criterion_main!(benches);
