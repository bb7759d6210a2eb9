//! `Arena` and `Step`: one torch uint8 slab, leases as typed views of it,
//! the rules kept by the Rust [`LeaseBook`].
//!
//! Every buffer gets, once at reservation, a typed 1-D base tensor over its
//! padded capacity (`slab.narrow(0, offset, bytes).view(dtype)`, detached
//! through `.data` so that it has a version counter of its own: views of
//! one tensor share its counter, and autograd would otherwise refuse a
//! backward pass after an in-place write to any other buffer of the slab).
//! A lease is one `as_strided` of that base: zero-copy, same storage.
//!
//! The Rust state sits behind a mutex that is never held while torch runs,
//! so a torch call that releases the GIL cannot deadlock another thread.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use tensor_arena::arena::{Ended, LeaseBook, LeaseToken, StepToken};
use tensor_arena::plan::LifetimeKind;
use tensor_arena::{
    ArenaStats, DeviceCounters, Error, GuardViolation, Plan, PlannedBuffer,
    arena::{GUARD_BYTE, POISON_BYTE},
};

use crate::errors::{ForeignHandleError, GuardViolationError, IntoPy, StaleLeaseError, to_py};
use crate::planner::{PyBuffer, PyMode, PyPhase, buffer_handle, name_key, torch_dtype};

/// The lease book and what Python needs to find leases again.
struct State {
    book: LeaseBook,
    step: Option<StepToken>,
    /// Per buffer: its live lease and the elements of its view.
    live: Vec<Option<(LeaseToken, usize)>>,
    /// Slab offset of a live lease -> its buffer (live leases never share
    /// bytes, so no two have the same first byte).
    by_offset: HashMap<usize, usize>,
    /// Checked mode: guard damage found at the end of a step while an
    /// exception was already on its way.
    violations: Vec<GuardViolation>,
}

/// One slab of device memory, planned once, leased every step.
#[pyclass(name = "Arena", module = "tensor_arena._native", frozen)]
pub struct PyArena {
    state: Mutex<State>,
    plan: Plan,
    slab: Py<PyAny>,
    /// Per buffer: the typed base tensor over its capacity.
    bases: Vec<Py<PyAny>>,
    /// Per buffer: its handle.
    handles: Vec<Py<PyBuffer>>,
    slab_ptr: usize,
    /// Bytes of the slab tensor (at least the plan's).
    slab_len: usize,
    device: String,
    checked: bool,
}

fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    strides
}

fn checked_from_env(py: Python<'_>) -> PyResult<bool> {
    let value = py
        .import("os")?
        .getattr("environ")?
        .call_method1("get", ("TENSOR_ARENA_CHECKED", ""))?;
    Ok(value.extract::<String>()? == "1")
}

impl PyArena {
    pub fn reserve(
        py: Python<'_>,
        plan: Plan,
        device: Option<&Bound<'_, PyAny>>,
        checked: Option<bool>,
        slab: Option<Bound<'_, PyAny>>,
    ) -> PyResult<PyArena> {
        let torch = py.import("torch")?;
        let uint8 = torch.getattr("uint8")?;
        let needed = plan.slab_bytes();
        let slab = match slab {
            Some(s) => {
                let ok = s.getattr("dtype")?.eq(&uint8)?
                    && s.getattr("ndim")?.extract::<usize>()? == 1
                    && s.call_method0("is_contiguous")?.extract::<bool>()?
                    && s.call_method0("numel")?.extract::<usize>()? >= needed;
                if !ok {
                    return Err(PyValueError::new_err(format!(
                        "slab must be a contiguous 1-D torch.uint8 tensor of at least {needed} bytes"
                    )));
                }
                s
            }
            None => {
                let kwargs = PyDict::new(py);
                kwargs.set_item("dtype", &uint8)?;
                if let Some(d) = device {
                    kwargs.set_item("device", d)?;
                }
                torch.call_method("empty", (needed,), Some(&kwargs))?
            }
        };
        let device = slab.getattr("device")?.str()?.to_string();
        let slab_ptr: usize = slab.call_method0("data_ptr")?.extract()?;
        let slab_len: usize = slab.call_method0("numel")?.extract()?;
        let book = LeaseBook::new(plan.clone());
        let mut bases = Vec::with_capacity(plan.buffers().len());
        let mut handles = Vec::with_capacity(plan.buffers().len());
        for (b, id) in plan.buffers().iter().zip(book.ids()) {
            let typed = slab
                .call_method1("narrow", (0, b.offset(), b.bytes()))?
                .call_method1("view", (torch_dtype(py, b.dtype())?,))?
                .getattr("data")?;
            bases.push(typed.unbind());
            handles.push(buffer_handle(py, id, b, &plan)?);
        }
        let checked = match checked {
            Some(c) => c,
            None => checked_from_env(py)?,
        };
        let arena = PyArena {
            state: Mutex::new(State {
                book,
                step: None,
                live: vec![None; plan.buffers().len()],
                by_offset: HashMap::new(),
                violations: Vec::new(),
            }),
            plan,
            slab: slab.unbind(),
            bases,
            handles,
            slab_ptr,
            slab_len,
            device,
            checked,
        };
        if checked {
            arena.arm_all(py)?;
        }
        Ok(arena)
    }

    fn state(&self) -> PyResult<MutexGuard<'_, State>> {
        self.state
            .lock()
            .map_err(|_| PyRuntimeError::new_err("the arena's lock is poisoned"))
    }

    fn fill(&self, py: Python<'_>, start: usize, len: usize, byte: u8) -> PyResult<()> {
        if len > 0 {
            self.slab
                .bind(py)
                .call_method1("narrow", (0, start, len))?
                .call_method1("fill_", (byte,))?;
        }
        Ok(())
    }

    /// Guard bytes of buffer `b`: from the end of its capacity to the end
    /// of its slot.
    fn guard(b: &PlannedBuffer) -> (usize, usize) {
        let start = b.offset() + b.bytes();
        (start, b.offset() + b.size() - start)
    }

    /// As the arena does at creation: step-scoped slots poisoned whole
    /// (their guards are armed when leased: until then their bytes may
    /// hold another buffer's data), persistent buffers' guards armed.
    fn arm_all(&self, py: Python<'_>) -> PyResult<()> {
        for b in self.plan.buffers() {
            if b.lifetime() == LifetimeKind::Persistent {
                let (start, len) = Self::guard(b);
                self.fill(py, start, len, GUARD_BYTE)?;
            } else {
                self.fill(py, b.offset(), b.size(), POISON_BYTE)?;
            }
        }
        Ok(())
    }

    /// The damage in buffer `index`'s guard, if any.
    fn inspect(
        &self,
        py: Python<'_>,
        index: usize,
        step: u64,
        lease: u64,
        phase: &str,
        view_elements: usize,
    ) -> PyResult<Option<GuardViolation>> {
        let b = &self.plan.buffers()[index];
        let (start, len) = Self::guard(b);
        if len == 0 {
            return Ok(None);
        }
        let guard = self.slab.bind(py).call_method1("narrow", (0, start, len))?;
        let bad = guard.call_method1("ne", (GUARD_BYTE,))?;
        let damaged: bool = bad.call_method0("any")?.call_method0("item")?.extract()?;
        if !damaged {
            return Ok(None);
        }
        // Index of the last modified byte: its distance is the overrun.
        let last: usize = bad
            .call_method0("nonzero")?
            .call_method0("max")?
            .call_method0("item")?
            .extract()?;
        Ok(Some(GuardViolation {
            buffer: b.name().to_owned(),
            capacity_bytes: b.bytes(),
            overrun_bytes: last + 1,
            guard_offset: start,
            lease,
            step,
            phase: phase.to_owned(),
            view_elements,
        }))
    }

    /// Poisons what `ended` closed: whole slots, as the arena does (the
    /// guard is re-armed by the next lease, and a larger buffer reusing the
    /// bytes must not read guard bytes as data).
    fn poison(&self, py: Python<'_>, ended: Ended) -> PyResult<()> {
        let regions: Vec<(usize, usize)> = {
            let st = self.state()?;
            st.book
                .ended(ended)
                .map(|b| (b.offset(), b.size()))
                .collect()
        };
        for (offset, len) in regions {
            self.fill(py, offset, len, POISON_BYTE)?;
        }
        Ok(())
    }

    fn view<'py>(
        &self,
        py: Python<'py>,
        index: usize,
        shape: &[usize],
    ) -> PyResult<Bound<'py, PyAny>> {
        let strides = contiguous_strides(shape);
        self.bases[index].bind(py).call_method1(
            pyo3::intern!(py, "as_strided"),
            (PyTuple::new(py, shape)?, PyTuple::new(py, strides)?),
        )
    }

    fn buffer_index(&self, buffer: &Bound<'_, PyAny>) -> PyResult<usize> {
        if let Ok(b) = buffer.cast::<PyBuffer>() {
            return Ok(b.get().id.index());
        }
        Err(PyTypeError::new_err(
            "expected a Buffer handle from this arena's planner",
        ))
    }

    /// Which live lease `x` (a tensor or a Buffer handle) names.
    fn live_index(&self, py: Python<'_>, x: &Bound<'_, PyAny>) -> PyResult<usize> {
        if let Ok(b) = x.cast::<PyBuffer>() {
            let id = b.get().id;
            let index = id.index();
            let st = self.state()?;
            return match st.live.get(index) {
                Some(Some(_)) if self.handles[index].get().id == id => Ok(index),
                Some(_) if self.handles.get(index).is_some_and(|h| h.get().id == id) => {
                    Err(to_py(Error::StaleLease {
                        buffer: b.get().name.clone(),
                        lease: 0,
                        reason: "no lease of this buffer is live",
                    }))
                }
                _ => Err(to_py(Error::ForeignHandle {
                    index,
                    owner: "arena",
                })),
            };
        }
        let ptr: usize = x.call_method0(pyo3::intern!(py, "data_ptr"))?.extract()?;
        let slab_bytes = self.plan.slab_bytes();
        match ptr.checked_sub(self.slab_ptr).filter(|&o| o < slab_bytes) {
            Some(offset) => self.state()?.by_offset.get(&offset).copied().ok_or_else(|| {
                StaleLeaseError::new_err(format!(
                    "no live lease starts at slab offset {offset}: the lease was released already or ended with its step, or the tensor is a view into a lease rather than the lease itself"
                ))
            }),
            None => Err(ForeignHandleError::new_err(
                "not a lease of this arena (its data lies outside the slab): pass the tensor Step.lease returned, or its Buffer handle",
            )),
        }
    }
}

#[pymethods]
impl PyArena {
    /// Opens a step (a context manager; the step ends on exit) in `mode`:
    /// a `Mode` handle of the planner, a mode's name, or `None` for the
    /// default mode. Only persistent buffers and the mode's own can be
    /// leased in it, only its phases entered (`ModeError` otherwise).
    #[pyo3(signature = (mode = None))]
    fn step(slf: &Bound<'_, PyArena>, mode: Option<&Bound<'_, PyAny>>) -> PyResult<PyStep> {
        let token = {
            let mut st = slf.get().state()?;
            let begun = match mode {
                None => st.book.begin_step(),
                Some(m) => match m.cast::<PyMode>() {
                    Ok(handle) => st.book.begin_step_in(handle.get().mode),
                    Err(_) => {
                        let name: String = m.extract().map_err(|_| {
                            PyTypeError::new_err(
                                "mode must be a Mode handle, a mode's name or None",
                            )
                        })?;
                        st.book.mode(&name).and_then(|m| st.book.begin_step_in(m))
                    }
                },
            };
            let token = begun.py()?;
            st.step = Some(token);
            token
        };
        Ok(PyStep {
            arena: slf.clone().unbind(),
            token,
        })
    }

    /// The tensor view of a persistent buffer (weights, optimizer state),
    /// with its declared shape. Persistent buffers never share bytes, so
    /// the view may be held across steps.
    fn persistent<'py>(
        &self,
        py: Python<'py>,
        buffer: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let index = self.buffer_index(buffer)?;
        let b = self.plan.buffers().get(index).ok_or_else(|| {
            to_py(Error::ForeignHandle {
                index,
                owner: "arena",
            })
        })?;
        if self.handles[index].get().id != buffer.cast::<PyBuffer>()?.get().id {
            return Err(to_py(Error::ForeignHandle {
                index,
                owner: "arena",
            }));
        }
        if b.lifetime() != LifetimeKind::Persistent {
            return Err(PyValueError::new_err(format!(
                "buffer '{}' is not persistent (lifetime {}); lease it inside a step",
                b.name(),
                self.handles[index].get().lifetime
            )));
        }
        self.view(py, index, b.shape())
    }

    /// The slab: one uint8 tensor of `plan.slab_bytes` bytes.
    #[getter]
    fn slab(&self, py: Python<'_>) -> Py<PyAny> {
        self.slab.clone_ref(py)
    }

    /// The plan.
    #[getter]
    fn plan(&self) -> crate::planner::PyPlan {
        crate::planner::PyPlan {
            plan: self.plan.clone(),
        }
    }

    /// The slab's device, as torch writes it.
    #[getter]
    fn device(&self) -> String {
        self.device.clone()
    }

    /// Whether checked mode is on.
    #[getter]
    fn checked(&self) -> bool {
        self.checked
    }

    /// Buffer handles by name: the name in the default mode and for
    /// persistent buffers, `(mode, name)` in a declared mode.
    #[getter]
    fn buffers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for h in &self.handles {
            let b = h.get();
            d.set_item(name_key(py, b.mode.as_deref(), &b.name)?, h.clone_ref(py))?;
        }
        Ok(d)
    }

    /// The counters, as `Arena::stats()` keeps them; `device` counts the
    /// one torch allocation of the slab.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.arena_stats()?;
        let d = PyDict::new(py);
        d.set_item("reserved_bytes", s.reserved_bytes)?;
        d.set_item("slab_bytes", s.slab_bytes)?;
        d.set_item("persistent_bytes", s.persistent_bytes)?;
        d.set_item("active_bytes", s.active_bytes)?;
        d.set_item("peak_active_bytes", s.peak_active_bytes)?;
        d.set_item("live_leases", s.live_leases)?;
        d.set_item("peak_live_leases", s.peak_live_leases)?;
        d.set_item("total_leases", s.total_leases)?;
        d.set_item("total_releases", s.total_releases)?;
        d.set_item("leased_bytes", s.leased_bytes)?;
        d.set_item("released_bytes", s.released_bytes)?;
        d.set_item("segments", s.segments)?;
        d.set_item("steps", s.steps)?;
        d.set_item("slab_allocations", s.device.alloc_calls)?;
        Ok(d)
    }

    /// A table laid out like `torch_npu.npu.memory_summary()`.
    fn memory_summary(&self) -> PyResult<String> {
        let why = if self.slab_len > self.plan.slab_bytes() {
            "the slab passed to reserve() is larger than the plan"
        } else {
            ""
        };
        Ok(self.arena_stats()?.summary(&self.device, why))
    }

    /// Checked mode: verifies the persistent buffers' guards, then raises
    /// `GuardViolationError` for the first damage found so far.
    fn verify(&self, py: Python<'_>) -> PyResult<()> {
        if self.checked {
            self.check_persistent(py)?;
        }
        let st = self.state()?;
        match st.violations.first() {
            Some(v) => Err(GuardViolationError::new_err(v.to_string())),
            None => Ok(()),
        }
    }

    /// Checked mode: every guard violation found so far (as messages),
    /// clearing the list.
    fn take_violations(&self) -> PyResult<Vec<String>> {
        let mut st = self.state()?;
        Ok(std::mem::take(&mut st.violations)
            .into_iter()
            .map(|v| v.to_string())
            .collect())
    }

    fn __repr__(&self) -> String {
        format!(
            "Arena(device='{}', slab_bytes={}, buffers={}, checked={})",
            self.device,
            self.plan.slab_bytes(),
            self.plan.buffers().len(),
            if self.checked { "True" } else { "False" }
        )
    }
}

impl PyArena {
    fn arena_stats(&self) -> PyResult<ArenaStats> {
        let mut s = self.state()?.book.stats();
        let bytes = self.slab_len as u64;
        s.reserved_bytes = bytes;
        s.device = DeviceCounters {
            alloc_calls: 1,
            bytes_in_use: bytes,
            peak_bytes: bytes,
            ..DeviceCounters::default()
        };
        Ok(s)
    }

    fn check_persistent(&self, py: Python<'_>) -> PyResult<()> {
        for (i, b) in self.plan.buffers().iter().enumerate() {
            if b.lifetime() != LifetimeKind::Persistent {
                continue;
            }
            let steps = self.state()?.book.stats().steps;
            if let Some(v) = self.inspect(py, i, steps, 0, "between steps", b.capacity())? {
                self.state()?.violations.push(v);
                let (start, len) = Self::guard(b);
                self.fill(py, start, len, GUARD_BYTE)?;
            }
        }
        Ok(())
    }
}

/// One step of an arena: leases come from it and end with it.
#[pyclass(name = "Step", module = "tensor_arena._native", frozen)]
pub struct PyStep {
    arena: Py<PyArena>,
    token: StepToken,
}

impl PyStep {
    fn release_index(&self, py: Python<'_>, arena: &PyArena, index: usize) -> PyResult<()> {
        let (token, elements) = {
            let mut st = arena.state()?;
            let Some((token, elements)) = st.live[index] else {
                return Err(to_py(Error::StaleLease {
                    buffer: arena.plan.buffers()[index].name().to_owned(),
                    lease: 0,
                    reason: "no lease of this buffer is live",
                }));
            };
            st.book.release(token).py()?;
            st.live[index] = None;
            let offset = arena.plan.buffers()[index].offset();
            st.by_offset.remove(&offset);
            (token, elements)
        };
        if arena.checked {
            let phase = arena.state()?.book.phase().to_owned();
            if let Some(v) = arena.inspect(
                py,
                index,
                self.token.number(),
                token.number(),
                &phase,
                elements,
            )? {
                arena.state()?.violations.push(v.clone());
                return Err(GuardViolationError::new_err(v.to_string()));
            }
        }
        Ok(())
    }

    fn finish(&self, py: Python<'_>, raise: bool) -> PyResult<()> {
        let arena = self.arena.get();
        let live: Vec<usize> = {
            let st = arena.state()?;
            if st.step != Some(self.token) {
                // Ended already (end() then __exit__): nothing to do.
                return Ok(());
            }
            st.live
                .iter()
                .enumerate()
                .filter_map(|(i, l)| l.map(|_| i))
                .collect()
        };
        let mut first = None;
        let known = arena.state()?.violations.len();
        if arena.checked {
            let phase = arena.state()?.book.phase().to_owned();
            for &i in &live {
                let Some((token, elements)) = arena.state()?.live[i] else {
                    continue;
                };
                if let Some(v) =
                    arena.inspect(py, i, self.token.number(), token.number(), &phase, elements)?
                {
                    first.get_or_insert_with(|| v.to_string());
                    arena.state()?.violations.push(v);
                }
            }
        }
        let ended = {
            let mut st = arena.state()?;
            let ended = st.book.end_step(self.token).py()?;
            st.step = None;
            st.live.iter_mut().for_each(|l| *l = None);
            st.by_offset.clear();
            ended
        };
        if arena.checked {
            arena.check_persistent(py)?;
            arena.poison(py, ended)?;
            if first.is_none() {
                first = arena.state()?.violations.get(known).map(|v| v.to_string());
            }
        }
        match first {
            Some(message) if raise => Err(GuardViolationError::new_err(message)),
            _ => Ok(()),
        }
    }
}

#[pymethods]
impl PyStep {
    /// Leases `buffer` with `shape` (default: its declared shape): a typed
    /// tensor view of the slab, zero-copy. Raises if the buffer is leased
    /// already, a live lease shares its bytes, it belongs to another mode
    /// than the step's, the phase is outside its span, the shape does not
    /// fit by the buffer's shape rule (its element count beyond the padded
    /// capacity; with `shape_rule="dims"`, a dimension beyond the padded
    /// one), or the handle is another planner's.
    #[pyo3(signature = (buffer, shape = None))]
    fn lease<'py>(
        &self,
        py: Python<'py>,
        buffer: &Bound<'_, PyAny>,
        shape: Option<Vec<usize>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let arena = self.arena.get();
        let handle = buffer.cast::<PyBuffer>().map_err(|_| {
            PyTypeError::new_err("expected a Buffer handle from this arena's planner")
        })?;
        let id = handle.get().id;
        let index = id.index();
        let granted = {
            let mut st = arena.state()?;
            let g = st.book.lease(self.token, id, shape.as_deref()).py()?;
            st.live[index] = Some((g.token, g.elements));
            st.by_offset.insert(g.offset, index);
            g
        };
        if arena.checked {
            let (start, len) = PyArena::guard(&arena.plan.buffers()[index]);
            arena.fill(py, start, len, GUARD_BYTE)?;
        }
        let shape = shape.unwrap_or_else(|| handle.get().shape.clone());
        match arena.view(py, index, &shape) {
            Ok(t) => Ok(t),
            Err(e) => {
                let mut st = arena.state()?;
                let _ = st.book.release(granted.token);
                st.live[index] = None;
                st.by_offset.remove(&granted.offset);
                Err(e)
            }
        }
    }

    /// Ends leases early: each argument is a tensor `lease` returned, or
    /// a Buffer handle. Checked mode verifies the buffer's guard bytes.
    #[pyo3(signature = (*leases))]
    fn release(&self, py: Python<'_>, leases: &Bound<'_, PyTuple>) -> PyResult<()> {
        let arena = self.arena.get();
        {
            let st = arena.state()?;
            if st.step != Some(self.token) {
                return Err(to_py(Error::StepNotOpen {
                    step: self.token.number(),
                    reason: "has ended",
                }));
            }
        }
        for x in leases.iter() {
            let index = arena.live_index(py, &x)?;
            self.release_index(py, arena, index)?;
        }
        Ok(())
    }

    /// Moves the step to `phase`, a phase of the step's mode. Phases only
    /// move forward, and every lease of a buffer whose span ends before
    /// `phase` must be released first.
    fn enter(&self, py: Python<'_>, phase: &Bound<'_, PyPhase>) -> PyResult<()> {
        let arena = self.arena.get();
        let ended = arena
            .state()?
            .book
            .enter(self.token, phase.get().phase)
            .py()?;
        if arena.checked {
            arena.poison(py, ended)?;
        }
        Ok(())
    }

    /// The current phase's name (`step` when the mode has none).
    #[getter]
    fn phase(&self) -> PyResult<String> {
        Ok(self.arena.get().state()?.book.phase().to_owned())
    }

    /// The name of the step's mode (`default` unless opened in a declared
    /// mode).
    #[getter]
    fn mode(&self) -> PyResult<String> {
        Ok(self.arena.get().state()?.book.mode_name().to_owned())
    }

    /// The step's number (0 for the first).
    #[getter]
    fn number(&self) -> u64 {
        self.token.number()
    }

    /// Whether the step is still open.
    #[getter]
    fn is_open(&self) -> PyResult<bool> {
        Ok(self.arena.get().state()?.step == Some(self.token))
    }

    /// Live leases, as buffer names.
    #[getter]
    fn live<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let arena = self.arena.get();
        let st = arena.state()?;
        let names: Vec<&str> = st
            .live
            .iter()
            .enumerate()
            .filter_map(|(i, l)| l.map(|_| arena.plan.buffers()[i].name()))
            .collect();
        PyList::new(py, names)
    }

    /// Ends the step: every lease still live ends with it. Checked mode
    /// verifies guards and poisons the step's buffers (NaN in floats).
    fn end(&self, py: Python<'_>) -> PyResult<()> {
        self.finish(py, true)
    }

    fn __enter__(slf: Py<PyStep>) -> Py<PyStep> {
        slf
    }

    #[pyo3(signature = (exc_type = None, _exc = None, _tb = None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        // With an exception on its way, guard damage is kept (see
        // Arena.take_violations) rather than raised over it.
        self.finish(py, exc_type.is_none_or(|t| t.is_none()))?;
        Ok(false)
    }

    fn __repr__(&self) -> PyResult<String> {
        Ok(format!(
            "Step(number={}, mode='{}', phase='{}', open={})",
            self.token.number(),
            self.mode()?,
            self.phase()?,
            if self.is_open()? { "True" } else { "False" }
        ))
    }
}
