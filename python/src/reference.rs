//! The Rust `Recorder` run on scripted requests, for the test suite: the
//! Python `Recorder` must learn the same spec file from the same requests.

use std::collections::HashMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use tensor_arena::{DType, Error, HostDevice, RecordStep, Recorder, SiteLease, bf16, f16};

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

/// Runs the Rust `Recorder` (on the host) over `steps` and returns the
/// spec file it learned. `persistent` lists `(name, dtype, shape)`.
#[pyfunction]
pub fn reference_specs(
    phases: Vec<String>,
    persistent: Vec<(String, String, Vec<usize>)>,
    steps: Vec<Vec<Op>>,
) -> PyResult<String> {
    let mut rec = Recorder::new(HostDevice::new());
    let mut ids = HashMap::new();
    for p in &phases {
        ids.insert(p.clone(), rec.phase(p).py()?);
    }
    let dtype = |name: &str| {
        DType::from_name(name)
            .ok_or_else(|| PyValueError::new_err(format!("unknown dtype '{name}'")))
    };
    for (name, d, shape) in &persistent {
        match dtype(d)? {
            DType::F32 => drop(rec.persistent::<f32>(name, shape).py()?),
            DType::F16 => drop(rec.persistent::<f16>(name, shape).py()?),
            DType::BF16 => drop(rec.persistent::<bf16>(name, shape).py()?),
            DType::I32 => drop(rec.persistent::<i32>(name, shape).py()?),
            DType::U8 => drop(rec.persistent::<u8>(name, shape).py()?),
        }
    }
    for ops in &steps {
        rec.step(|s| -> PyResult<()> {
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
                        let phase = ids.get(name).ok_or_else(|| {
                            PyValueError::new_err(format!("unknown phase '{name}'"))
                        })?;
                        s.enter(*phase).py()?;
                    }
                    _ => return Err(PyValueError::new_err("unknown scripted operation")),
                }
            }
            Ok(())
        })?;
    }
    rec.specs().to_toml().py()
}

/// The Rust side of a spec file: `SpecSet::load` on a Rust `Planner`, and
/// a Rust `Recorder` preloaded with it and frozen; returns both plans'
/// tables (`Plan`'s `Display`).
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
    rec.preload(&specs).py()?;
    let recorded = rec.freeze().py()?.to_string();
    Ok((planned, recorded))
}
