//! `Planner`, `Phase`, `Buffer` and `Plan`: the Rust planner's concepts with
//! torch element types.

use std::sync::Mutex;
use std::time::Duration;

use pyo3::exceptions::{PyNotImplementedError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use tensor_arena::plan::LifetimeKind;
use tensor_arena::plan::placement::{Strategy, StrategyKind};
use tensor_arena::{
    BufferId, BufferSpec, DType, Lifetime, Phase, Plan, PlannedBuffer, Planner, PlannerConfig,
    Rounding,
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

/// A phase of a step, declared on a [`PyPlanner`] in order.
#[pyclass(name = "Phase", module = "tensor_arena._native", frozen)]
pub struct PyPhase {
    pub phase: Phase,
    /// Its name.
    #[pyo3(get)]
    pub name: String,
}

#[pymethods]
impl PyPhase {
    /// Position in declaration order.
    #[getter]
    fn index(&self) -> usize {
        self.phase.index()
    }

    fn __repr__(&self) -> String {
        format!("Phase('{}', index={})", self.name, self.phase.index())
    }
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

    /// The mode the buffer belongs to: `None` until the core has modes.
    #[getter]
    fn mode(&self) -> Option<String> {
        None
    }

    fn __repr__(&self) -> String {
        format!(
            "Buffer('{}', shape={:?}, dtype=torch.{}, lifetime={})",
            self.name,
            self.shape,
            torch_name(self.id.dtype()),
            self.lifetime
        )
    }

    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.id.hash(&mut h);
        h.finish()
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
        },
    )
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

    fn declare(
        &self,
        name: &str,
        shape: Vec<usize>,
        dtype: Option<&Bound<'_, PyAny>>,
        lifetime: Lifetime,
        rounding: Option<&str>,
        label: String,
    ) -> PyResult<PyBuffer> {
        let dtype = dtype_of(dtype)?;
        let mut spec = BufferSpec::new(name, dtype, &shape).lifetime(lifetime);
        if let Some(r) = rounding_of(rounding)? {
            spec = spec.rounding(r);
        }
        let id = self.with(|p| p.declare_dyn(spec))?.py()?;
        Ok(PyBuffer {
            id,
            name: name.to_owned(),
            shape,
            lifetime: label,
        })
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

    /// Declares the next phase of a step; phases run in declaration order.
    fn phase(&self, name: &str) -> PyResult<PyPhase> {
        let phase = self.with(|p| p.phase(name))?.py()?;
        Ok(PyPhase {
            phase,
            name: name.to_owned(),
        })
    }

    /// A buffer that lives for the whole run (weights, optimizer state);
    /// never shares bytes.
    #[pyo3(signature = (name, shape, dtype = None, *, rounding = None))]
    fn persistent(
        &self,
        name: &str,
        shape: Vec<usize>,
        dtype: Option<&Bound<'_, PyAny>>,
        rounding: Option<&str>,
    ) -> PyResult<PyBuffer> {
        self.declare(
            name,
            shape,
            dtype,
            Lifetime::Persistent,
            rounding,
            "persistent".into(),
        )
    }

    /// A buffer that lives for a whole step.
    #[pyo3(signature = (name, shape, dtype = None, *, rounding = None))]
    fn step(
        &self,
        name: &str,
        shape: Vec<usize>,
        dtype: Option<&Bound<'_, PyAny>>,
        rounding: Option<&str>,
    ) -> PyResult<PyBuffer> {
        self.declare(name, shape, dtype, Lifetime::Step, rounding, "step".into())
    }

    /// A buffer that lives from phase `first` to phase `last` (inclusive;
    /// `first` alone when `last` is omitted) within each step.
    #[pyo3(signature = (name, shape, dtype, first, last = None, *, rounding = None))]
    fn span(
        &self,
        name: &str,
        shape: Vec<usize>,
        dtype: Option<&Bound<'_, PyAny>>,
        first: &Bound<'_, PyPhase>,
        last: Option<&Bound<'_, PyPhase>>,
        rounding: Option<&str>,
    ) -> PyResult<PyBuffer> {
        let (f, fname) = phase_arg(first);
        let (l, lname) = last.map_or((f, fname.clone()), phase_arg);
        let label = if fname == lname {
            fname
        } else {
            format!("{fname}..{lname}")
        };
        self.declare(name, shape, dtype, Lifetime::span(f, l), rounding, label)
    }

    /// Modes (train / eval / generate in one slab) come with the core's
    /// modes; until then a planner has one mode.
    fn mode(&self, name: &str) -> PyResult<()> {
        Err(PyNotImplementedError::new_err(format!(
            "mode '{name}': this build's core plans one mode per slab; declare the buffers on the planner itself"
        )))
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

    /// Phase names in order.
    #[getter]
    fn phases(&self) -> Vec<String> {
        self.plan.phases().to_vec()
    }

    /// Offset alignment in bytes.
    #[getter]
    fn offset_align(&self) -> usize {
        self.plan.offset_align()
    }

    /// One dict per buffer: name, dtype, shape, padded_shape, bytes (of the
    /// padded shape), size (slab bytes of its slot), offset, lifetime,
    /// capacity (elements).
    #[getter]
    fn buffers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for b in self.plan.buffers() {
            let d = PyDict::new(py);
            d.set_item("name", b.name())?;
            d.set_item("dtype", torch_dtype(py, b.dtype())?)?;
            d.set_item("shape", b.shape().to_vec())?;
            d.set_item("padded_shape", b.padded_shape().to_vec())?;
            d.set_item("capacity", b.capacity())?;
            d.set_item("bytes", b.bytes())?;
            d.set_item("size", b.size())?;
            d.set_item("offset", b.offset())?;
            d.set_item("lifetime", lifetime_label(&self.plan, b))?;
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
