//! The training driver shared by the example's `main` and its integration
//! test: plan, reserve, train, evaluate, and measure allocations per step.

use std::time::Instant;

use tensor_arena::{Arena, ArenaOptions, CountingAllocator, Device, Planner, Result};

use crate::backend::{Backend, HostBackend};
use crate::data::{Dataset, Loader};
use crate::model::{Hyper, Net, Sizes, StepStats};

/// Everything a run depends on.
#[derive(Clone, Debug)]
pub struct Config {
    pub steps: usize,
    pub batch: usize,
    pub seed: u64,
    pub threads: usize,
    /// Checked mode: guard bytes and poisoning (see `ArenaOptions`).
    pub checked: bool,
    pub log_every: usize,
    pub train_samples: usize,
    pub eval_samples: usize,
    pub sizes: Sizes,
    pub hyper: Hyper,
}

impl Config {
    /// The example's defaults for a given batch size.
    pub fn new(steps: usize, batch: usize, seed: u64) -> Config {
        Config {
            steps,
            batch,
            seed,
            threads: 1,
            checked: false,
            log_every: 50,
            // Not a multiple of common batch sizes: every epoch ends with a
            // smaller batch, as real loaders give.
            train_samples: 4000,
            eval_samples: 1000,
            sizes: Sizes {
                features: 32,
                hidden: 128,
                classes: 10,
                max_batch: batch,
                max_len: 64,
            },
            hyper: Hyper {
                lr: 3e-3,
                input_keep: 0.9,
                dropout: 0.1,
            },
        }
    }
}

/// The training set and a held-out set of the same task.
pub fn datasets(cfg: &Config) -> (Dataset, Dataset) {
    let s = &cfg.sizes;
    let make = |n, sample_seed| {
        Dataset::generate(n, s.features, s.classes, s.max_len, cfg.seed, sample_seed)
    };
    (
        make(cfg.train_samples, cfg.seed),
        make(cfg.eval_samples, cfg.seed ^ 0xe7a1),
    )
}

/// What the driver reports while it runs.
pub enum Event<'a> {
    /// The plan, right after planning (before the slab is reserved).
    Plan(&'a tensor_arena::Plan),
    /// A progress line.
    Progress(&'a Progress),
}

/// A progress line's numbers.
pub struct Progress {
    pub step: usize,
    pub loss: f64,
    pub accuracy: f64,
    pub steps_per_sec: f64,
}

/// What a run measured.
pub struct Report {
    /// Mean training loss of each logging window.
    pub window_losses: Vec<f64>,
    pub first_loss: f64,
    pub last_loss: f64,
    pub eval_loss: f64,
    pub eval_accuracy: f64,
    pub steps_per_sec: f64,
    /// Heap allocations and device allocation calls summed over every step
    /// after the first, and the number of those steps.
    pub steady_heap_allocs: u64,
    pub steady_device_allocs: u64,
    pub steady_steps: u64,
    pub memory_summary: String,
    pub checksum: f64,
    /// Checked mode: what the guards caught (empty when all is well).
    pub guard_violations: Vec<String>,
    /// The trained weights (w1, b1, w2, b2, flattened).
    pub weights: Vec<f32>,
    /// Device allocation calls over the whole run (the slab: 1).
    pub device_allocs: u64,
}

/// Trains on the host device: see [`train_on`].
// The example's `main` builds its backend itself; tests call this.
#[allow(dead_code)]
pub fn train_arena(cfg: &Config, on: impl FnMut(Event<'_>)) -> Result<Report> {
    let backend = HostBackend::new(cfg.threads)?;
    train_on(cfg, &backend, on)
}

/// Trains on `backend`'s device, reporting the plan and, every `log_every`
/// steps, progress (outside the measured region).
pub fn train_on<B: Backend>(
    cfg: &Config,
    backend: &B,
    mut on: impl FnMut(Event<'_>),
) -> Result<Report> {
    let mut sizes = cfg.sizes;
    sizes.max_batch = cfg.batch;
    sizes.max_len = sizes.max_len.next_multiple_of(16);
    let (train, eval) = datasets(cfg);

    // Startup: ask the device how much operator workspace the largest
    // shapes need, declare, plan, reserve.
    let workspace = backend.workspace_bytes(&sizes)?;
    let mut planner = Planner::new();
    let mut net = Net::declare(&mut planner, sizes, workspace)?;
    backend.bind_workspace(net.workspace);
    let plan = planner.plan()?;
    on(Event::Plan(&plan));
    let options = ArenaOptions {
        checked: cfg.checked,
    };
    let mut arena = Arena::with_options(backend.device(), plan, options)?;
    arena.set_seed(cfg.seed);
    net.init(&mut arena, cfg.seed)?;

    let mut loader = Loader::new(train.len(), cfg.batch, cfg.seed);
    let log_every = cfg.log_every.max(1);
    let mut window_losses = Vec::with_capacity(cfg.steps / log_every + 1);
    let mut window = StepStats::default();
    let mut window_steps = 0usize;
    let (mut heap, mut dev_allocs, mut steady) = (0u64, 0u64, 0u64);
    let started = Instant::now();
    let mut window_start = Instant::now();
    for step in 1..=cfg.steps {
        let heap_before = CountingAllocator::thread_counts().allocations;
        let dev_before = arena.device().counters().alloc_calls;
        let batch = loader.next(&train);
        let stats = net.train_step(backend, &mut arena, &train, &batch, &cfg.hyper)?;
        if step > 1 {
            heap += CountingAllocator::thread_counts().allocations - heap_before;
            dev_allocs += arena.device().counters().alloc_calls - dev_before;
            steady += 1;
        }
        window.loss_sum += stats.loss_sum;
        window.correct += stats.correct;
        window.samples += stats.samples;
        window_steps += 1;
        if step % log_every == 0 || step == cfg.steps {
            let p = Progress {
                step,
                loss: window.loss_sum / window.samples.max(1) as f64,
                accuracy: window.correct as f64 / window.samples.max(1) as f64,
                steps_per_sec: window_steps as f64 / window_start.elapsed().as_secs_f64(),
            };
            window_losses.push(p.loss);
            on(Event::Progress(&p));
            window = StepStats::default();
            window_steps = 0;
            window_start = Instant::now();
        }
    }
    let steps_per_sec = cfg.steps as f64 / started.elapsed().as_secs_f64();

    // Held-out evaluation: no masking, no dropout, no update.
    let mut eval_loader = Loader::new(eval.len(), cfg.batch, cfg.seed ^ 1);
    let mut total = StepStats::default();
    for _ in 0..eval.len().div_ceil(cfg.batch) {
        let batch = eval_loader.next(&eval);
        let s = net.evaluate(backend, &mut arena, &eval, &batch)?;
        total.loss_sum += s.loss_sum;
        total.correct += s.correct;
        total.samples += s.samples;
    }
    Ok(Report {
        first_loss: window_losses.first().copied().unwrap_or(f64::NAN),
        last_loss: window_losses.last().copied().unwrap_or(f64::NAN),
        window_losses,
        eval_loss: total.loss_sum / total.samples.max(1) as f64,
        eval_accuracy: total.correct as f64 / total.samples.max(1) as f64,
        steps_per_sec,
        steady_heap_allocs: heap,
        steady_device_allocs: dev_allocs,
        steady_steps: steady,
        memory_summary: arena.memory_summary(),
        checksum: net.checksum(&mut arena)?,
        weights: net.weights(&mut arena)?,
        device_allocs: arena.device().counters().alloc_calls,
        guard_violations: {
            arena
                .verify()
                .err()
                .map(|e| e.to_string())
                .into_iter()
                .collect()
        },
    })
}
