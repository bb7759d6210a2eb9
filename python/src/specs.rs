//! `SpecSet`: the Rust crate's spec files (TOML, version 2 with modes;
//! version 1 still loads), read and written by the Rust code so that a file
//! written by one side loads in the other.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use tensor_arena::plan::DEFAULT_MODE;
use tensor_arena::record::{SpecEntry, SpecLifetime, SpecMode, SpecSet};
use tensor_arena::{BufferId, Rounding};

use crate::errors::IntoPy;
use crate::planner::{
    PyBuffer, PyPhase, PyPlanner, dtype_of, name_key, shape_rule_of, torch_dtype,
};

/// Buffer specs that stand on their own: modes and phases by name, buffers
/// with lifetimes (`tensor_arena::record::SpecSet`).
#[pyclass(name = "SpecSet", module = "tensor_arena._native", frozen)]
pub struct PySpecSet {
    pub specs: SpecSet,
}

fn lifetime_of(phases: &[String], value: &Bound<'_, PyAny>, name: &str) -> PyResult<SpecLifetime> {
    let index = |p: &str| {
        phases.iter().position(|x| x == p).ok_or_else(|| {
            PyValueError::new_err(format!(
                "buffer '{name}': phase '{p}' is not one of {phases:?}"
            ))
        })
    };
    if let Ok(text) = value.extract::<String>() {
        return match text.as_str() {
            "persistent" => Ok(SpecLifetime::Persistent),
            "step" => Ok(SpecLifetime::Step),
            p => {
                let i = index(p)?;
                Ok(SpecLifetime::Phases { first: i, last: i })
            }
        };
    }
    let pair: Vec<String> = value.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "buffer '{name}': lifetime must be 'persistent', 'step', a phase name or [first, last]"
        ))
    })?;
    match pair.as_slice() {
        [one] => {
            let i = index(one)?;
            Ok(SpecLifetime::Phases { first: i, last: i })
        }
        [first, last] => Ok(SpecLifetime::Phases {
            first: index(first)?,
            last: index(last)?,
        }),
        _ => Err(PyValueError::new_err(format!(
            "buffer '{name}': a phase span has one or two phases, got {pair:?}"
        ))),
    }
}

fn lifetime_value<'py>(
    py: Python<'py>,
    phases: &[String],
    l: SpecLifetime,
) -> PyResult<Bound<'py, PyAny>> {
    let name = |i: usize| phases.get(i).cloned().unwrap_or_default();
    Ok(match l {
        SpecLifetime::Persistent => "persistent".into_pyobject(py)?.into_any(),
        SpecLifetime::Step => "step".into_pyobject(py)?.into_any(),
        SpecLifetime::Phases { first, last } => {
            PyTuple::new(py, [name(first), name(last)])?.into_any()
        }
    })
}

/// Declared modes from `{name: phases}` or `[(name, phases), ...]`.
fn modes_of(value: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<SpecMode>> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(Vec::new());
    };
    let pairs: Vec<(String, Vec<String>)> = match value.cast::<PyDict>() {
        Ok(d) => d
            .iter()
            .map(|(k, v)| Ok((k.extract()?, v.extract()?)))
            .collect::<PyResult<_>>()?,
        Err(_) => value.extract().map_err(|_| {
            PyTypeError::new_err(
                "modes must be a dict {name: [phases]} or a list of (name, [phases]) pairs",
            )
        })?,
    };
    Ok(pairs
        .into_iter()
        .map(|(name, phases)| SpecMode { name, phases })
        .collect())
}

#[pymethods]
impl PySpecSet {
    /// A set from `phases` (the default mode's names, in order), `buffers`,
    /// dicts with `name`, `dtype`, `shape`, `lifetime` (`"persistent"`,
    /// `"step"`, a phase name of the buffer's mode or `(first, last)`), and
    /// optionally `mode` (a declared mode's name; absent or `None`: the
    /// default mode), `shape_rule` (`"elements"` or `"dims"`), `rounding`
    /// and `recorded_steps`; and `modes`, the declared modes and their
    /// phases (`{name: [phases]}` or `[(name, [phases]), ...]`). Checked as
    /// the Rust `SpecSet::with_modes` checks it.
    #[new]
    #[pyo3(signature = (phases, buffers, modes = None))]
    fn new(
        phases: Vec<String>,
        buffers: &Bound<'_, PyList>,
        modes: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PySpecSet> {
        let modes = modes_of(modes)?;
        let mut entries = Vec::with_capacity(buffers.len());
        for item in buffers.iter() {
            let d = item.cast::<PyDict>().map_err(|_| {
                PyTypeError::new_err("each buffer is a dict with name, dtype, shape and lifetime")
            })?;
            let get = |key: &str| -> PyResult<Bound<'_, PyAny>> {
                d.get_item(key)?
                    .ok_or_else(|| PyValueError::new_err(format!("a buffer has no '{key}'")))
            };
            let optional = |key: &str| -> PyResult<Option<Bound<'_, PyAny>>> {
                Ok(d.get_item(key)?.filter(|v| !v.is_none()))
            };
            let name: String = get("name")?.extract()?;
            let dtype = dtype_of(Some(&get("dtype")?))?;
            let shape: Vec<usize> = get("shape")?.extract()?;
            let mode = match optional("mode")? {
                Some(m) => Some(m.extract::<String>()?).filter(|m| m != DEFAULT_MODE),
                None => None,
            };
            let mode_phases = match &mode {
                None => phases.as_slice(),
                Some(m) => modes
                    .iter()
                    .find(|x| &x.name == m)
                    .map(|x| x.phases.as_slice())
                    .ok_or_else(|| {
                        PyValueError::new_err(format!(
                            "buffer '{name}': mode '{m}' is not one of the declared modes"
                        ))
                    })?,
            };
            let lifetime = lifetime_of(mode_phases, &get("lifetime")?, &name)?;
            let rounding = match optional("rounding")? {
                Some(r) => {
                    let text: String = r.extract()?;
                    Some(Rounding::from_name(&text).ok_or_else(|| {
                        PyValueError::new_err(format!(
                            "buffer '{name}': rounding '{text}' is unknown"
                        ))
                    })?)
                }
                None => None,
            };
            let shape_rule = match optional("shape_rule")? {
                Some(r) => shape_rule_of(Some(&r.extract::<String>()?))?,
                None => shape_rule_of(None)?,
            };
            let recorded_steps = match optional("recorded_steps")? {
                Some(r) => Some(r.extract::<u64>()?),
                None => None,
            };
            entries.push(SpecEntry {
                name,
                dtype,
                shape,
                lifetime,
                mode,
                shape_rule,
                rounding,
                recorded_steps,
            });
        }
        Ok(PySpecSet {
            specs: SpecSet::with_modes(phases, modes, entries).py()?,
        })
    }

    /// Reads a spec file (version 1 or 2).
    #[staticmethod]
    fn load(path: std::path::PathBuf) -> PyResult<PySpecSet> {
        Ok(PySpecSet {
            specs: SpecSet::load(path).py()?,
        })
    }

    /// Parses spec-file text.
    #[staticmethod]
    fn from_toml(text: &str) -> PyResult<PySpecSet> {
        Ok(PySpecSet {
            specs: SpecSet::from_toml(text).py()?,
        })
    }

    /// The spec file's text (version 2).
    fn to_toml(&self) -> PyResult<String> {
        self.specs.to_toml().py()
    }

    /// Writes the spec file.
    fn save(&self, path: std::path::PathBuf) -> PyResult<()> {
        self.specs.save(path).py()
    }

    /// Rust declarations of the same buffers, to paste into a startup
    /// function.
    fn to_rust(&self) -> String {
        self.specs.to_rust()
    }

    /// Phase names of the default mode, in order.
    #[getter]
    fn phases(&self) -> Vec<String> {
        self.specs.phases().to_vec()
    }

    /// The declared modes (besides the default one): `{name: [phases]}`,
    /// in declaration order.
    #[getter]
    fn modes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for m in self.specs.modes() {
            d.set_item(&m.name, m.phases.clone())?;
        }
        Ok(d)
    }

    /// The buffers as dicts (the keys `SpecSet(...)` takes; `mode` is
    /// `None` for the default mode and for persistent buffers).
    #[getter]
    fn buffers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for b in self.specs.buffers() {
            let d = PyDict::new(py);
            let phases = self.specs.phases_of(b.mode.as_deref()).unwrap_or(&[]);
            d.set_item("name", &b.name)?;
            d.set_item("mode", b.mode.as_deref())?;
            d.set_item("dtype", torch_dtype(py, b.dtype)?)?;
            d.set_item("shape", b.shape.clone())?;
            d.set_item("lifetime", lifetime_value(py, phases, b.lifetime)?)?;
            d.set_item("shape_rule", b.shape_rule.name())?;
            d.set_item("rounding", b.rounding.map(|r| r.name()))?;
            d.set_item("recorded_steps", b.recorded_steps)?;
            list.append(d)?;
        }
        Ok(list)
    }

    /// Declares the modes, phases and buffers on `planner` (once, at
    /// startup) and returns `(phases, buffers)`: dicts of handles, keyed by
    /// name in the default mode (and for persistent buffers), by `(mode,
    /// name)` in a declared mode.
    fn declare_on<'py>(
        &self,
        py: Python<'py>,
        planner: &Bound<'_, PyPlanner>,
    ) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyDict>)> {
        let declared = planner.get().with(|p| self.specs.declare_on(p))?.py()?;
        let phases = PyDict::new(py);
        let lists = std::iter::once((None, self.specs.phases())).chain(
            self.specs
                .modes()
                .iter()
                .map(|m| (Some(m.name.as_str()), m.phases.as_slice())),
        );
        for (mode, list) in lists {
            for name in list {
                let phase = declared.phase_in(mode, name).py()?;
                let handle = PyPhase {
                    phase,
                    name: name.clone(),
                    mode: mode.unwrap_or(DEFAULT_MODE).to_owned(),
                };
                phases.set_item(name_key(py, mode, name)?, handle)?;
            }
        }
        let buffers = PyDict::new(py);
        let ids: Vec<BufferId> = declared.ids().collect();
        for (b, id) in self.specs.buffers().iter().zip(ids) {
            let persistent = b.lifetime == SpecLifetime::Persistent;
            let mode = match persistent {
                true => None,
                false => Some(b.mode.as_deref().unwrap_or(DEFAULT_MODE)),
            };
            let handle = PyBuffer {
                id,
                name: b.name.clone(),
                shape: b.shape.clone(),
                lifetime: self.specs.entry_lifetime_label(b),
                mode: mode.map(str::to_owned),
                rule: b.shape_rule,
            };
            buffers.set_item(name_key(py, mode, &b.name)?, handle)?;
        }
        Ok((phases, buffers))
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<PySpecSet>()
            .is_ok_and(|o| o.get().specs == self.specs)
    }

    fn __repr__(&self) -> String {
        let modes: Vec<&str> = self.specs.modes().iter().map(|m| m.name.as_str()).collect();
        format!(
            "SpecSet(phases={:?}, modes={:?}, buffers={})",
            self.specs.phases(),
            modes,
            self.specs.buffers().len()
        )
    }
}
