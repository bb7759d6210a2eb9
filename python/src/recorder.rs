//! The bookkeeping of the Python `Recorder`: which sites were requested,
//! with what element type, largest shape and phase span. The Rust
//! `Recorder` serves recorded requests from host memory of its own; a
//! torch model records on its own device, so the Python package keeps the
//! same rules here (the record.md rules: the largest shape per dimension,
//! a site keeps its element type and rank, its lifetime runs from the phase
//! of its first lease to the phase of its last release, united over steps)
//! and exports them as the same `SpecSet`. The test suite runs the Rust
//! `Recorder` on the same requests (`reference_specs`) and compares the
//! spec files byte for byte.

use std::collections::HashMap;

use pyo3::prelude::*;
use tensor_arena::record::{SpecEntry, SpecLifetime, SpecSet};
use tensor_arena::{DType, Error, Rounding, Shape};

use crate::errors::IntoPy;
use crate::planner::{PyPhase, dtype_of};
use crate::specs::PySpecSet;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Life {
    Persistent,
    Step,
    Span(usize, usize),
}

impl Life {
    fn union(self, other: Life) -> Life {
        match (self, other) {
            (Life::Persistent, _) | (_, Life::Persistent) => Life::Persistent,
            (Life::Step, _) | (_, Life::Step) => Life::Step,
            (Life::Span(a, b), Life::Span(c, d)) => Life::Span(a.min(c), b.max(d)),
        }
    }
}

#[derive(Debug)]
struct Site {
    name: String,
    dtype: DType,
    max: Vec<usize>,
    rounding: Option<Rounding>,
    life: Life,
    recorded: bool,
    live: bool,
}

/// What a recorder has learned; the Python `Recorder` drives it.
#[pyclass(name = "RecorderCore", module = "tensor_arena._native")]
pub struct RecorderCore {
    phases: Vec<String>,
    sites: Vec<Site>,
    index: HashMap<String, usize>,
    phase: usize,
    recorded_steps: u64,
    imported_steps: u64,
    rounding: Rounding,
}

fn persistent_by_name(name: &str, shape: &[usize]) -> Error {
    Error::InvalidView {
        buffer: name.to_owned(),
        shape: shape.to_vec(),
        reason: "this name is a persistent buffer; lease it with the handle Recorder::persistent returned",
    }
}

impl RecorderCore {
    fn life_now(&self) -> Life {
        if self.phases.is_empty() {
            Life::Step
        } else {
            Life::Span(self.phase, self.phase)
        }
    }

    fn check_new_name(&self, name: &str) -> Result<(), Error> {
        if name.is_empty() {
            return Err(Error::EmptyName);
        }
        if self.phases.iter().any(|p| p == name) || self.index.contains_key(name) {
            return Err(Error::DuplicateName {
                name: name.to_owned(),
            });
        }
        Ok(())
    }

    fn padded(&self, site: &Site) -> Result<Shape, Error> {
        Shape::new(&site.name, &site.max)?
            .rounded(&site.name, site.rounding.unwrap_or(self.rounding))
    }

    fn insert(&mut self, site: Site) -> usize {
        let i = self.sites.len();
        self.index.insert(site.name.clone(), i);
        self.sites.push(site);
        i
    }

    fn check_compatible(site: &Site, dtype: DType, shape: &[usize]) -> Result<(), Error> {
        if site.dtype != dtype {
            return Err(Error::DTypeMismatch {
                buffer: site.name.clone(),
                declared: site.dtype.name(),
                requested: dtype.name(),
            });
        }
        if site.max.len() != shape.len() {
            return Err(Error::InvalidView {
                buffer: site.name.clone(),
                shape: shape.to_vec(),
                reason: "a site keeps the number of dimensions it was first requested with",
            });
        }
        Ok(())
    }

    fn request_inner(&mut self, name: &str, dtype: DType, shape: &[usize]) -> Result<usize, Error> {
        let index = match self.index.get(name) {
            Some(&i) => {
                let site = &self.sites[i];
                if site.life == Life::Persistent {
                    return Err(persistent_by_name(name, shape));
                }
                Self::check_compatible(site, dtype, shape)?;
                i
            }
            None => {
                self.check_new_name(name)?;
                Shape::new(name, shape)?.rounded(name, self.rounding)?;
                let life = self.life_now();
                self.insert(Site {
                    name: name.to_owned(),
                    dtype,
                    max: shape.to_vec(),
                    rounding: None,
                    life,
                    recorded: true,
                    live: false,
                })
            }
        };
        let life = self.life_now();
        let site = &mut self.sites[index];
        if site.live {
            return Err(Error::AlreadyLeased {
                buffer: name.to_owned(),
            });
        }
        // The padded shape of this request must be valid on its own.
        Shape::new(name, shape)?.rounded(name, site.rounding.unwrap_or(self.rounding))?;
        for (m, &d) in site.max.iter_mut().zip(shape) {
            *m = (*m).max(d);
        }
        site.life = site.life.union(life);
        site.live = true;
        Ok(index)
    }

    fn frozen_inner(&self, name: &str, dtype: DType, shape: &[usize]) -> Result<usize, Error> {
        let Some(&index) = self.index.get(name) else {
            return Err(Error::UnrecordedSite {
                site: name.to_owned(),
            });
        };
        let site = &self.sites[index];
        if site.life == Life::Persistent {
            return Err(persistent_by_name(name, shape));
        }
        if site.dtype != dtype {
            return Err(Error::DTypeMismatch {
                buffer: name.to_owned(),
                declared: site.dtype.name(),
                requested: dtype.name(),
            });
        }
        let padded = self.padded(site)?;
        let fits =
            shape.len() == padded.len() && shape.iter().zip(padded.dims()).all(|(s, p)| s <= p);
        if !fits || shape.contains(&0) {
            return Err(if fits {
                Error::EmptyShape {
                    buffer: name.to_owned(),
                    shape: shape.to_vec(),
                }
            } else {
                Error::ExceedsRecorded {
                    site: name.to_owned(),
                    requested: shape.to_vec(),
                    recorded: site.max.clone(),
                    padded: padded.to_vec(),
                }
            });
        }
        Ok(index)
    }

    fn specs_inner(&self) -> Result<SpecSet, Error> {
        let steps = self.recorded_steps + self.imported_steps;
        let buffers = self
            .sites
            .iter()
            .map(|s| SpecEntry {
                name: s.name.clone(),
                dtype: s.dtype,
                shape: s.max.clone(),
                lifetime: match s.life {
                    Life::Persistent => SpecLifetime::Persistent,
                    Life::Step => SpecLifetime::Step,
                    Life::Span(first, last) => SpecLifetime::Phases { first, last },
                },
                rounding: s.rounding,
                recorded_steps: s.recorded.then_some(steps),
            })
            .collect();
        SpecSet::new(self.phases.clone(), buffers)
    }

    fn preload_inner(&mut self, specs: &SpecSet) -> Result<(), Error> {
        let invalid = |reason: String| Error::InvalidSpecs {
            source_name: "Recorder.preload".to_owned(),
            reason,
        };
        if specs.phases() != self.phases.as_slice() {
            return Err(invalid(format!(
                "the specs' phases {:?} differ from the recorder's {:?}; declare the same phases in the same order first",
                specs.phases(),
                self.phases
            )));
        }
        for e in specs.buffers() {
            if let Some(&i) = self.index.get(&e.name) {
                let site = &self.sites[i];
                Self::check_compatible(site, e.dtype, &e.shape)?;
                let persistent = e.lifetime == SpecLifetime::Persistent;
                if persistent != (site.life == Life::Persistent)
                    || (persistent && site.max != e.shape)
                {
                    return Err(invalid(format!(
                        "buffer '{}' is declared differently in the specs ({}, {:?}) and in the recorder",
                        e.name,
                        specs.lifetime_label(e.lifetime),
                        e.shape
                    )));
                }
            }
        }
        for e in specs.buffers() {
            let life = match e.lifetime {
                SpecLifetime::Persistent => Life::Persistent,
                SpecLifetime::Step => Life::Step,
                SpecLifetime::Phases { first, last } => Life::Span(first, last),
            };
            if let Some(&i) = self.index.get(&e.name) {
                let site = &mut self.sites[i];
                for (m, &d) in site.max.iter_mut().zip(&e.shape) {
                    *m = (*m).max(d);
                }
                site.life = site.life.union(life);
                site.rounding = e.rounding.or(site.rounding);
                site.recorded |= e.recorded_steps.is_some();
                continue;
            }
            Shape::new(&e.name, &e.shape)?.rounded(&e.name, e.rounding.unwrap_or(self.rounding))?;
            self.insert(Site {
                name: e.name.clone(),
                dtype: e.dtype,
                max: e.shape.clone(),
                rounding: e.rounding,
                life,
                recorded: e.recorded_steps.is_some() && life != Life::Persistent,
                live: false,
            });
        }
        let steps = specs
            .buffers()
            .iter()
            .filter_map(|b| b.recorded_steps)
            .max()
            .unwrap_or(0);
        self.imported_steps = self.imported_steps.max(steps);
        Ok(())
    }
}

#[pymethods]
impl RecorderCore {
    /// A core whose specs use `rounding` by default.
    #[new]
    #[pyo3(signature = (rounding = "inner16"))]
    fn new(rounding: &str) -> PyResult<RecorderCore> {
        let rounding = Rounding::from_name(rounding).ok_or_else(|| {
            pyo3::exceptions::PyValueError::new_err(format!("rounding '{rounding}' is unknown"))
        })?;
        Ok(RecorderCore {
            phases: Vec::new(),
            sites: Vec::new(),
            index: HashMap::new(),
            phase: 0,
            recorded_steps: 0,
            imported_steps: 0,
            rounding,
        })
    }

    /// Declares the next phase; returns its index.
    fn phase(&mut self, name: &str) -> PyResult<usize> {
        self.check_new_name(name).py()?;
        self.phases.push(name.to_owned());
        Ok(self.phases.len() - 1)
    }

    /// Declares a persistent buffer; returns its site index (the same
    /// index for the same declaration again).
    fn persistent(
        &mut self,
        name: &str,
        shape: Vec<usize>,
        dtype: &Bound<'_, PyAny>,
    ) -> PyResult<usize> {
        let dtype = dtype_of(Some(dtype))?;
        if let Some(&i) = self.index.get(name) {
            let s = &self.sites[i];
            if s.life == Life::Persistent && s.dtype == dtype && s.max == shape {
                return Ok(i);
            }
            return Err(Error::DuplicateName {
                name: name.to_owned(),
            })
            .py();
        }
        self.check_new_name(name).py()?;
        Shape::new(name, &shape)
            .and_then(|s| s.rounded(name, self.rounding))
            .py()?;
        Ok(self.insert(Site {
            name: name.to_owned(),
            dtype,
            max: shape,
            rounding: None,
            life: Life::Persistent,
            recorded: false,
            live: false,
        }))
    }

    /// Starts a recording step in the first phase.
    fn begin_step(&mut self) {
        self.phase = 0;
        self.sites.iter_mut().for_each(|s| s.live = false);
    }

    /// Records a request for site `name`; returns its index.
    fn request(
        &mut self,
        name: &str,
        shape: Vec<usize>,
        dtype: &Bound<'_, PyAny>,
    ) -> PyResult<usize> {
        let dtype = dtype_of(Some(dtype))?;
        self.request_inner(name, dtype, &shape).py()
    }

    /// Records the end of site `index`'s lease in the current phase.
    fn release(&mut self, index: usize) {
        let phase = self.phase;
        if let Some(site) = self.sites.get_mut(index) {
            site.live = false;
            if let Life::Span(first, last) = site.life {
                site.life = Life::Span(first, last.max(phase));
            }
        }
    }

    /// Moves the recording step to phase `index`.
    fn enter(&mut self, phase: &Bound<'_, PyAny>) -> PyResult<()> {
        let index = match phase.cast::<PyPhase>() {
            Ok(p) => p.get().phase.index(),
            Err(_) => phase.extract::<usize>()?,
        };
        if index >= self.phases.len() {
            return Err(Error::ForeignPhase {
                index,
                owner: "recorder",
            })
            .py();
        }
        if index < self.phase {
            return Err(Error::PhaseOrder {
                current: self.phases[self.phase].clone(),
                requested: self.phases[index].clone(),
            })
            .py();
        }
        self.phase = index;
        Ok(())
    }

    /// Ends a recording step: live sites end in the current phase.
    fn end_step(&mut self) {
        let live: Vec<usize> = (0..self.sites.len())
            .filter(|&i| self.sites[i].live)
            .collect();
        for i in live {
            self.release(i);
        }
        self.recorded_steps += 1;
        self.phase = 0;
    }

    /// The current phase's name (`step` when none are declared).
    #[getter]
    fn phase_name(&self) -> String {
        self.phases
            .get(self.phase)
            .cloned()
            .unwrap_or_else(|| "step".to_owned())
    }

    /// Frozen: checks a request against site `name`'s plan and returns its
    /// index (the rule of the Rust recorder once frozen: same element type
    /// and rank, no dimension beyond the padded maximum).
    fn frozen_site(
        &self,
        name: &str,
        shape: Vec<usize>,
        dtype: &Bound<'_, PyAny>,
    ) -> PyResult<usize> {
        let dtype = dtype_of(Some(dtype))?;
        self.frozen_inner(name, dtype, &shape).py()
    }

    /// Sites known, by name, in first-seen order.
    #[getter]
    fn sites(&self) -> Vec<String> {
        self.sites.iter().map(|s| s.name.clone()).collect()
    }

    /// Steps recorded here.
    #[getter]
    fn recorded_steps(&self) -> u64 {
        self.recorded_steps
    }

    /// Steps the learned specs stand for: recorded plus preloaded.
    #[getter]
    fn learned_steps(&self) -> u64 {
        self.recorded_steps + self.imported_steps
    }

    /// Everything learned, as a spec set.
    fn specs(&self) -> PyResult<PySpecSet> {
        Ok(PySpecSet {
            specs: self.specs_inner().py()?,
        })
    }

    /// Merges a spec set as if its steps had been recorded here.
    fn preload(&mut self, specs: &Bound<'_, PySpecSet>) -> PyResult<()> {
        self.preload_inner(&specs.get().specs).py()
    }
}
