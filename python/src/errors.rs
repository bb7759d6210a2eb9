//! The Rust [`Error`] as Python exceptions: one class per family of rules,
//! all under `ArenaError`, each instance carrying the variant's name as
//! `kind` and the Rust message (which names the buffer, the shape and the
//! limit) as its text; mode errors also carry `mode` (and `step_mode`), a
//! refused view the `rule` that refused it (`elements` or `dims`).

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use tensor_arena::Error;

create_exception!(
    _native,
    ArenaError,
    PyException,
    "Any error of tensor-arena; `kind` names the Rust error variant."
);
create_exception!(
    _native,
    LeaseError,
    ArenaError,
    "A lease refused or misused."
);
create_exception!(
    _native,
    AlreadyLeasedError,
    LeaseError,
    "The buffer already has a live lease in this step."
);
create_exception!(
    _native,
    OverlapError,
    LeaseError,
    "A live lease shares the buffer's slab bytes."
);
create_exception!(
    _native,
    StaleLeaseError,
    LeaseError,
    "The lease was released already, or ended with its step."
);
create_exception!(
    _native,
    StepError,
    LeaseError,
    "A step that is not open was used, or one was begun while another is open."
);
create_exception!(
    _native,
    ForeignHandleError,
    LeaseError,
    "A buffer or phase handle of another planner (or a tensor that is no lease)."
);
create_exception!(
    _native,
    PhaseError,
    ArenaError,
    "A lease outside its phases, phases out of order, or a lease alive past its span."
);
create_exception!(
    _native,
    CapacityError,
    ArenaError,
    "A view, a plan or a slab larger than what holds it."
);
create_exception!(
    _native,
    ShapeError,
    ArenaError,
    "A shape or element type that does not fit the buffer's declaration."
);
create_exception!(
    _native,
    SpecError,
    ArenaError,
    "Declarations or spec files that are invalid or do not match."
);
create_exception!(
    _native,
    TraceError,
    ArenaError,
    "An allocation trace or allocator setting that cannot be read."
);
create_exception!(
    _native,
    GuardViolationError,
    ArenaError,
    "Checked mode found bytes written past a buffer's capacity."
);
create_exception!(
    _native,
    ModeError,
    ArenaError,
    "A buffer or phase of another mode than the step's (`WrongMode`, naming both modes), a mode of another planner (`ForeignMode`), or a buffer declared with phases of another mode (`PhaseOfAnotherMode`)."
);

/// The variant's name, from its `Debug` form (`ViewTooLarge { .. }`).
fn kind(e: &Error) -> String {
    format!("{e:?}")
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect()
}

/// The Python exception for `e`.
pub fn to_py(e: Error) -> PyErr {
    let message = e.to_string();
    let kind = kind(&e);
    // Mode errors carry both modes, so callers need not parse the message.
    let modes = match &e {
        Error::WrongMode {
            mode, step_mode, ..
        } => Some((mode.clone(), Some(step_mode.clone()))),
        Error::UnrecordedSite { mode, .. } | Error::NoSuchBuffer { mode, .. } => {
            Some((mode.clone(), None))
        }
        Error::ExceedsRecorded(x) => Some((x.mode.clone(), None)),
        _ => None,
    };
    // Which half of the one shape rule refused a view.
    let rule = match &e {
        Error::ViewTooLarge { .. } => Some("elements"),
        Error::ViewExceedsDims { .. } => Some("dims"),
        Error::ExceedsRecorded(x) => Some(if x.per_dimension { "dims" } else { "elements" }),
        _ => None,
    };
    let err = match e {
        Error::AlreadyLeased { .. } => AlreadyLeasedError::new_err(message),
        Error::LeaseOverlap { .. } => OverlapError::new_err(message),
        Error::StaleLease { .. } => StaleLeaseError::new_err(message),
        Error::StepNotOpen { .. } | Error::StepStillOpen { .. } => StepError::new_err(message),
        Error::ForeignHandle { .. } | Error::ForeignPhase { .. } | Error::ArenaMismatch { .. } => {
            ForeignHandleError::new_err(message)
        }
        Error::WrongMode { .. } | Error::ForeignMode { .. } | Error::PhaseOfAnotherMode { .. } => {
            ModeError::new_err(message)
        }
        Error::OutsidePhase { .. } | Error::PhaseOrder { .. } | Error::LeaseOutlivesSpan { .. } => {
            PhaseError::new_err(message)
        }
        Error::ViewTooLarge { .. }
        | Error::ViewExceedsDims { .. }
        | Error::ExceedsRecorded(_)
        | Error::OverCapacity { .. }
        | Error::OutOfMemory { .. } => CapacityError::new_err(message),
        Error::InvalidView { .. }
        | Error::EmptyShape { .. }
        | Error::TooManyDims { .. }
        | Error::SizeOverflow { .. }
        | Error::DTypeMismatch { .. }
        | Error::LengthMismatch { .. }
        | Error::CopyLength { .. }
        | Error::MaskLengthMismatch { .. }
        | Error::UnsupportedDType { .. }
        | Error::ShapeMismatch { .. } => ShapeError::new_err(message),
        Error::InvalidSpecs { .. }
        | Error::UnknownName { .. }
        | Error::UnrecordedSite { .. }
        | Error::NoSuchBuffer { .. }
        | Error::DuplicateName { .. }
        | Error::EmptyName
        | Error::EmptyPlan
        | Error::InvalidPhaseSpan { .. }
        | Error::InvalidAlignment { .. } => SpecError::new_err(message),
        Error::Trace { .. } | Error::InvalidAllocConf { .. } => TraceError::new_err(message),
        Error::GuardViolation(_) => GuardViolationError::new_err(message),
        _ => ArenaError::new_err(message),
    };
    Python::attach(|py| {
        // Setting an attribute on a fresh exception instance cannot
        // fail in practice; if it did, the message still says everything.
        let value = err.value(py);
        let _ = value.setattr("kind", kind);
        if let Some((mode, step_mode)) = modes {
            let _ = value.setattr("mode", mode);
            let _ = value.setattr("step_mode", step_mode);
        }
        if let Some(rule) = rule {
            let _ = value.setattr("rule", rule);
        }
    });
    err
}

/// `Result<T, Error>` to `PyResult<T>`.
pub trait IntoPy<T> {
    /// Maps the error with [`to_py`].
    fn py(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for Result<T, Error> {
    fn py(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}

/// Adds the exception classes to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("ArenaError", py.get_type::<ArenaError>())?;
    m.add("LeaseError", py.get_type::<LeaseError>())?;
    m.add("AlreadyLeasedError", py.get_type::<AlreadyLeasedError>())?;
    m.add("OverlapError", py.get_type::<OverlapError>())?;
    m.add("StaleLeaseError", py.get_type::<StaleLeaseError>())?;
    m.add("StepError", py.get_type::<StepError>())?;
    m.add("ForeignHandleError", py.get_type::<ForeignHandleError>())?;
    m.add("PhaseError", py.get_type::<PhaseError>())?;
    m.add("CapacityError", py.get_type::<CapacityError>())?;
    m.add("ShapeError", py.get_type::<ShapeError>())?;
    m.add("SpecError", py.get_type::<SpecError>())?;
    m.add("TraceError", py.get_type::<TraceError>())?;
    m.add("GuardViolationError", py.get_type::<GuardViolationError>())?;
    m.add("ModeError", py.get_type::<ModeError>())?;
    Ok(())
}
