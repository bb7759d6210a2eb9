//! `Planner`, `Phase`, `Buffer` and `Plan`: the Rust planner's concepts with
//! torch element types.

use std::sync::Mutex;
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use tensor_arena::plan::DEFAULT_MODE;
use tensor_arena::plan::LifetimeKind;
use tensor_arena::plan::placement::{Strategy, StrategyKind};
use tensor_arena::{
    BufferId, BufferSpec, DType, Lifetime, Mode, Phase, Plan, PlannedBuffer, Planner,
    PlannerConfig, Rounding, ShapeRule,
};

use crate::errors::IntoPy;

/// The element type of a torch dtype (`torch.float32`) or a name (`"f32"`,
/// `"float32"`); `None` is `float32`.
pub fn dtype_of(obj: Option<&Bound<'_, PyAny>>) -> PyResult<DType> {
    let Some(obj) = obj else {
        return Ok(DType::F32);
    };
    let text = obj.str()?.to_string();
    let name = text.strip_prefix("torch.").unwrap_or(&text);
    let dtype = match name {
        "float32" | "float" | "f32" => DType::F32,
        "float16" | "half" | "f16" => DType::F16,
        "bfloat16" | "bf16" => DType::BF16,
        "int32" | "int" | "i32" => DType::I32,
        "uint8" | "u8" => DType::U8,
        _ => {
            return Err(PyTypeError::new_err(format!(
                "element type {text} is not supported: use torch.float32, torch.float16, torch.bfloat16, torch.int32 or torch.uint8"
            )));
        }
    };
    Ok(dtype)
}

/// The torch name of an element type (`torch.<name>`).
pub fn torch_name(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "float32",
        DType::F16 => "float16",
        DType::BF16 => "bfloat16",
        DType::I32 => "int32",
        DType::U8 => "uint8",
    }
}

/// The torch dtype object of an element type.
pub fn torch_dtype<'py>(py: Python<'py>, dtype: DType) -> PyResult<Bound<'py, PyAny>> {
    py.import("torch")?.getattr(torch_name(dtype))
}

fn rounding_of(name: Option<&str>) -> PyResult<Option<Rounding>> {
    name.map(|n| {
        Rounding::from_name(n).ok_or_else(|| {
            PyValueError::new_err(format!(
                "rounding '{n}' is unknown: use none, inner16, inner32, tile16 or tile32"
            ))
        })
    })
    .transpose()
}

/// A shape rule by name (`elements`, `dims`); `None` is the default
/// (element count).
pub fn shape_rule_of(name: Option<&str>) -> PyResult<ShapeRule> {
    match name {
        None => Ok(ShapeRule::Elements),
        Some(n) => ShapeRule::from_name(n).ok_or_else(|| {
            PyValueError::new_err(format!(
                "shape_rule '{n}' is unknown: use 'elements' (the default: a view fits when its element count fits) or 'dims' (also no dimension beyond the declared one)"
            ))
        }),
    }
}

/// How Python finds a buffer or phase by name where modes may repeat
/// names: the name itself in the default mode (and for persistent
/// buffers), `(mode, name)` in a declared mode.
pub fn name_key<'py>(
    py: Python<'py>,
    mode: Option<&str>,
    name: &str,
) -> PyResult<Bound<'py, PyAny>> {
    match mode {
        Some(m) if m != DEFAULT_MODE => Ok(PyTuple::new(py, [m, name])?.into_any()),
        _ => Ok(name.into_pyobject(py)?.into_any()),
    }
}

/// A phase of a step, declared on a [`PyPlanner`] in order.
#[pyclass(name = "Phase", module = "tensor_arena._native", frozen)]
pub struct PyPhase {
    pub phase: Phase,
    /// Its name.
    #[pyo3(get)]
    pub name: String,
    /// The name of its mode (`default` unless declared on a mode).
    #[pyo3(get)]
    pub mode: String,
}

#[pymethods]
impl PyPhase {
    /// Position in its mode, in declaration order.
    #[getter]
    fn index(&self) -> usize {
        self.phase.index()
    }

    fn __repr__(&self) -> String {
        format!(
            "Phase('{}', index={}, mode='{}')",
            self.name,
            self.phase.index(),
            self.mode
        )
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<PyPhase>()
            .is_ok_and(|o| o.get().phase == self.phase)
    }

    fn __hash__(&self) -> u64 {
        hash_of(&self.phase)
    }
}

fn hash_of(value: &impl std::hash::Hash) -> u64 {
    use std::hash::Hasher;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

/// A declared buffer: the handle `Step.lease` takes.
#[pyclass(name = "Buffer", module = "tensor_arena._native", frozen)]
pub struct PyBuffer {
    pub id: BufferId,
    /// Its name.
    #[pyo3(get)]
    pub name: String,
    /// The declared (largest) shape.
    pub shape: Vec<usize>,
    /// `persistent`, `step` or the phase span `first..last`.
    #[pyo3(get)]
    pub lifetime: String,
    /// The name of its mode; `None` for a persistent buffer (every mode's).
    #[pyo3(get)]
    pub mode: Option<String>,
    /// `elements` (a view fits when its element count fits) or `dims`
    /// (also no dimension beyond the declared one).
    pub rule: ShapeRule,
}

#[pymethods]
impl PyBuffer {
    /// The declared (largest) shape.
    #[getter]
    fn shape(&self) -> Vec<usize> {
        self.shape.clone()
    }

    /// The torch dtype.
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        torch_dtype(py, self.id.dtype())
    }

    /// Position in declaration order.
    #[getter]
    fn index(&self) -> usize {
        self.id.index()
    }

    /// The shape rule its views are checked by: `elements` or `dims`.
    #[getter]
    fn shape_rule(&self) -> &'static str {
        self.rule.name()
    }

    fn __repr__(&self) -> String {
        let mode = match &self.mode {
            Some(m) if m != DEFAULT_MODE => format!(", mode='{m}'"),
            _ => String::new(),
        };
        format!(
            "Buffer('{}', shape={:?}, dtype=torch.{}, lifetime={}{mode})",
            self.name,
            self.shape,
            torch_name(self.id.dtype()),
            self.lifetime
        )
    }

    fn __hash__(&self) -> u64 {
        hash_of(&self.id)
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<PyBuffer>()
            .is_ok_and(|o| o.get().id == self.id)
    }
}

pub fn buffer_handle(
    py: Python<'_>,
    id: BufferId,
    planned: &PlannedBuffer,
    plan: &Plan,
) -> PyResult<Py<PyBuffer>> {
    Py::new(
        py,
        PyBuffer {
            id,
            name: planned.name().to_owned(),
            shape: planned.shape().to_vec(),
            lifetime: lifetime_label(plan, planned),
            mode: mode_of(plan, planned).map(str::to_owned),
            rule: planned.shape_rule(),
        },
    )
}

/// The name of a planned buffer's mode; `None` for a persistent buffer.
pub fn mode_of<'p>(plan: &'p Plan, b: &PlannedBuffer) -> Option<&'p str> {
    b.mode()
        .map(|m| plan.modes().get(m).map_or(DEFAULT_MODE, |m| m.name()))
}

pub fn lifetime_label(plan: &Plan, b: &PlannedBuffer) -> String {
    match b.lifetime() {
        LifetimeKind::Persistent => "persistent".to_owned(),
        LifetimeKind::Step => "step".to_owned(),
        LifetimeKind::Phases => {
            let (first, last) = b.phases();
            if first == last {
                plan.phase_name(first).to_owned()
            } else {
                format!("{}..{}", plan.phase_name(first), plan.phase_name(last))
            }
        }
    }
}

/// Collects phases and buffer specs, then plans one slab
/// (`tensor_arena::Planner`).
#[pyclass(name = "Planner", module = "tensor_arena._native", frozen)]
pub struct PyPlanner {
    pub inner: Mutex<Planner>,
}

impl PyPlanner {
    pub fn with<R>(&self, f: impl FnOnce(&mut Planner) -> R) -> PyResult<R> {
        let mut guard = self
            .inner
            .lock()
            .map_err(|_| PyRuntimeError::new_err("the planner's lock is poisoned"))?;
        Ok(f(&mut guard))
    }

    #[allow(clippy::too_many_arguments)]
    fn declare(
        &self,
        name: &str,
        shape: Vec<usize>,
        dtype: Option<&Bound<'_, PyAny>>,
        lifetime: Lifetime,
        mode: Option<(Mode, String)>,
        options: (Option<&str>, Option<&str>),
        label: String,
    ) -> PyResult<PyBuffer> {
        let dtype = dtype_of(dtype)?;
        let (rounding, rule) = options;
        let rule = shape_rule_of(rule)?;
        let mut spec = BufferSpec::new(name, dtype, &shape)
            .lifetime(lifetime)
            .shape_rule(rule);
        if let Some(r) = rounding_of(rounding)? {
            spec = spec.rounding(r);
        }
        let mode_name = match (&lifetime, mode) {
            (Lifetime::Persistent, _) => None,
            (_, Some((m, n))) => {
                spec = spec.mode(m);
                Some(n)
            }
            (_, None) => Some(DEFAULT_MODE.to_owned()),
        };
        let id = self.with(|p| p.declare_dyn(spec))?.py()?;
        Ok(PyBuffer {
            id,
            name: name.to_owned(),
            shape,
            lifetime: label,
            mode: mode_name,
            rule,
        })
    }

    /// Declares the next phase of `mode`.
    fn phase_in(&self, mode: Mode, mode_name: &str, name: &str) -> PyResult<PyPhase> {
        let phase = self.with(|p| p.phase_in(mode, name))?.py()?;
        Ok(PyPhase {
            phase,
            name: name.to_owned(),
            mode: mode_name.to_owned(),
        })
    }

    /// A span from `first` to `last` (`first` alone when omitted), in the
    /// mode of its phases (`mode`, if given, must be theirs).
    #[allow(clippy::too_many_arguments)]
    fn declare_span(
        &self,
        name: &str,
        shape: Vec<usize>,
        dtype: Option<&Bound<'_, PyAny>>,
        (first, last): (&Bound<'_, PyPhase>, Option<&Bound<'_, PyPhase>>),
        mode: Option<(Mode, String)>,
        options: (Option<&str>, Option<&str>),
    ) -> PyResult<PyBuffer> {
        let (f, fname) = phase_arg(first);
        let (l, lname) = last.map_or((f, fname.clone()), phase_arg);
        let label = if fname == lname {
            fname
        } else {
            format!("{fname}..{lname}")
        };
        // Without a mode handle, the phases' mode; the core checks that
        // both phases (and a given mode) agree.
        let mode = mode.or_else(|| Some((f.mode(), first.get().mode.clone())));
        let lifetime = Lifetime::span(f, l);
        self.declare(name, shape, dtype, lifetime, mode, options, label)
    }
}

fn phase_arg(phase: &Bound<'_, PyPhase>) -> (Phase, String) {
    let p = phase.get();
    (p.phase, p.name.clone())
}

#[pymethods]
impl PyPlanner {
    /// A planner: `offset_align` bytes between buffer offsets (a power of
    /// two, at least 64; 512 by default, torch_npu's block rounding),
    /// `rounding` for specs that choose none (`inner16` by default), and the
    /// placement `strategy` (`auto`, `greedy`, `best`, `search`) with an
    /// optional `capacity` in bytes and a search `time_limit` in seconds.
    #[new]
    #[pyo3(signature = (*, offset_align = 512, rounding = "inner16", strategy = "auto", capacity = None, time_limit = None))]
    fn new(
        offset_align: usize,
        rounding: &str,
        strategy: &str,
        capacity: Option<usize>,
        time_limit: Option<f64>,
    ) -> PyResult<PyPlanner> {
        let kind: StrategyKind = strategy.parse().map_err(PyValueError::new_err)?;
        let mut strategy = match kind {
            StrategyKind::Greedy => Strategy::greedy(),
            StrategyKind::Best => Strategy::best(),
            StrategyKind::Search => Strategy::search(),
            StrategyKind::Auto => Strategy::auto(),
        };
        if let Some(c) = capacity {
            strategy = strategy.with_capacity(c);
        }
        if let Some(t) = time_limit {
            let limit = Duration::try_from_secs_f64(t).map_err(|_| {
                PyValueError::new_err(format!("time_limit = {t} is not a duration in seconds"))
            })?;
            strategy = strategy.with_time_limit(limit);
        }
        let config = PlannerConfig {
            offset_align,
            default_rounding: rounding_of(Some(rounding))?.unwrap_or_default(),
            strategy,
        };
        Ok(PyPlanner {
            inner: Mutex::new(Planner::with_config(config).py()?),
        })
    }

    /// Declares the next phase of a step of the default mode; phases run
    /// in declaration order.
    fn phase(&self, name: &str) -> PyResult<PyPhase> {
        let mode = self.with(|p| p.default_mode())?;
        self.phase_in(mode, DEFAULT_MODE, name)
    }

    /// A buffer that lives for the whole run (weights, optimizer state),
    /// shared by every mode; never shares bytes.
    #[pyo3(signature = (name, shape, dtype = None, *, rounding = None, shape_rule = None))]
    fn persistent(
        &self,
        name: &str,
        shape: Vec<usize>,
        dtype: Option<&Bound<'_, PyAny>>,
        rounding: Option<&str>,
        shape_rule: Option<&str>,
    ) -> PyResult<PyBuffer> {
        let options = (rounding, shape_rule);
        let label = "persistent".to_owned();
        self.declare(
            name,
            shape,
            dtype,
            Lifetime::Persistent,
            None,
            options,
            label,
        )
    }

    /// A buffer that lives for a whole step of the default mode.
    /// `shape_rule="dims"` opts in to per-dimension limits.
    #[pyo3(signature = (name, shape, dtype = None, *, rounding = None, shape_rule = None))]
    fn step(
        &self,
        name: &str,
        shape: Vec<usize>,
        dtype: Option<&Bound<'_, PyAny>>,
        rounding: Option<&str>,
        shape_rule: Option<&str>,
    ) -> PyResult<PyBuffer> {
        let options = (rounding, shape_rule);
        let label = "step".to_owned();
        self.declare(name, shape, dtype, Lifetime::Step, None, options, label)
    }

    /// A buffer that lives from phase `first` to phase `last` (inclusive;
    /// `first` alone when `last` is omitted) within each step of their
    /// mode.
    #[pyo3(signature = (name, shape, dtype, first, last = None, *, rounding = None, shape_rule = None))]
    #[allow(clippy::too_many_arguments)]
    fn span(
        &self,
        name: &str,
        shape: Vec<usize>,
        dtype: Option<&Bound<'_, PyAny>>,
        first: &Bound<'_, PyPhase>,
        last: Option<&Bound<'_, PyPhase>>,
        rounding: Option<&str>,
        shape_rule: Option<&str>,
    ) -> PyResult<PyBuffer> {
        let options = (rounding, shape_rule);
        self.declare_span(name, shape, dtype, (first, last), None, options)
    }

    /// Declares a mode (`train`, `eval`, `generate`): a kind of step with
    /// its own phases and step-scoped buffers, declared through the
    /// returned handle (`mode.phase`, `mode.step`, `mode.span`); persistent
    /// buffers belong to every mode. Step-scoped buffers of different modes
    /// share slab bytes (a step runs in one mode): the slab is the
    /// persistent buffers plus the largest mode.
    fn mode(slf: &Bound<'_, PyPlanner>, name: &str) -> PyResult<PyMode> {
        let mode = slf.get().with(|p| p.mode(name))?.py()?;
        Ok(PyMode {
            planner: slf.clone().unbind(),
            mode,
            name: name.to_owned(),
        })
    }

    /// The default mode: the one `phase`, `step` and `Arena.step()` use.
    #[getter]
    fn default_mode(slf: &Bound<'_, PyPlanner>) -> PyResult<PyMode> {
        let mode = slf.get().with(|p| p.default_mode())?;
        Ok(PyMode {
            planner: slf.clone().unbind(),
            mode,
            name: DEFAULT_MODE.to_owned(),
        })
    }

    /// Buffers declared so far.
    fn __len__(&self) -> PyResult<usize> {
        self.with(|p| p.len())
    }

    /// Places every buffer in one slab. Runs with the GIL held: releasing
    /// it while the planner's lock is held could deadlock against a thread
    /// that holds the GIL and waits for the lock.
    fn plan(&self) -> PyResult<PyPlan> {
        let plan = self.with(|p| p.plan())?.py()?;
        Ok(PyPlan { plan })
    }
}

/// A mode of a [`PyPlanner`]: declares its phases and step-scoped buffers.
#[pyclass(name = "Mode", module = "tensor_arena._native", frozen)]
pub struct PyMode {
    planner: Py<PyPlanner>,
    pub mode: Mode,
    /// Its name.
    #[pyo3(get)]
    pub name: String,
}

impl PyMode {
    fn handle(&self) -> Option<(Mode, String)> {
        Some((self.mode, self.name.clone()))
    }
}

#[pymethods]
impl PyMode {
    /// Position in declaration order (the default mode is 0).
    #[getter]
    fn index(&self) -> usize {
        self.mode.index()
    }

    /// Declares the next phase of a step of this mode.
    fn phase(&self, name: &str) -> PyResult<PyPhase> {
        self.planner.get().phase_in(self.mode, &self.name, name)
    }

    /// A buffer that lives for a whole step of this mode.
    #[pyo3(signature = (name, shape, dtype = None, *, rounding = None, shape_rule = None))]
    fn step(
        &self,
        name: &str,
        shape: Vec<usize>,
        dtype: Option<&Bound<'_, PyAny>>,
        rounding: Option<&str>,
        shape_rule: Option<&str>,
    ) -> PyResult<PyBuffer> {
        let options = (rounding, shape_rule);
        let (planner, label) = (self.planner.get(), "step".to_owned());
        planner.declare(
            name,
            shape,
            dtype,
            Lifetime::Step,
            self.handle(),
            options,
            label,
        )
    }

    /// A buffer that lives in phases `first..=last` of this mode (phases of
    /// another mode: `ModeError`, `PhaseOfAnotherMode`).
    #[pyo3(signature = (name, shape, dtype, first, last = None, *, rounding = None, shape_rule = None))]
    #[allow(clippy::too_many_arguments)]
    fn span(
        &self,
        name: &str,
        shape: Vec<usize>,
        dtype: Option<&Bound<'_, PyAny>>,
        first: &Bound<'_, PyPhase>,
        last: Option<&Bound<'_, PyPhase>>,
        rounding: Option<&str>,
        shape_rule: Option<&str>,
    ) -> PyResult<PyBuffer> {
        let options = (rounding, shape_rule);
        let planner = self.planner.get();
        planner.declare_span(name, shape, dtype, (first, last), self.handle(), options)
    }

    fn __repr__(&self) -> String {
        format!("Mode('{}', index={})", self.name, self.mode.index())
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<PyMode>()
            .is_ok_and(|o| o.get().mode == self.mode)
    }

    fn __hash__(&self) -> u64 {
        hash_of(&self.mode)
    }
}

/// A placement: padded shape, bytes, offset and lifetime per buffer, in one
/// slab (`tensor_arena::Plan`).
#[pyclass(name = "Plan", module = "tensor_arena._native", frozen)]
pub struct PyPlan {
    pub plan: Plan,
}

#[pymethods]
impl PyPlan {
    /// Bytes of the slab.
    #[getter]
    fn slab_bytes(&self) -> usize {
        self.plan.slab_bytes()
    }

    /// The largest total of slot bytes alive at once: no placement is smaller.
    #[getter]
    fn lower_bound(&self) -> usize {
        self.plan.lower_bound()
    }

    /// Phase names of the default mode, in order.
    #[getter]
    fn phases(&self) -> Vec<String> {
        self.plan.phases().to_vec()
    }

    /// One dict per mode, the default one first: name, phases, footprint
    /// (the slab bytes a step of the mode touches), lower_bound (persistent
    /// bytes plus its largest total of step-scoped bytes alive at once),
    /// buffers (its step-scoped buffers), unused (the default mode of a
    /// planner that declared modes of its own and put nothing in it).
    #[getter]
    fn modes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for m in self.plan.modes() {
            let d = PyDict::new(py);
            d.set_item("name", m.name())?;
            d.set_item("phases", m.phases().to_vec())?;
            d.set_item("footprint", m.footprint())?;
            d.set_item("lower_bound", m.lower_bound())?;
            d.set_item("buffers", m.buffers())?;
            d.set_item("unused", m.is_unused())?;
            list.append(d)?;
        }
        Ok(list)
    }

    /// Offset alignment in bytes.
    #[getter]
    fn offset_align(&self) -> usize {
        self.plan.offset_align()
    }

    /// One dict per buffer: name, mode (`None` for a persistent buffer),
    /// dtype, shape, padded_shape, bytes (of the padded shape), size (slab
    /// bytes of its slot), offset, lifetime, capacity (elements),
    /// shape_rule (`elements` or `dims`).
    #[getter]
    fn buffers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for b in self.plan.buffers() {
            let d = PyDict::new(py);
            d.set_item("name", b.name())?;
            d.set_item("mode", mode_of(&self.plan, b))?;
            d.set_item("dtype", torch_dtype(py, b.dtype())?)?;
            d.set_item("shape", b.shape().to_vec())?;
            d.set_item("padded_shape", b.padded_shape().to_vec())?;
            d.set_item("capacity", b.capacity())?;
            d.set_item("bytes", b.bytes())?;
            d.set_item("size", b.size())?;
            d.set_item("offset", b.offset())?;
            d.set_item("lifetime", lifetime_label(&self.plan, b))?;
            d.set_item("shape_rule", b.shape_rule().name())?;
            list.append(d)?;
        }
        Ok(list)
    }

    /// The plan's serde report (`Plan::report()`), as a dict.
    fn report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let text = serde_json::to_string(&self.plan.report())
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        py.import("json")?.call_method1("loads", (text,))
    }

    fn __str__(&self) -> String {
        self.plan.to_string()
    }

    fn __repr__(&self) -> String {
        format!(
            "Plan({} buffers, slab_bytes={}, lower_bound={})",
            self.plan.buffers().len(),
            self.plan.slab_bytes(),
            self.plan.lower_bound()
        )
    }

    /// Makes the slab, `torch.empty(slab_bytes, dtype=torch.uint8,
    /// device=device)` (or takes `slab`, a contiguous uint8 tensor of at
    /// least `slab_bytes`), and returns the arena that leases views of it.
    /// `checked=True` (or the environment's `TENSOR_ARENA_CHECKED=1`) turns
    /// on guard bytes and poisoning.
    #[pyo3(signature = (device = None, *, checked = None, slab = None))]
    fn reserve(
        &self,
        py: Python<'_>,
        device: Option<&Bound<'_, PyAny>>,
        checked: Option<bool>,
        slab: Option<Bound<'_, PyAny>>,
    ) -> PyResult<crate::arena::PyArena> {
        crate::arena::PyArena::reserve(py, self.plan.clone(), device, checked, slab)
    }
}
