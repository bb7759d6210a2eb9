//! The training driver shared by the example's `main` and its integration
//! test: plan, reserve, train, evaluate every few steps in mode `eval` of
//! the same arena, and measure allocations per step.

use std::time::Instant;

use tensor_arena::{
    Arena, ArenaOptions, CountingAllocator, Device, Element, Planner, Result, Step,
};

use crate::backend::{Compute, HostBackend, Setup};
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
    /// Evaluate on the held-out set every this many training steps (and
    /// after the last).
    pub eval_every: usize,
    /// Sequences per held-out batch (larger than the training batch).
    pub eval_batch: usize,
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
            eval_every: 100,
            eval_batch: 256,
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
    /// A held-out evaluation.
    Eval(&'a EvalLine),
}

/// One held-out evaluation: after training step `step`, over the whole
/// held-out set in batches of `batch`.
pub struct EvalLine {
    pub step: usize,
    pub loss: f64,
    pub accuracy: f64,
    pub samples: usize,
    pub batch: usize,
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
    /// The last held-out evaluation's loss and accuracy.
    pub eval_loss: f64,
    pub eval_accuracy: f64,
    /// Every held-out evaluation: (after step, loss, accuracy).
    // Read by the tests; `main` prints each as it comes (`Event::Eval`).
    #[allow(dead_code)]
    pub evals: Vec<(usize, f64, f64)>,
    pub steps_per_sec: f64,
    /// Heap allocations and device allocation calls summed over every
    /// steady-state step, training and evaluation (every step after the
    /// first with hand-written specs; every step after freezing with
    /// learned ones), and the number of those steps.
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

/// The held-out set and how it is batched: the same batches, in the same
/// order, at every evaluation.
pub struct HeldOut<'a> {
    pub data: &'a Dataset,
    pub batch: usize,
    pub seed: u64,
}

impl HeldOut<'_> {
    /// Runs `f` on every held-out batch.
    pub fn for_each(&self, mut f: impl FnMut(&Batch<'_>) -> Result<()>) -> Result<()> {
        let mut loader = Loader::new(self.data.len(), self.batch, self.seed);
        for _ in 0..self.data.len().div_ceil(self.batch) {
            f(&loader.next(self.data))?;
        }
        Ok(())
    }
}

/// A model on its memory, as the training loop drives it.
pub trait Trainer {
    /// One training step.
    fn train_step(&mut self, data: &Dataset, batch: &Batch<'_>, hyper: &Hyper)
    -> Result<StepStats>;
    /// Loss and accuracy on a batch in mode `eval`, without masking,
    /// dropout or update.
    fn evaluate(&mut self, data: &Dataset, batch: &Batch<'_>) -> Result<StepStats>;
    /// Whether training step `step` (1-based, about to run) counts as
    /// steady state.
    fn steady(&self, step: usize) -> bool;
    /// Whether an evaluation step now counts as steady state.
    fn steady_eval(&self) -> bool {
        true
    }
    /// Called after every training step, outside the measured region.
    fn after_step(&mut self, _held: &HeldOut<'_>, _on: &mut dyn FnMut(Event<'_>)) -> Result<()> {
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

/// The model on its hand-declared arena, on `backend`'s device.
struct ArenaTrainer<'b, B: Setup> {
    net: Net,
    arena: Arena<B::Dev>,
    backend: &'b B,
}

impl<B> Trainer for ArenaTrainer<'_, B>
where
    B: Setup + for<'a> Compute<Step<'a, <B as Setup>::Dev>>,
{
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

/// Trains the model, its buffers declared by hand, on `backend`'s device.
pub fn train_on<B>(cfg: &Config, backend: &B, mut on: impl FnMut(Event<'_>)) -> Result<Report>
where
    B: Setup + for<'a> Compute<Step<'a, <B as Setup>::Dev>>,
{
    let sizes = padded_sizes(cfg);
    let eval = eval_sizes(cfg);
    // Startup: ask the device how much operator workspace the largest
    // shapes of both modes need, declare, plan, reserve.
    let workspace = backend
        .workspace_bytes(&sizes)?
        .max(backend.workspace_bytes(&eval)?);
    let mut planner = Planner::new();
    let mask = <<B as Compute<Step<'static, B::Dev>>>::Mask as Element>::DTYPE;
    let net = Net::declare_with(&mut planner, sizes, Some(eval), workspace, mask)?;
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

/// The sizes of mode `eval`: the held-out batch, as long as training's.
pub fn eval_sizes(cfg: &Config) -> Sizes {
    Sizes {
        max_batch: cfg.eval_batch.min(cfg.eval_samples).max(1),
        ..padded_sizes(cfg)
    }
}

/// The held-out set of a run, batched for evaluation.
pub fn held_out<'a>(cfg: &Config, eval: &'a Dataset) -> HeldOut<'a> {
    HeldOut {
        data: eval,
        batch: cfg.eval_batch.max(1),
        seed: cfg.seed ^ 1,
    }
}

/// The weights' checksum that runs are compared by.
pub fn checksum(weights: &[f32]) -> f64 {
    weights
        .iter()
        .enumerate()
        .map(|(i, &v)| f64::from(v) * (1.0 + (i % 7) as f64))
        .sum()
}

/// Allocation counts over the steady-state steps.
#[derive(Default)]
struct Steady {
    heap: u64,
    device: u64,
    steps: u64,
}

impl Steady {
    /// Runs `f` (one step), counting its allocations when `measured`.
    fn step<R>(
        &mut self,
        measured: bool,
        model: &mut dyn Trainer,
        f: impl FnOnce(&mut dyn Trainer) -> Result<R>,
    ) -> Result<R> {
        let heap_before = CountingAllocator::thread_counts().allocations;
        let dev_before = model.device_allocs();
        let out = f(&mut *model)?;
        if measured {
            self.heap += CountingAllocator::thread_counts().allocations - heap_before;
            self.device += model.device_allocs() - dev_before;
            self.steps += 1;
        }
        Ok(out)
    }
}

/// One pass over the held-out set in mode `eval`, its steps measured as
/// steady state when the model says so.
fn evaluate(model: &mut dyn Trainer, held: &HeldOut<'_>, steady: &mut Steady) -> Result<StepStats> {
    let mut total = StepStats::default();
    held.for_each(|batch| {
        let measured = model.steady_eval();
        let s = steady.step(measured, model, |m| m.evaluate(held.data, batch))?;
        total.loss_sum += s.loss_sum;
        total.correct += s.correct;
        total.samples += s.samples;
        Ok(())
    })?;
    Ok(total)
}

/// The training loop: trains, evaluates on the held-out set every
/// `eval_every` steps and after the last, and measures allocations per
/// steady-state step (training and evaluation).
pub fn run(cfg: &Config, model: &mut dyn Trainer, on: &mut dyn FnMut(Event<'_>)) -> Result<Report> {
    let (train, eval) = datasets(cfg);
    let held = held_out(cfg, &eval);
    let mut loader = Loader::new(train.len(), cfg.batch, cfg.seed);
    let log_every = cfg.log_every.max(1);
    let eval_every = cfg.eval_every.max(1);
    let mut window_losses = Vec::with_capacity(cfg.steps / log_every + 1);
    let mut evals = Vec::with_capacity(cfg.steps / eval_every + 1);
    let mut window = StepStats::default();
    let mut window_steps = 0usize;
    let mut steady = Steady::default();
    let mut train_time = std::time::Duration::ZERO;
    let mut window_start = Instant::now();
    for step in 1..=cfg.steps {
        let measured = model.steady(step);
        let batch = loader.next(&train);
        let started = Instant::now();
        let stats = steady.step(measured, model, |m| {
            m.train_step(&train, &batch, &cfg.hyper)
        })?;
        train_time += started.elapsed();
        model.after_step(&held, on)?;
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
        if step % eval_every == 0 || step == cfg.steps {
            // Held-out evaluation in mode `eval`: no masking, no dropout,
            // no update, larger batches, the same arena.
            let total = evaluate(model, &held, &mut steady)?;
            let line = EvalLine {
                step,
                loss: total.loss_sum / total.samples.max(1) as f64,
                accuracy: total.correct as f64 / total.samples.max(1) as f64,
                samples: total.samples,
                batch: held.batch,
            };
            evals.push((step, line.loss, line.accuracy));
            on(Event::Eval(&line));
            window_start = Instant::now();
        }
    }
    let steps_per_sec = cfg.steps as f64 / train_time.as_secs_f64();
    let weights = model.weights()?;
    let (_, eval_loss, eval_accuracy) = evals.last().copied().unwrap_or((0, f64::NAN, 0.0));
    Ok(Report {
        first_loss: window_losses.first().copied().unwrap_or(f64::NAN),
        last_loss: window_losses.last().copied().unwrap_or(f64::NAN),
        window_losses,
        eval_loss,
        eval_accuracy,
        evals,
        steps_per_sec,
        steady_heap_allocs: steady.heap,
        steady_device_allocs: steady.device,
        steady_steps: steady.steps,
        memory_summary: model.memory_summary(),
        checksum: checksum(&weights),
        weights,
        device_allocs: model.device_allocs(),
        guard_violations: model.guard_violations(),
    })
}
