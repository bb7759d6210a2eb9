//! The bookkeeping of the Python `Recorder`: a thin wrapper over the core's
//! `tensor_arena::record::SiteBook`, the Rust `Recorder`'s bookkeeping
//! without its host pools (a torch model records on its own device). So
//! the two recorders size sites by the one shape rule, keep each site's
//! element type, unite its phase span over steps, learn each mode's own
//! sites and export the same `SpecSet`, with the same errors. The test
//! suite runs the Rust `Recorder` on the same requests (`reference_specs`)
//! and compares the spec files byte for byte. Once frozen, the book checks
//! a request against its planned buffer, which this wrapper keeps.

use std::sync::{Mutex, MutexGuard, PoisonError};

use pyo3::prelude::*;
use tensor_arena::record::SiteBook;
use tensor_arena::{DType, Error, Plan, Rounding};

use crate::errors::IntoPy;
use crate::planner::{PyPlan, dtype_of, name_key};
use crate::specs::PySpecSet;

/// What a recorder has learned; the Python `Recorder` drives it.
#[pyclass(name = "RecorderCore", module = "tensor_arena._native")]
pub struct RecorderCore {
    /// Behind a mutex only because a Python class must be `Sync`; every
    /// method holds the Python class's own borrow already.
    book: Mutex<SiteBook>,
    /// Once frozen: the plan, and each site's buffer in it (`None` for a
    /// site never sized).
    frozen: Option<(Plan, Vec<Option<usize>>)>,
}

impl RecorderCore {
    fn book(&mut self) -> &mut SiteBook {
        self.book.get_mut().unwrap_or_else(PoisonError::into_inner)
    }

    fn read(&self) -> MutexGuard<'_, SiteBook> {
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn frozen_inner(
        &self,
        mode: u16,
        name: &str,
        dtype: DType,
        shape: &[usize],
    ) -> Result<usize, Error> {
        let planned = |index: usize| {
            let (plan, buffers) = self.frozen.as_ref()?;
            plan.buffers().get(buffers.get(index).copied().flatten()?)
        };
        let book = self.read();
        let (index, _) = book.planned_request(mode, name, dtype, shape, planned)?;
        Ok(index)
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
            book: Mutex::new(SiteBook::new(rounding)),
            frozen: None,
        })
    }

    /// Declares a mode; returns its index (the default mode is 0).
    fn mode(&mut self, name: &str) -> PyResult<usize> {
        self.book().mode(name).map(usize::from).py()
    }

    /// Mode names, the default mode first.
    #[getter]
    fn modes(&self) -> Vec<String> {
        self.read().mode_names().map(str::to_owned).collect()
    }

    /// Declares the next phase of `mode`; returns its index in the mode.
    #[pyo3(signature = (name, mode = 0))]
    fn phase(&mut self, name: &str, mode: usize) -> PyResult<usize> {
        let book = self.book();
        let m = book.mode_index(mode).py()?;
        book.phase(m, name).py()
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
        self.book().persistent(name, dtype, &shape).py()
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
        let book = self.book();
        let m = book.mode_index(mode).py()?;
        book.bound(m, name, dtype, &shape).py()
    }

    /// Opts site `name` of `mode` in to per-dimension limits (before its
    /// first request).
    fn per_dimension(&mut self, mode: usize, name: &str, dtype: &Bound<'_, PyAny>) -> PyResult<()> {
        let dtype = dtype_of(Some(dtype))?;
        let book = self.book();
        let m = book.mode_index(mode).py()?;
        book.per_dimension(m, name, dtype).py()
    }

    /// Starts a recording step of `mode` in its first phase.
    #[pyo3(signature = (mode = 0))]
    fn begin_step(&mut self, mode: usize) -> PyResult<()> {
        let book = self.book();
        let m = book.mode_index(mode).py()?;
        book.begin_step(m);
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
        // The memory is torch's: nothing to reserve.
        let granted = self.book().request(name, dtype, &shape, |_, _| Ok(()));
        granted.map(|g| g.index).py()
    }

    /// Records the end of site `index`'s lease in the current phase.
    fn release(&mut self, index: usize) {
        self.book().release(index);
    }

    /// Moves the recording step to phase `index` of `mode` (a phase of
    /// another mode than the step's is `WrongMode`).
    fn enter(&mut self, mode: usize, index: usize) -> PyResult<()> {
        let book = self.book();
        let Ok(m) = u16::try_from(mode) else {
            return Err(Error::ForeignPhase {
                index,
                owner: "recorder",
            })
            .py();
        };
        book.enter(m, index).py()
    }

    /// Ends a recording step: live sites end in the current phase.
    fn end_step(&mut self) {
        self.book().end_step();
    }

    /// The current phase's name (`step` when the mode has none).
    #[getter]
    fn phase_name(&self) -> String {
        self.read().phase_name().to_owned()
    }

    /// Frozen: the plan `declare_on` made of `specs()`, to check requests
    /// against.
    fn freeze(&mut self, plan: &Bound<'_, PyPlan>) {
        let plan = plan.get().plan.clone();
        let book = self.book();
        book.freeze();
        // The specs list the sized sites in site order, and declare_on
        // keeps that order.
        let mut next = 0;
        let buffers = book
            .sites()
            .iter()
            .map(|s| {
                s.is_sized().then(|| {
                    next += 1;
                    next - 1
                })
            })
            .collect();
        self.frozen = Some((plan, buffers));
    }

    /// Back to recording (what was learned is kept).
    fn rerecord(&mut self) {
        self.book().rerecord();
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
        let m = self.read().mode_index(mode).py()?;
        self.frozen_inner(m, name, dtype, &shape).py()
    }

    /// Sites known, in first-seen order, as `declare_on` keys them: the
    /// name in the default mode and for persistent buffers, `(mode,
    /// name)` in a declared mode.
    #[getter]
    fn sites<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let book = self.read();
        book.sites()
            .iter()
            .map(|s| name_key(py, s.mode.map(|m| book.mode_name(m)), &s.name))
            .collect()
    }

    /// Steps recorded here.
    #[getter]
    fn recorded_steps(&self) -> u64 {
        self.read().recorded_steps()
    }

    /// Steps the learned specs stand for: recorded plus preloaded.
    #[getter]
    fn learned_steps(&self) -> u64 {
        self.read().learned_steps()
    }

    /// Everything learned, as a spec set.
    fn specs(&self) -> PySpecSet {
        PySpecSet {
            specs: self.read().specs(),
        }
    }

    /// Merges a spec set as if its steps had been recorded here.
    fn preload(&mut self, specs: &Bound<'_, PySpecSet>) -> PyResult<()> {
        self.book()
            .preload(&specs.get().specs, "Recorder.preload")
            .py()
    }
}
