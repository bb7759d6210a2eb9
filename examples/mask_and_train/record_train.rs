//! The `--record N` and `--specs FILE` paths: the same model (`model.rs`)
//! on a recorder, driven by the same training loop. Only the modes, phases
//! and persistent buffers are declared; every temporary is learned by name.
//! The first N training steps and one pass over the held-out set (mode
//! `eval`) are recorded (they train and evaluate for real, from the
//! recorder's pool); then the learned specs are printed, planned and
//! frozen, and every later step of either mode leases the slab with no
//! allocation. With a spec file, the specs are preloaded and frozen before
//! the first step.

use tensor_arena::record::RecordStats;
use tensor_arena::{Device, Error, HostDevice, Plan, Recorder, Result, SpecSet};

use crate::backend::HostBackend;
use crate::data::{Batch, Dataset};
use crate::model::{Hyper, Net, StepStats};
use crate::train::{self, Config, Event, HeldOut, Report, Trainer};

/// Where the plan's specs come from.
pub enum Source {
    /// Learned from this many recorded training steps (and one held-out
    /// pass).
    Record(usize),
    /// Loaded from a spec file (no recording step).
    Preload(SpecSet),
}

/// What the recorder reports besides the loop's events.
pub enum Note<'a> {
    /// The learned specs, after `steps` recorded steps, just before they
    /// are planned.
    Specs(&'a SpecSet, u64),
    /// A request outgrew the plan: the step is recorded again and the
    /// recorder re-plans.
    Rerecord(&'a Error),
}

struct RecordTrainer<N> {
    net: Net,
    rec: Recorder<HostDevice>,
    backend: HostBackend,
    /// Training steps to record before freezing.
    record_steps: u64,
    /// Training steps recorded so far.
    recorded: u64,
    notes: N,
}

/// Whether `e` says the frozen plan cannot serve a request.
fn outgrown(e: &Error) -> bool {
    matches!(e, Error::ExceedsRecorded(_) | Error::UnrecordedSite { .. })
}

impl<N: FnMut(Note<'_>)> RecordTrainer<N> {
    /// Plans what was recorded, reporting the specs and then the plan.
    fn freeze(&mut self, on: &mut dyn FnMut(Event<'_>)) -> Result<()> {
        if self.rec.is_frozen() {
            return Ok(());
        }
        let specs = self.rec.specs();
        (self.notes)(Note::Specs(&specs, self.rec.stats().learned_steps));
        let plan: &Plan = self.rec.freeze()?;
        on(Event::Plan(plan));
        Ok(())
    }

    /// Re-records after a refused request; the caller runs the step again.
    fn rerecord(&mut self, e: &Error) -> Result<()> {
        (self.notes)(Note::Rerecord(e));
        self.rec.rerecord()
    }
}

impl<N: FnMut(Note<'_>)> Trainer for RecordTrainer<N> {
    fn train_step(
        &mut self,
        data: &Dataset,
        batch: &Batch<'_>,
        hyper: &Hyper,
    ) -> Result<StepStats> {
        let rng = self.rec.rng_state();
        let stats =
            match self
                .net
                .train_step_recorded(&self.backend, &mut self.rec, data, batch, hyper)
            {
                Err(e) if outgrown(&e) => {
                    // The model asks for every batch-sized temporary (lengths,
                    // labels, x) before it draws a mask or writes a parameter,
                    // so a step refused here changed nothing that lasts: record
                    // it again from the same stream position, and re-plan after.
                    self.rerecord(&e)?;
                    self.rec.set_rng_state(rng);
                    self.net
                        .train_step_recorded(&self.backend, &mut self.rec, data, batch, hyper)
                }
                other => other,
            }?;
        if !self.rec.is_frozen() {
            self.recorded += 1;
        }
        Ok(stats)
    }

    fn evaluate(&mut self, data: &Dataset, batch: &Batch<'_>) -> Result<StepStats> {
        match self
            .net
            .evaluate_recorded(&self.backend, &mut self.rec, data, batch)
        {
            // Evaluation draws nothing from the stream and writes no
            // parameter: run it again once re-recording.
            Err(e) if outgrown(&e) => {
                self.rerecord(&e)?;
                self.net
                    .evaluate_recorded(&self.backend, &mut self.rec, data, batch)
            }
            other => other,
        }
    }

    fn steady(&self, _step: usize) -> bool {
        self.rec.is_frozen()
    }

    fn steady_eval(&self) -> bool {
        self.rec.is_frozen()
    }

    fn after_step(&mut self, held: &HeldOut<'_>, on: &mut dyn FnMut(Event<'_>)) -> Result<()> {
        if !self.rec.is_frozen() && self.recorded >= self.record_steps {
            // Mode `eval` is learned too: one recorded pass over the
            // held-out batches (the same batches every evaluation sees),
            // which changes neither the weights nor the random stream.
            held.for_each(|batch| self.evaluate(held.data, batch).map(drop))?;
            self.freeze(on)?;
        }
        Ok(())
    }

    fn device_allocs(&self) -> u64 {
        self.rec.device().counters().alloc_calls
    }

    fn memory_summary(&self) -> String {
        self.rec
            .arena()
            .map_or_else(String::new, |a| a.memory_summary())
    }

    fn weights(&mut self) -> Result<Vec<f32>> {
        self.net.weights(&mut self.rec)
    }
}

/// Trains the model on a recorder, its plan learned from `source`; returns
/// the run's report and the recorder's counters.
pub fn train_recorded(
    cfg: &Config,
    source: Source,
    mut on: impl FnMut(Event<'_>),
    notes: impl FnMut(Note<'_>),
) -> Result<(Report, RecordStats)> {
    let sizes = train::padded_sizes(cfg);
    let backend = HostBackend::new(cfg.threads)?;
    let mut rec = Recorder::new(crate::backend::Setup::device(&backend));
    let net = Net::declare_recorded(&mut rec, sizes, true)?;
    rec.set_seed(cfg.seed);
    net.init(&mut rec, cfg.seed)?;
    let record_steps = match source {
        Source::Record(n) => n as u64,
        Source::Preload(specs) => {
            rec.preload(&specs)?;
            0
        }
    };
    let mut trainer = RecordTrainer {
        net,
        rec,
        backend,
        record_steps,
        recorded: 0,
        notes,
    };
    if record_steps == 0 {
        trainer.freeze(&mut on)?;
    }
    let report = train::run(cfg, &mut trainer, &mut on)?;
    Ok((report, trainer.rec.stats()))
}
