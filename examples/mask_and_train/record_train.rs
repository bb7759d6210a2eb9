//! The `--record N` and `--specs FILE` paths: the recorder-API model
//! (`recorded.rs`) driven by the same training loop as the hand-written one.
//! The first N training steps are recorded (they train for real, from the
//! recorder's pool); then the learned specs are printed, planned and frozen,
//! and every later step leases the slab with no allocation. With a spec
//! file, the specs are preloaded and frozen before the first step.

use tensor_arena::record::RecordStats;
use tensor_arena::{Device, Error, HostDevice, Plan, Recorder, Result, SpecSet};

use crate::data::{Batch, Dataset};
use crate::model::{Hyper, StepStats};
use crate::recorded::RecNet;
use crate::train::{self, Config, Event, Report, Trainer};

/// Where the plan's specs come from.
pub enum Source {
    /// Learned from this many recorded training steps.
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
    net: RecNet,
    rec: Recorder<HostDevice>,
    record_steps: u64,
    notes: N,
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
}

impl<N: FnMut(Note<'_>)> Trainer for RecordTrainer<N> {
    fn train_step(
        &mut self,
        data: &Dataset,
        batch: &Batch<'_>,
        hyper: &Hyper,
    ) -> Result<StepStats> {
        let rng = self.rec.rng_state();
        match self.net.train_step(&mut self.rec, data, batch, hyper) {
            Err(e @ (Error::ExceedsRecorded { .. } | Error::UnrecordedSite { .. })) => {
                // The model asks for every batch-sized temporary (lengths,
                // labels, x) before it draws a mask or writes a parameter,
                // so a step refused here changed nothing that lasts: record
                // it again from the same stream position, and re-plan after.
                (self.notes)(Note::Rerecord(&e));
                self.rec.rerecord()?;
                self.rec.set_rng_state(rng);
                self.net.train_step(&mut self.rec, data, batch, hyper)
            }
            other => other,
        }
    }

    fn evaluate(&mut self, data: &Dataset, batch: &Batch<'_>) -> Result<StepStats> {
        self.net.evaluate(&mut self.rec, data, batch)
    }

    fn steady(&self, _step: usize) -> bool {
        self.rec.is_frozen()
    }

    fn after_step(&mut self, on: &mut dyn FnMut(Event<'_>)) -> Result<()> {
        if !self.rec.is_frozen() && self.rec.stats().recorded_steps >= self.record_steps {
            self.freeze(on)?;
        }
        Ok(())
    }

    fn before_eval(&mut self, on: &mut dyn FnMut(Event<'_>)) -> Result<()> {
        self.freeze(on)
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

/// Trains the recorder-API model, its plan learned from `source`; returns
/// the run's report and the recorder's counters.
pub fn train_recorded(
    cfg: &Config,
    source: Source,
    mut on: impl FnMut(Event<'_>),
    notes: impl FnMut(Note<'_>),
) -> Result<(Report, RecordStats)> {
    let sizes = train::padded_sizes(cfg);
    let device = HostDevice::new().with_threads(cfg.threads)?;
    let mut rec = Recorder::new(device);
    let net = RecNet::declare(&mut rec, sizes)?;
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
        record_steps,
        notes,
    };
    if record_steps == 0 {
        trainer.freeze(&mut on)?;
    }
    let report = train::run(cfg, &mut trainer, &mut on)?;
    Ok((report, trainer.rec.stats()))
}
