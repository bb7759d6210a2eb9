//! `tensor_arena._native`: the Rust core of the Python package.
//!
//! - [`planner`]: `Planner`, `Mode`, `Phase`, `Buffer`, `Plan` over the Rust
//!   planner;
//! - [`arena`]: `Arena` (one torch uint8 slab) and `Step` (leases as typed
//!   views), the rules kept by `tensor_arena::arena::LeaseBook`;
//! - [`specs`] and [`recorder`]: spec files and the recorder's bookkeeping;
//! - [`doctor`]: the `tensor-arena` command line and `replay` output;
//! - [`errors`]: the Rust `Error` as Python exception classes.
//!
//! The pure-Python layer in `tensor_arena/` wraps these.

mod arena;
mod doctor;
mod errors;
mod planner;
mod recorder;
mod reference;
mod specs;

use pyo3::prelude::*;

/// The native module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    m.add_class::<planner::PyPlanner>()?;
    m.add_class::<planner::PyPhase>()?;
    m.add_class::<planner::PyMode>()?;
    m.add_class::<planner::PyBuffer>()?;
    m.add_class::<planner::PyPlan>()?;
    m.add_class::<arena::PyArena>()?;
    m.add_class::<arena::PyStep>()?;
    m.add_class::<specs::PySpecSet>()?;
    m.add_class::<recorder::RecorderCore>()?;
    m.add_function(wrap_pyfunction!(doctor::cli_output, m)?)?;
    m.add_function(wrap_pyfunction!(doctor::main, m)?)?;
    m.add_function(wrap_pyfunction!(reference::reference_specs, m)?)?;
    m.add_function(wrap_pyfunction!(reference::reference_plans, m)?)?;
    m.add("GUARD_BYTE", tensor_arena::arena::GUARD_BYTE)?;
    // The planned allocator's C ABI lives in this same shared object
    // (tensor_arena_alloc & co., exported by the tensor-arena-alloc crate):
    // naming two of its functions here links them in, and gives Python
    // their addresses without a dlsym.
    m.add(
        "ALLOCATOR_ALLOC_ADDRESS",
        tensor_arena_alloc::ffi::tensor_arena_alloc as *const () as usize,
    )?;
    m.add(
        "ALLOCATOR_FREE_ADDRESS",
        tensor_arena_alloc::ffi::tensor_arena_free as *const () as usize,
    )?;
    m.add("POISON_BYTE", tensor_arena::arena::POISON_BYTE)?;
    Ok(())
}
