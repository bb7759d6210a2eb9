//! The bookkeeping of the Python `Recorder`: which sites were requested in
//! which mode, with what element type, what shape their buffer must hold
//! and what phase span. The Rust `Recorder` serves recorded requests from
//! host memory of its own; a torch model records on its own device, so the
//! Python package keeps the same bookkeeping here, with the core's rules:
//! sites are sized and checked by the core's half of the one shape rule
//! (`tensor_arena::record::SiteShape`, `check_frozen_request`), a site
//! keeps its element type, its lifetime runs from the phase of its first
//! lease to the phase of its last release, united over steps, and each
//! mode learns its own sites. It exports them as the same `SpecSet`. The
//! test suite runs the Rust `Recorder` on the same requests
//! (`reference_specs`) and compares the spec files byte for byte.

use std::collections::HashMap;

use pyo3::prelude::*;
use tensor_arena::plan::DEFAULT_MODE;
use tensor_arena::record::{
    SiteShape, SpecEntry, SpecLifetime, SpecMode, SpecSet, check_frozen_request,
};
use tensor_arena::{DType, Error, Plan, Rounding, Shape, ShapeRule};

use crate::errors::IntoPy;
use crate::planner::{PyPlan, dtype_of, name_key};
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

    fn of(l: SpecLifetime) -> Life {
        match l {
            SpecLifetime::Persistent => Life::Persistent,
            SpecLifetime::Step => Life::Step,
            SpecLifetime::Phases { first, last } => Life::Span(first, last),
        }
    }
}

#[derive(Debug)]
struct Site {
    name: String,
    /// Its mode; `None` for a persistent buffer.
    mode: Option<u16>,
    dtype: DType,
    size: SiteShape,
    rounding: Option<Rounding>,
    /// `None` until first requested (a site only bounded so far).
    life: Option<Life>,
    recorded: bool,
    requests: u64,
    live: bool,
}

impl Site {
    fn temp(name: &str, mode: u16, dtype: DType) -> Site {
        Site {
            name: name.to_owned(),
            mode: Some(mode),
            dtype,
            size: SiteShape::new(ShapeRule::Elements),
            rounding: None,
            life: None,
            recorded: true,
            requests: 0,
            live: false,
        }
    }

    fn persistent(name: &str, dtype: DType, shape: &[usize], padded: usize) -> Site {
        Site {
            mode: None,
            size: SiteShape::sized(ShapeRule::Elements, shape, padded),
            life: Some(Life::Persistent),
            recorded: false,
            ..Site::temp(name, 0, dtype)
        }
    }

    fn check_compatible(&self, dtype: DType, shape: &[usize]) -> Result<(), Error> {
        if self.dtype != dtype {
            return Err(Error::DTypeMismatch {
                buffer: self.name.clone(),
                declared: self.dtype.name(),
                requested: dtype.name(),
            });
        }
        self.size.check_rank(&self.name, shape)
    }
}

#[derive(Debug)]
struct ModeInfo {
    name: String,
    phases: Vec<String>,
}

/// What a recorder has learned; the Python `Recorder` drives it.
#[pyclass(name = "RecorderCore", module = "tensor_arena._native")]
pub struct RecorderCore {
    /// Mode 0 is the default mode.
    modes: Vec<ModeInfo>,
    sites: Vec<Site>,
    temps: HashMap<(u16, String), usize>,
    persistent: HashMap<String, usize>,
    /// Mode and phase of the open recording step.
    mode: u16,
    phase: usize,
    recorded_steps: u64,
    imported_steps: u64,
    rounding: Rounding,
    /// Once frozen: the plan, and each site's buffer in it (`None` for a
    /// site never sized).
    frozen: Option<(Plan, Vec<Option<usize>>)>,
}

fn persistent_by_name(name: &str, shape: &[usize]) -> Error {
    Error::InvalidView {
        buffer: name.to_owned(),
        shape: shape.to_vec(),
        reason: "this name is a persistent buffer; lease it with the handle Recorder.persistent returned",
    }
}

fn padded(name: &str, shape: &[usize], rounding: Rounding) -> Result<Shape, Error> {
    Shape::new(name, shape)?.rounded(name, rounding)
}

impl RecorderCore {
    fn mode_index(&self, mode: usize) -> Result<u16, Error> {
        match u16::try_from(mode) {
            Ok(m) if mode < self.modes.len() => Ok(m),
            _ => Err(Error::ForeignMode {
                index: mode,
                owner: "recorder",
            }),
        }
    }

    fn mode_name(&self, mode: u16) -> &str {
        self.modes
            .get(usize::from(mode))
            .map_or(DEFAULT_MODE, |m| m.name.as_str())
    }

    fn find(&self, mode: u16, name: &str) -> Option<usize> {
        self.temps.get(&(mode, name.to_owned())).copied()
    }

    fn any_temp(&self, name: &str) -> bool {
        self.sites
            .iter()
            .any(|s| s.mode.is_some() && s.name == name)
    }

    fn insert(&mut self, site: Site) -> usize {
        let i = self.sites.len();
        match site.mode {
            None => self.persistent.insert(site.name.clone(), i),
            Some(m) => self.temps.insert((m, site.name.clone()), i),
        };
        self.sites.push(site);
        i
    }

    /// The lifetime of a request made now: the current phase, or the whole
    /// step when the mode has no phases.
    fn life_now(&self) -> Life {
        let phases = self
            .modes
            .get(usize::from(self.mode))
            .map_or(0, |m| m.phases.len());
        if phases == 0 {
            Life::Step
        } else {
            Life::Span(self.phase, self.phase)
        }
    }

    /// A new temporary may be called `name` in `mode`: not empty, not a
    /// persistent buffer, not a phase of the mode.
    fn check_new_temp(&self, mode: u16, name: &str, shape: &[usize]) -> Result<(), Error> {
        if name.is_empty() {
            return Err(Error::EmptyName);
        }
        if self.persistent.contains_key(name) {
            return Err(persistent_by_name(name, shape));
        }
        let phases = self.modes.get(usize::from(mode)).map(|m| &m.phases);
        if phases.is_some_and(|p| p.iter().any(|p| p == name)) {
            return Err(Error::DuplicateName {
                name: name.to_owned(),
            });
        }
        Ok(())
    }

    fn check_recording(&self, name: &str) -> Result<(), Error> {
        if self.frozen.is_some() {
            return Err(Error::InvalidSpecs {
                source_name: "Recorder".to_owned(),
                reason: format!(
                    "'{name}': the recorder is frozen; declare modes, phases, persistent buffers and bounds before freezing (or call rerecord() first)"
                ),
            });
        }
        Ok(())
    }

    fn request_inner(&mut self, name: &str, dtype: DType, shape: &[usize]) -> Result<usize, Error> {
        let mode = self.mode;
        let index = match self.find(mode, name) {
            Some(i) => {
                self.sites[i].check_compatible(dtype, shape)?;
                i
            }
            None => {
                self.check_new_temp(mode, name, shape)?;
                padded(name, shape, self.rounding)?;
                self.insert(Site::temp(name, mode, dtype))
            }
        };
        let now = self.life_now();
        let rounding = self.rounding;
        let site = &mut self.sites[index];
        if site.live {
            return Err(Error::AlreadyLeased {
                buffer: name.to_owned(),
            });
        }
        let padded = padded(name, shape, site.rounding.unwrap_or(rounding))?;
        site.size.widen(shape, padded.elements());
        site.life = Some(site.life.map_or(now, |l| l.union(now)));
        site.requests += 1;
        site.live = true;
        Ok(index)
    }

    /// The site `name` of `mode`, declared now (not yet sized) if new.
    fn site_for(
        &mut self,
        mode: u16,
        name: &str,
        dtype: DType,
        shape: &[usize],
    ) -> Result<usize, Error> {
        if let Some(i) = self.find(mode, name) {
            let site = &self.sites[i];
            if !shape.is_empty() {
                site.check_compatible(dtype, shape)?;
            } else if site.dtype != dtype {
                site.check_compatible(dtype, site.size.max())?;
            }
            return Ok(i);
        }
        self.check_recording(name)?;
        if !shape.is_empty() {
            padded(name, shape, self.rounding)?;
        }
        self.check_new_temp(mode, name, shape)?;
        Ok(self.insert(Site::temp(name, mode, dtype)))
    }

    fn frozen_inner(
        &self,
        mode: u16,
        name: &str,
        dtype: DType,
        shape: &[usize],
    ) -> Result<usize, Error> {
        let unrecorded = || Error::UnrecordedSite {
            site: name.to_owned(),
            mode: self.mode_name(mode).to_owned(),
        };
        let Some(index) = self.find(mode, name) else {
            if self.persistent.contains_key(name) {
                return Err(persistent_by_name(name, shape));
            }
            return Err(unrecorded());
        };
        let site = &self.sites[index];
        let planned = self.frozen.as_ref().and_then(|(plan, buffers)| {
            let b = buffers.get(index).copied().flatten()?;
            plan.buffers().get(b)
        });
        let Some(planned) = planned else {
            return Err(unrecorded());
        };
        if site.dtype != dtype {
            return Err(Error::DTypeMismatch {
                buffer: name.to_owned(),
                declared: site.dtype.name(),
                requested: dtype.name(),
            });
        }
        check_frozen_request(self.mode_name(mode), shape, planned)?;
        Ok(index)
    }

    fn spec_modes(&self) -> Vec<SpecMode> {
        self.modes
            .iter()
            .skip(1)
            .map(|m| SpecMode {
                name: m.name.clone(),
                phases: m.phases.clone(),
            })
            .collect()
    }

    fn specs_inner(&self) -> Result<SpecSet, Error> {
        let steps = self.recorded_steps + self.imported_steps;
        let buffers = self
            .sites
            .iter()
            .filter(|s| s.size.is_sized())
            .map(|s| SpecEntry {
                name: s.name.clone(),
                dtype: s.dtype,
                shape: s.size.max().to_vec(),
                lifetime: match s.life {
                    Some(Life::Persistent) => SpecLifetime::Persistent,
                    Some(Life::Step) | None => SpecLifetime::Step,
                    Some(Life::Span(first, last)) => SpecLifetime::Phases { first, last },
                },
                mode: s
                    .mode
                    .filter(|&m| m > 0)
                    .map(|m| self.mode_name(m).to_owned()),
                shape_rule: s.size.rule(),
                rounding: s.rounding,
                recorded_steps: (s.recorded && s.life.is_some()).then_some(steps),
            })
            .collect();
        SpecSet::with_modes(self.modes[0].phases.clone(), self.spec_modes(), buffers)
    }

    fn mode_of_entry(&self, e: &SpecEntry) -> u16 {
        e.mode
            .as_deref()
            .and_then(|name| self.modes.iter().position(|m| m.name == name))
            // Fits: modes are numbered in u16.
            .map_or(0, |m| m as u16)
    }

    fn preload_inner(&mut self, specs: &SpecSet) -> Result<(), Error> {
        let invalid = |reason: String| Error::InvalidSpecs {
            source_name: "Recorder.preload".to_owned(),
            reason,
        };
        self.check_recording("preload")?;
        let ours = self.spec_modes();
        if specs.phases() != self.modes[0].phases.as_slice() || specs.modes() != ours.as_slice() {
            return Err(invalid(format!(
                "the specs' phases {:?} and modes {:?} differ from the recorder's {:?} and {:?}; declare the same modes and phases in the same order first",
                specs.phases(),
                specs.modes(),
                self.modes[0].phases,
                ours
            )));
        }
        // Check every entry before changing anything.
        for e in specs.buffers() {
            let persistent = e.lifetime == SpecLifetime::Persistent;
            let found = match persistent {
                true => self.persistent.get(&e.name).copied(),
                false => self.find(self.mode_of_entry(e), &e.name),
            };
            let clash = match persistent {
                true => self.any_temp(&e.name),
                false => self.persistent.contains_key(&e.name),
            };
            let differs = found.is_some_and(|i| {
                let site = &self.sites[i];
                site.check_compatible(e.dtype, &e.shape).is_err()
                    || (persistent && site.size.max() != e.shape.as_slice())
                    || (site.size.rule() != e.shape_rule && site.requests > 0)
            });
            if clash || differs {
                return Err(invalid(format!(
                    "buffer '{}' is declared differently in the specs ({}, {:?}) and in the recorder",
                    e.name,
                    specs.entry_lifetime_label(e),
                    e.shape
                )));
            }
        }
        for e in specs.buffers() {
            self.merge(e)?;
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

    fn merge(&mut self, e: &SpecEntry) -> Result<(), Error> {
        let life = Life::of(e.lifetime);
        let mode = self.mode_of_entry(e);
        let padded = padded(&e.name, &e.shape, e.rounding.unwrap_or(self.rounding))?;
        let found = match life {
            Life::Persistent => self.persistent.get(&e.name).copied(),
            _ => self.find(mode, &e.name),
        };
        if let Some(i) = found {
            let site = &mut self.sites[i];
            site.size.set_rule(e.shape_rule);
            site.rounding = e.rounding.or(site.rounding);
            if life != Life::Persistent {
                site.size.widen(&e.shape, padded.elements());
                site.life = Some(site.life.map_or(life, |l| l.union(life)));
            }
            site.recorded |= e.recorded_steps.is_some();
            return Ok(());
        }
        let mut site = if life == Life::Persistent {
            Site::persistent(&e.name, e.dtype, &e.shape, padded.elements())
        } else {
            let mut s = Site::temp(&e.name, mode, e.dtype);
            s.size = SiteShape::sized(e.shape_rule, &e.shape, padded.elements());
            s.life = Some(life);
            s
        };
        site.rounding = e.rounding;
        site.recorded = e.recorded_steps.is_some() && life != Life::Persistent;
        self.insert(site);
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
            modes: vec![ModeInfo {
                name: DEFAULT_MODE.to_owned(),
                phases: Vec::new(),
            }],
            sites: Vec::new(),
            temps: HashMap::new(),
            persistent: HashMap::new(),
            mode: 0,
            phase: 0,
            recorded_steps: 0,
            imported_steps: 0,
            rounding,
            frozen: None,
        })
    }

    /// Declares a mode; returns its index (the default mode is 0).
    fn mode(&mut self, name: &str) -> PyResult<usize> {
        if name.is_empty() {
            return Err(Error::EmptyName).py();
        }
        if self.modes.iter().any(|m| m.name == name) {
            return Err(Error::DuplicateName {
                name: name.to_owned(),
            })
            .py();
        }
        self.check_recording(name).py()?;
        if self.modes.len() > usize::from(u16::MAX) {
            return Err(Error::SizeOverflow {
                buffer: name.to_owned(),
                shape: Vec::new(),
                what: "the number of modes",
                limit: u64::from(u16::MAX),
            })
            .py();
        }
        self.modes.push(ModeInfo {
            name: name.to_owned(),
            phases: Vec::new(),
        });
        Ok(self.modes.len() - 1)
    }

    /// Mode names, the default mode first.
    #[getter]
    fn modes(&self) -> Vec<String> {
        self.modes.iter().map(|m| m.name.clone()).collect()
    }

    /// Declares the next phase of `mode`; returns its index in the mode.
    #[pyo3(signature = (name, mode = 0))]
    fn phase(&mut self, name: &str, mode: usize) -> PyResult<usize> {
        let m = self.mode_index(mode).py()?;
        if name.is_empty() {
            return Err(Error::EmptyName).py();
        }
        if self.modes[usize::from(m)].phases.iter().any(|p| p == name)
            || self.find(m, name).is_some()
            || self.persistent.contains_key(name)
        {
            return Err(Error::DuplicateName {
                name: name.to_owned(),
            })
            .py();
        }
        self.check_recording(name).py()?;
        let phases = &mut self.modes[usize::from(m)].phases;
        phases.push(name.to_owned());
        Ok(phases.len() - 1)
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
        if let Some(&i) = self.persistent.get(name) {
            let s = &self.sites[i];
            if s.dtype == dtype && s.size.max() == shape.as_slice() {
                return Ok(i);
            }
            return Err(Error::DuplicateName {
                name: name.to_owned(),
            })
            .py();
        }
        if name.is_empty() {
            return Err(Error::EmptyName).py();
        }
        if self.any_temp(name)
            || self
                .modes
                .iter()
                .any(|m| m.phases.iter().any(|p| p == name))
        {
            return Err(Error::DuplicateName {
                name: name.to_owned(),
            })
            .py();
        }
        self.check_recording(name).py()?;
        let padded = padded(name, &shape, self.rounding).py()?;
        Ok(self.insert(Site::persistent(name, dtype, &shape, padded.elements())))
    }

    /// Declares up front the largest shape site `name` of `mode` must hold
    /// (by the site's rule), so the worst case need not be recorded.
    fn bound(
        &mut self,
        mode: usize,
        name: &str,
        shape: Vec<usize>,
        dtype: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let dtype = dtype_of(Some(dtype))?;
        let m = self.mode_index(mode).py()?;
        let index = self.site_for(m, name, dtype, &shape).py()?;
        let rounding = self.rounding;
        let site = &mut self.sites[index];
        let padded = padded(name, &shape, site.rounding.unwrap_or(rounding)).py()?;
        site.size.widen(&shape, padded.elements());
        Ok(())
    }

    /// Opts site `name` of `mode` in to per-dimension limits (before its
    /// first request).
    fn per_dimension(&mut self, mode: usize, name: &str, dtype: &Bound<'_, PyAny>) -> PyResult<()> {
        let dtype = dtype_of(Some(dtype))?;
        let m = self.mode_index(mode).py()?;
        let index = self.site_for(m, name, dtype, &[]).py()?;
        let site = &mut self.sites[index];
        if site.size.rule() == ShapeRule::Dims {
            return Ok(());
        }
        if site.requests > 0 {
            return Err(Error::InvalidView {
                buffer: name.to_owned(),
                shape: site.size.max().to_vec(),
                reason: "per-dimension limits must be chosen before the site's first request",
            })
            .py();
        }
        site.size.set_rule(ShapeRule::Dims);
        Ok(())
    }

    /// Starts a recording step of `mode` in its first phase.
    #[pyo3(signature = (mode = 0))]
    fn begin_step(&mut self, mode: usize) -> PyResult<()> {
        self.mode = self.mode_index(mode).py()?;
        self.phase = 0;
        self.sites.iter_mut().for_each(|s| s.live = false);
        Ok(())
    }

    /// Records a request for site `name` in the step's mode; returns its
    /// index.
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
            if let Some(Life::Span(first, last)) = site.life {
                site.life = Some(Life::Span(first, last.max(phase)));
            }
        }
    }

    /// Moves the recording step to phase `index` of `mode` (a phase of
    /// another mode than the step's is `WrongMode`).
    fn enter(&mut self, mode: usize, index: usize) -> PyResult<()> {
        let known = self.modes.get(mode).filter(|m| index < m.phases.len());
        let Some(info) = known else {
            return Err(Error::ForeignPhase {
                index,
                owner: "recorder",
            })
            .py();
        };
        if mode != usize::from(self.mode) {
            return Err(Error::WrongMode {
                what: "phase",
                name: info.phases[index].clone(),
                mode: info.name.clone(),
                step_mode: self.mode_name(self.mode).to_owned(),
            })
            .py();
        }
        if index < self.phase {
            return Err(Error::PhaseOrder {
                current: info.phases[self.phase].clone(),
                requested: info.phases[index].clone(),
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

    /// The current phase's name (`step` when the mode has none).
    #[getter]
    fn phase_name(&self) -> String {
        self.modes
            .get(usize::from(self.mode))
            .and_then(|m| m.phases.get(self.phase))
            .cloned()
            .unwrap_or_else(|| "step".to_owned())
    }

    /// Frozen: the plan `declare_on` made of `specs()`, to check requests
    /// against.
    fn freeze(&mut self, plan: &Bound<'_, PyPlan>) {
        let plan = plan.get().plan.clone();
        // The specs list the sized sites in site order, and declare_on
        // keeps that order.
        let mut next = 0;
        let buffers = self
            .sites
            .iter()
            .map(|s| {
                s.size.is_sized().then(|| {
                    next += 1;
                    next - 1
                })
            })
            .collect();
        self.frozen = Some((plan, buffers));
    }

    /// Back to recording (what was learned is kept).
    fn rerecord(&mut self) {
        self.frozen = None;
    }

    /// Frozen: checks a request for site `name` of `mode` against its
    /// planned buffer and returns the site's index (the rule of the Rust
    /// recorder once frozen: the same element type, and the one shape rule
    /// against the planned buffer, `ExceedsRecorded` naming the rule).
    fn frozen_site(
        &self,
        name: &str,
        shape: Vec<usize>,
        dtype: &Bound<'_, PyAny>,
        mode: usize,
    ) -> PyResult<usize> {
        let dtype = dtype_of(Some(dtype))?;
        let m = self.mode_index(mode).py()?;
        self.frozen_inner(m, name, dtype, &shape).py()
    }

    /// Sites known, in first-seen order, as `declare_on` keys them: the
    /// name in the default mode and for persistent buffers, `(mode,
    /// name)` in a declared mode.
    #[getter]
    fn sites<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        self.sites
            .iter()
            .map(|s| name_key(py, s.mode.map(|m| self.mode_name(m)), &s.name))
            .collect()
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
