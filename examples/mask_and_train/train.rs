//! The training driver shared by the example's `main` and its integration
//! test: plan, reserve, train, evaluate, and measure allocations per step.

use std::time::Instant;

use tensor_arena::{Arena, ArenaOptions, CountingAllocator, Device, Planner, Result};

use crate::backend::{Backend, HostBackend};
use crate::data::{Batch, Dataset, Loader};
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
    /// The plan, right after planning (before the slab is reserved, when
    /// declared by hand; right after freezing, when learned).
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
    /// Heap allocations and device allocation calls summed over every
    /// steady-state step (every step after the first with hand-written
    /// specs; every step after freezing with learned ones), and the number
    /// of those steps.
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

/// A model on its memory, as the training loop drives it.
pub trait Trainer {
    /// One training step.
    fn train_step(&mut self, data: &Dataset, batch: &Batch<'_>, hyper: &Hyper)
    -> Result<StepStats>;
    /// Loss and accuracy on a batch, without masking, dropout or update.
    fn evaluate(&mut self, data: &Dataset, batch: &Batch<'_>) -> Result<StepStats>;
    /// Whether step `step` (1-based, about to run) counts as steady state.
    fn steady(&self, step: usize) -> bool;
    /// Called after every training step, outside the measured region.
    fn after_step(&mut self, _on: &mut dyn FnMut(Event<'_>)) -> Result<()> {
        Ok(())
    }
    /// Called once before the held-out evaluation.
    fn before_eval(&mut self, _on: &mut dyn FnMut(Event<'_>)) -> Result<()> {
        Ok(())
    }
    /// Device allocation calls so far.
    fn device_allocs(&self) -> u64;
    fn memory_summary(&self) -> String;
    /// The trained weights (w1, b1, w2, b2, flattened).
    fn weights(&mut self) -> Result<Vec<f32>>;
    /// Checked mode: what the guards caught (empty when all is well or
    /// when the model does not run in checked mode).
    fn guard_violations(&mut self) -> Vec<String> {
        Vec::new()
    }
}

/// The hand-written model on its planned arena, on `backend`'s device.
struct ArenaTrainer<'b, B: Backend> {
    net: Net,
    arena: Arena<B::Dev>,
    backend: &'b B,
}

impl<B: Backend> Trainer for ArenaTrainer<'_, B> {
    fn train_step(
        &mut self,
        data: &Dataset,
        batch: &Batch<'_>,
        hyper: &Hyper,
    ) -> Result<StepStats> {
        self.net
            .train_step(self.backend, &mut self.arena, data, batch, hyper)
    }

    fn evaluate(&mut self, data: &Dataset, batch: &Batch<'_>) -> Result<StepStats> {
        self.net
            .evaluate(self.backend, &mut self.arena, data, batch)
    }

    fn steady(&self, step: usize) -> bool {
        step > 1
    }

    fn device_allocs(&self) -> u64 {
        self.arena.device().counters().alloc_calls
    }

    fn memory_summary(&self) -> String {
        self.arena.memory_summary()
    }

    fn weights(&mut self) -> Result<Vec<f32>> {
        self.net.weights(&mut self.arena)
    }

    fn guard_violations(&mut self) -> Vec<String> {
        let found = self.arena.verify().err().map(|e| e.to_string());
        found.into_iter().collect()
    }
}

/// Trains on the host device: see [`train_on`].
// The example's `main` builds its backend itself; tests call this.
#[allow(dead_code)]
pub fn train_arena(cfg: &Config, on: impl FnMut(Event<'_>)) -> Result<Report> {
    let backend = HostBackend::new(cfg.threads)?;
    train_on(cfg, &backend, on)
}

/// Trains the hand-written model on `backend`'s device.
pub fn train_on<B: Backend>(
    cfg: &Config,
    backend: &B,
    mut on: impl FnMut(Event<'_>),
) -> Result<Report> {
    let sizes = padded_sizes(cfg);
    // Startup: ask the device how much operator workspace the largest
    // shapes need, declare, plan, reserve.
    let workspace = backend.workspace_bytes(&sizes)?;
    let mut planner = Planner::new();
    let net = Net::declare(&mut planner, sizes, workspace)?;
    backend.bind_workspace(net.workspace);
    let plan = planner.plan()?;
    on(Event::Plan(&plan));
    let options = ArenaOptions {
        checked: cfg.checked,
    };
    let mut arena = Arena::with_options(backend.device(), plan, options)?;
    arena.set_seed(cfg.seed);
    net.init(&mut arena, cfg.seed)?;
    let mut trainer = ArenaTrainer {
        net,
        arena,
        backend,
    };
    run(cfg, &mut trainer, &mut on)
}

/// The model's sizes for a run: the largest batch, and the longest
/// sequence bucketed up to a multiple of 16.
pub fn padded_sizes(cfg: &Config) -> Sizes {
    let mut sizes = cfg.sizes;
    sizes.max_batch = cfg.batch;
    sizes.max_len = sizes.max_len.next_multiple_of(16);
    sizes
}

/// The weights' checksum that runs are compared by.
pub fn checksum(weights: &[f32]) -> f64 {
    weights
        .iter()
        .enumerate()
        .map(|(i, &v)| f64::from(v) * (1.0 + (i % 7) as f64))
        .sum()
}

/// The training loop: trains, measures allocations per steady-state step,
/// then evaluates on the held-out set.
pub fn run(cfg: &Config, model: &mut dyn Trainer, on: &mut dyn FnMut(Event<'_>)) -> Result<Report> {
    let (train, eval) = datasets(cfg);
    let mut loader = Loader::new(train.len(), cfg.batch, cfg.seed);
    let log_every = cfg.log_every.max(1);
    let mut window_losses = Vec::with_capacity(cfg.steps / log_every + 1);
    let mut window = StepStats::default();
    let mut window_steps = 0usize;
    let (mut heap, mut dev_allocs, mut steady) = (0u64, 0u64, 0u64);
    let started = Instant::now();
    let mut window_start = Instant::now();
    for step in 1..=cfg.steps {
        let measured = model.steady(step);
        let heap_before = CountingAllocator::thread_counts().allocations;
        let dev_before = model.device_allocs();
        let batch = loader.next(&train);
        let stats = model.train_step(&train, &batch, &cfg.hyper)?;
        if measured {
            heap += CountingAllocator::thread_counts().allocations - heap_before;
            dev_allocs += model.device_allocs() - dev_before;
            steady += 1;
        }
        model.after_step(on)?;
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
    model.before_eval(on)?;
    let mut eval_loader = Loader::new(eval.len(), cfg.batch, cfg.seed ^ 1);
    let mut total = StepStats::default();
    for _ in 0..eval.len().div_ceil(cfg.batch) {
        let batch = eval_loader.next(&eval);
        let s = model.evaluate(&eval, &batch)?;
        total.loss_sum += s.loss_sum;
        total.correct += s.correct;
        total.samples += s.samples;
    }
    let weights = model.weights()?;
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
        memory_summary: model.memory_summary(),
        checksum: checksum(&weights),
        weights,
        device_allocs: model.device_allocs(),
        guard_violations: model.guard_violations(),
    })
}
