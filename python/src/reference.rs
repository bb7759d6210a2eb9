//! The Rust `Recorder` run on scripted requests, for the test suite: the
//! Python `Recorder` must learn the same spec file from the same requests.

use std::collections::HashMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use tensor_arena::{
    DType, Element, Error, HostDevice, Mode, Phase, RecordStep, Recorder, SiteLease, bf16, f16,
};

use crate::errors::IntoPy;

/// A live recorded lease of any element type, held for its drop (which
/// records the release).
// The leases are never read: dropping them is the point.
#[allow(dead_code)]
enum Held<'s> {
    F32(SiteLease<'s, f32, HostDevice>),
    F16(SiteLease<'s, f16, HostDevice>),
    BF16(SiteLease<'s, bf16, HostDevice>),
    I32(SiteLease<'s, i32, HostDevice>),
    U8(SiteLease<'s, u8, HostDevice>),
}

fn temp<'s>(
    s: &'s RecordStep<'_, HostDevice>,
    name: &str,
    dtype: DType,
    shape: &[usize],
) -> Result<Held<'s>, Error> {
    Ok(match dtype {
        DType::F32 => Held::F32(s.temp(name, shape)?),
        DType::F16 => Held::F16(s.temp(name, shape)?),
        DType::BF16 => Held::BF16(s.temp(name, shape)?),
        DType::I32 => Held::I32(s.temp(name, shape)?),
        DType::U8 => Held::U8(s.temp(name, shape)?),
    })
}

/// One scripted operation: `("temp", name, dtype, shape)`,
/// `("release", name)` or `("enter", phase)`.
#[derive(FromPyObject)]
pub enum Op {
    Temp(String, String, String, Vec<usize>),
    Named(String, String),
}

/// One scripted step: `(mode, ops)` in a declared mode, or `ops` alone in
/// the default mode.
#[derive(FromPyObject)]
pub enum ScriptStep {
    InMode(String, Vec<Op>),
    Default(Vec<Op>),
}

fn dtype(name: &str) -> PyResult<DType> {
    DType::from_name(name).ok_or_else(|| PyValueError::new_err(format!("unknown dtype '{name}'")))
}

/// A scripted step's error: `Recorder::step_in` wants one that a crate
/// error converts into.
struct Failure(PyErr);

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure(crate::errors::to_py(e))
    }
}

impl From<PyErr> for Failure {
    fn from(e: PyErr) -> Failure {
        Failure(e)
    }
}

/// Calls `$call::<T>` for the element type `$dtype`.
macro_rules! typed {
    ($dtype:expr, $call:ident ( $($arg:expr),* )) => {
        match $dtype {
            DType::F32 => $call::<f32>($($arg),*),
            DType::F16 => $call::<f16>($($arg),*),
            DType::BF16 => $call::<bf16>($($arg),*),
            DType::I32 => $call::<i32>($($arg),*),
            DType::U8 => $call::<u8>($($arg),*),
        }
    };
}

fn persistent<T: Element>(
    rec: &mut Recorder<HostDevice>,
    name: &str,
    shape: &[usize],
) -> Result<(), Error> {
    rec.persistent::<T>(name, shape).map(drop)
}

fn bound<T: Element>(
    rec: &mut Recorder<HostDevice>,
    mode: Mode,
    name: &str,
    shape: &[usize],
) -> Result<(), Error> {
    rec.bound::<T>(mode, name, shape)
}

fn per_dimension<T: Element>(
    rec: &mut Recorder<HostDevice>,
    mode: Mode,
    name: &str,
) -> Result<(), Error> {
    rec.per_dimension::<T>(mode, name)
}

/// Runs the Rust `Recorder` (on the host) over `steps` and returns the
/// spec file it learned. `phases` are the default mode's; `persistent`
/// lists `(name, dtype, shape)`; `modes` `(name, [phases])`; `bounds`
/// `(mode or None, name, dtype, shape)`; `per_dimension` `(mode or None,
/// name, dtype)`, declared in that order before the first step.
#[pyfunction]
#[pyo3(signature = (phases, persistent_buffers, steps, modes = Vec::new(), bounds = Vec::new(), per_dimension_sites = Vec::new()))]
pub fn reference_specs(
    phases: Vec<String>,
    persistent_buffers: Vec<(String, String, Vec<usize>)>,
    steps: Vec<ScriptStep>,
    modes: Vec<(String, Vec<String>)>,
    bounds: Vec<(Option<String>, String, String, Vec<usize>)>,
    per_dimension_sites: Vec<(Option<String>, String, String)>,
) -> PyResult<String> {
    let mut rec = Recorder::new(HostDevice::new());
    let mut mode_ids: HashMap<Option<String>, Mode> = HashMap::new();
    let mut phase_ids: HashMap<(Option<String>, String), Phase> = HashMap::new();
    let default = rec.default_mode();
    mode_ids.insert(None, default);
    for p in &phases {
        phase_ids.insert((None, p.clone()), rec.phase(p).py()?);
    }
    for (name, list) in &modes {
        let m = rec.mode(name).py()?;
        mode_ids.insert(Some(name.clone()), m);
        for p in list {
            phase_ids.insert((Some(name.clone()), p.clone()), rec.phase_in(m, p).py()?);
        }
    }
    let mode_of = |name: &Option<String>| {
        mode_ids
            .get(name)
            .copied()
            .ok_or_else(|| PyValueError::new_err(format!("unknown mode {name:?}")))
    };
    for (name, d, shape) in &persistent_buffers {
        typed!(dtype(d)?, persistent(&mut rec, name, shape)).py()?;
    }
    for (m, name, d) in &per_dimension_sites {
        let m = mode_of(m)?;
        typed!(dtype(d)?, per_dimension(&mut rec, m, name)).py()?;
    }
    for (m, name, d, shape) in &bounds {
        let m = mode_of(m)?;
        typed!(dtype(d)?, bound(&mut rec, m, name, shape)).py()?;
    }
    for step in &steps {
        let (mode, ops) = match step {
            ScriptStep::InMode(m, ops) => (Some(m.clone()), ops),
            ScriptStep::Default(ops) => (None, ops),
        };
        let m = mode_of(&mode)?;
        let run = rec.step_in(m, |s| -> Result<(), Failure> {
            let mut held: HashMap<&str, Held<'_>> = HashMap::new();
            for op in ops {
                match op {
                    Op::Temp(kind, name, d, shape) if kind == "temp" => {
                        held.insert(name, temp(s, name, dtype(d)?, shape).py()?);
                    }
                    Op::Named(kind, name) if kind == "release" => {
                        held.remove(name.as_str());
                    }
                    Op::Named(kind, name) if kind == "enter" => {
                        let phase =
                            phase_ids
                                .get(&(mode.clone(), name.clone()))
                                .ok_or_else(|| {
                                    PyValueError::new_err(format!("unknown phase '{name}'"))
                                })?;
                        s.enter(*phase).py()?;
                    }
                    _ => return Err(PyValueError::new_err("unknown scripted operation").into()),
                }
            }
            Ok(())
        });
        run.map_err(|Failure(e)| e)?;
    }
    rec.specs().to_toml().py()
}

/// The Rust side of a spec file: `SpecSet::load` on a Rust `Planner`, and
/// a Rust `Recorder` with the file's modes and phases, preloaded with it
/// and frozen; returns both plans' tables (`Plan`'s `Display`).
#[pyfunction]
pub fn reference_plans(path: std::path::PathBuf) -> PyResult<(String, String)> {
    let specs = tensor_arena::SpecSet::load(&path).py()?;
    let mut planner = tensor_arena::Planner::new();
    specs.declare_on(&mut planner).py()?;
    let planned = planner.plan().py()?.to_string();
    let mut rec = Recorder::new(HostDevice::new());
    for p in specs.phases() {
        rec.phase(p).py()?;
    }
    for m in specs.modes() {
        let mode = rec.mode(&m.name).py()?;
        for p in &m.phases {
            rec.phase_in(mode, p).py()?;
        }
    }
    rec.preload(&specs).py()?;
    let recorded = rec.freeze().py()?.to_string();
    Ok((planned, recorded))
}
