//! `SpecSet`: the Rust crate's spec files (TOML), read and written by the
//! Rust code so that a file written by one side loads in the other.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use tensor_arena::record::{SpecEntry, SpecLifetime, SpecSet};
use tensor_arena::{BufferId, Rounding};

use crate::errors::IntoPy;
use crate::planner::{PyBuffer, PyPhase, PyPlanner, dtype_of, torch_dtype};

/// Buffer specs that stand on their own: phases by name, buffers with
/// lifetimes (`tensor_arena::record::SpecSet`).
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

#[pymethods]
impl PySpecSet {
    /// A set from `phases` (names in order) and `buffers`, dicts with
    /// `name`, `dtype`, `shape`, `lifetime` (`"persistent"`, `"step"`, a
    /// phase name or `(first, last)`), and optionally `rounding` and
    /// `recorded_steps`. Checked as the Rust `SpecSet::new` checks it.
    #[new]
    fn new(phases: Vec<String>, buffers: &Bound<'_, PyList>) -> PyResult<PySpecSet> {
        let mut entries = Vec::with_capacity(buffers.len());
        for item in buffers.iter() {
            let d = item.cast::<PyDict>().map_err(|_| {
                PyTypeError::new_err("each buffer is a dict with name, dtype, shape and lifetime")
            })?;
            let get = |key: &str| -> PyResult<Bound<'_, PyAny>> {
                d.get_item(key)?
                    .ok_or_else(|| PyValueError::new_err(format!("a buffer has no '{key}'")))
            };
            let name: String = get("name")?.extract()?;
            let dtype = dtype_of(Some(&get("dtype")?))?;
            let shape: Vec<usize> = get("shape")?.extract()?;
            let lifetime = lifetime_of(&phases, &get("lifetime")?, &name)?;
            let rounding = match d.get_item("rounding")? {
                Some(r) if !r.is_none() => {
                    let text: String = r.extract()?;
                    Some(Rounding::from_name(&text).ok_or_else(|| {
                        PyValueError::new_err(format!(
                            "buffer '{name}': rounding '{text}' is unknown"
                        ))
                    })?)
                }
                _ => None,
            };
            let recorded_steps = match d.get_item("recorded_steps")? {
                Some(r) if !r.is_none() => Some(r.extract::<u64>()?),
                _ => None,
            };
            entries.push(SpecEntry {
                name,
                dtype,
                shape,
                lifetime,
                rounding,
                recorded_steps,
            });
        }
        Ok(PySpecSet {
            specs: SpecSet::new(phases, entries).py()?,
        })
    }

    /// Reads a spec file.
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

    /// The spec file's text.
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

    /// Phase names in order.
    #[getter]
    fn phases(&self) -> Vec<String> {
        self.specs.phases().to_vec()
    }

    /// The buffers as dicts (the keys `SpecSet(...)` takes).
    #[getter]
    fn buffers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for b in self.specs.buffers() {
            let d = PyDict::new(py);
            d.set_item("name", &b.name)?;
            d.set_item("dtype", torch_dtype(py, b.dtype)?)?;
            d.set_item("shape", b.shape.clone())?;
            d.set_item(
                "lifetime",
                lifetime_value(py, self.specs.phases(), b.lifetime)?,
            )?;
            d.set_item("rounding", b.rounding.map(|r| r.name()))?;
            d.set_item("recorded_steps", b.recorded_steps)?;
            list.append(d)?;
        }
        Ok(list)
    }

    /// Declares the phases and buffers on `planner` (once, at startup) and
    /// returns `(phases, buffers)`: dicts of handles by name.
    fn declare_on<'py>(
        &self,
        py: Python<'py>,
        planner: &Bound<'_, PyPlanner>,
    ) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyDict>)> {
        let declared = planner.get().with(|p| self.specs.declare_on(p))?.py()?;
        let phases = PyDict::new(py);
        for name in self.specs.phases() {
            let phase = declared.phase(name).py()?;
            phases.set_item(
                name,
                PyPhase {
                    phase,
                    name: name.clone(),
                },
            )?;
        }
        let buffers = PyDict::new(py);
        let ids: Vec<BufferId> = declared.ids().collect();
        for (b, id) in self.specs.buffers().iter().zip(ids) {
            let lifetime = match b.lifetime {
                SpecLifetime::Persistent => "persistent".to_owned(),
                other => self.specs.lifetime_label(other),
            };
            buffers.set_item(
                &b.name,
                PyBuffer {
                    id,
                    name: b.name.clone(),
                    shape: b.shape.clone(),
                    lifetime,
                },
            )?;
        }
        Ok((phases, buffers))
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<PySpecSet>()
            .is_ok_and(|o| o.get().specs == self.specs)
    }

    fn __repr__(&self) -> String {
        format!(
            "SpecSet(phases={:?}, buffers={})",
            self.specs.phases(),
            self.specs.buffers().len()
        )
    }
}
