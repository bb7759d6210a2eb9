//! The crate's one error type.
//!
//! Every message names what the user can act on: the buffer, the shape and
//! the limit that was crossed.

/// Result alias used across the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong while declaring, planning, reserving or
/// leasing buffers.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    // ---- Declaring and planning buffers ----
    /// A buffer or phase was declared with an empty name.
    #[error("empty name: every buffer and phase needs a non-empty name")]
    EmptyName,

    /// Two buffers (or two phases) share a name.
    #[error("duplicate name '{name}': buffer and phase names must be unique within a planner")]
    DuplicateName {
        /// The repeated name.
        name: String,
    },

    /// A shape with no dimensions, or with a zero dimension.
    #[error(
        "buffer '{buffer}': shape {shape:?} has no elements; every dimension must be at least 1"
    )]
    EmptyShape {
        /// Buffer the shape belongs to.
        buffer: String,
        /// The offending shape.
        shape: Vec<usize>,
    },

    /// A shape with more dimensions than the crate supports.
    #[error(
        "buffer '{buffer}': shape {shape:?} has {ndim} dimensions, more than the limit of {max}"
    )]
    TooManyDims {
        /// Buffer the shape belongs to.
        buffer: String,
        /// The offending shape.
        shape: Vec<usize>,
        /// Its number of dimensions.
        ndim: usize,
        /// The supported maximum.
        max: usize,
    },

    /// Size arithmetic on a shape, or on the slab, would overflow.
    #[error(
        "buffer '{buffer}': shape {shape:?} overflows while computing {what} (limit {limit} bytes)"
    )]
    SizeOverflow {
        /// Buffer the computation was for (or `<slab>`).
        buffer: String,
        /// The shape involved.
        shape: Vec<usize>,
        /// Which quantity overflowed.
        what: &'static str,
        /// The largest representable value.
        limit: u64,
    },

    /// An offset alignment that is not a power of two, or below the device
    /// minimum.
    #[error(
        "offset alignment {align} is invalid: it must be a power of two and at least {min} bytes"
    )]
    InvalidAlignment {
        /// The requested alignment.
        align: usize,
        /// The smallest alignment allowed.
        min: usize,
    },

    /// A phase span whose ends are out of order or belong to another planner.
    #[error("buffer '{buffer}': phase span {first}..={last} is invalid ({reason})")]
    InvalidPhaseSpan {
        /// Buffer declared with the span.
        buffer: String,
        /// Name of the first phase, as far as it could be resolved.
        first: String,
        /// Name of the last phase, as far as it could be resolved.
        last: String,
        /// Why it was rejected.
        reason: &'static str,
    },

    /// A phase handle that does not belong to this planner or arena.
    #[error("phase #{index} does not belong to this {owner} (it was created by another planner)")]
    ForeignPhase {
        /// Index inside its own planner.
        index: usize,
        /// "planner" or "arena".
        owner: &'static str,
    },

    /// `plan()` was called with no buffers declared.
    #[error("nothing to plan: declare at least one buffer before calling plan()")]
    EmptyPlan,

    /// A buffer handle created by another planner was used.
    #[error(
        "buffer handle #{index} does not belong to this {owner}; it was declared on another planner"
    )]
    ForeignHandle {
        /// Index inside its own planner.
        index: usize,
        /// "planner" or "arena".
        owner: &'static str,
    },

    /// No placement found fits the capacity asked for.
    #[error(
        "the plan needs {needed} bytes, above the capacity of {capacity} bytes (lower bound {lower_bound} bytes): {reason}"
    )]
    OverCapacity {
        /// Height of the best placement found.
        needed: usize,
        /// The capacity asked for.
        capacity: usize,
        /// The largest total of bytes alive at one time.
        lower_bound: usize,
        /// Whether it is proven impossible or the search ran out of time.
        reason: &'static str,
    },

    /// A MiniMalloc CSV input that cannot be read.
    #[error("CSV line {line}, field '{field}': {reason}")]
    InvalidCsv {
        /// 1-based line number.
        line: usize,
        /// The column (or `header`).
        field: String,
        /// What is wrong, with the offending value.
        reason: String,
    },

    // ---- Steps and leases ----
    /// The element type asked for differs from the declared one.
    #[error("buffer '{buffer}': declared as {declared}, used as {requested}")]
    DTypeMismatch {
        /// The buffer.
        buffer: String,
        /// Its declared element type ([`DType::name`](crate::DType::name)).
        declared: &'static str,
        /// The element type of the request.
        requested: &'static str,
    },

    /// A view shape whose element count exceeds the buffer's capacity.
    #[error(
        "buffer '{buffer}': view shape {shape:?} needs {elements} elements, capacity is {capacity} (padded shape {padded:?})"
    )]
    ViewTooLarge {
        /// The buffer.
        buffer: String,
        /// The requested view shape.
        shape: Vec<usize>,
        /// Elements the view needs.
        elements: usize,
        /// Elements the buffer holds.
        capacity: usize,
        /// The planned (padded) shape.
        padded: Vec<usize>,
    },

    /// A view shape that is not usable (too many dimensions, or no dimensions).
    #[error("buffer '{buffer}': view shape {shape:?} is invalid ({reason})")]
    InvalidView {
        /// The buffer.
        buffer: String,
        /// The requested view shape.
        shape: Vec<usize>,
        /// Why it was rejected.
        reason: &'static str,
    },

    /// A buffer that already has a live lease was leased again.
    #[error(
        "buffer '{buffer}' is already leased in this step; drop the first lease before leasing it again"
    )]
    AlreadyLeased {
        /// The buffer.
        buffer: String,
    },

    /// Two buffers that share slab bytes would both be leased at once.
    #[error(
        "buffer '{buffer}' shares slab bytes [{start}, {end}) with live lease '{other}'; their declared lifetimes say they are never alive together"
    )]
    LeaseOverlap {
        /// The buffer being leased.
        buffer: String,
        /// The live lease it collides with.
        other: String,
        /// First shared byte offset.
        start: usize,
        /// One past the last shared byte offset.
        end: usize,
    },

    /// A buffer was leased outside the phases its lifetime covers.
    #[error(
        "buffer '{buffer}' lives in phases {first}..={last} but the step is in phase '{current}'"
    )]
    OutsidePhase {
        /// The buffer.
        buffer: String,
        /// Current phase of the step.
        current: String,
        /// First phase of the buffer's span.
        first: String,
        /// Last phase of the buffer's span.
        last: String,
    },

    /// Phases were entered out of their declared order.
    #[error(
        "cannot enter phase '{requested}' after phase '{current}': phases run in declaration order within a step"
    )]
    PhaseOrder {
        /// Current phase.
        current: String,
        /// Phase asked for.
        requested: String,
    },

    /// A lease is still live when the step moves past its last phase.
    #[error(
        "buffer '{buffer}' is still leased when entering phase '{phase}', after its last phase '{last}'; drop the lease first"
    )]
    LeaseOutlivesSpan {
        /// The buffer whose lease is still live.
        buffer: String,
        /// The phase being entered.
        phase: String,
        /// The last phase of the buffer's span.
        last: String,
    },

    /// A [`LeaseBook`](crate::arena::LeaseBook) step token that does not
    /// name the open step.
    #[error("step #{step} {reason}; leases and phases belong to the open step")]
    StepNotOpen {
        /// The step the token names.
        step: u64,
        /// Why it is not open (ended, or another book's).
        reason: &'static str,
    },

    /// A [`LeaseBook`](crate::arena::LeaseBook) step was begun while
    /// another is open.
    #[error("step #{open} is still open; end it before beginning another")]
    StepStillOpen {
        /// The open step.
        open: u64,
    },

    /// A [`LeaseBook`](crate::arena::LeaseBook) lease token that no longer
    /// names a live lease.
    #[error("buffer '{buffer}': lease #{lease} is not live ({reason})")]
    StaleLease {
        /// The buffer the token was made for.
        buffer: String,
        /// The lease's number.
        lease: u64,
        /// Released already, or ended with its step.
        reason: &'static str,
    },

    /// A host slice whose length differs from the lease's current view.
    #[error("buffer '{buffer}': host data has {given} elements, the view has {expected}")]
    LengthMismatch {
        /// The buffer.
        buffer: String,
        /// Elements in the host slice.
        given: usize,
        /// Elements in the view.
        expected: usize,
    },

    /// Checked mode found bytes written past a buffer's capacity.
    #[error("{0}")]
    GuardViolation(Box<GuardViolation>),

    // ---- In-place kernels ----
    /// A probability outside `[0, 1]`, or NaN.
    #[error("{op}: p = {p} is not a probability; it must lie in [0, 1]")]
    InvalidProbability {
        /// The op that was called.
        op: &'static str,
        /// The value given.
        p: f32,
    },

    /// Two operands of an elementwise op differ in shape.
    #[error(
        "{op}: '{buffer}' has shape {shape:?} but '{other}' has shape {other_shape:?}; elementwise ops need equal shapes"
    )]
    ShapeMismatch {
        /// The op that was called.
        op: &'static str,
        /// The buffer written in place.
        buffer: String,
        /// Its view shape.
        shape: Vec<usize>,
        /// The second operand.
        other: String,
        /// Its view shape.
        other_shape: Vec<usize>,
    },

    /// Two operands of a kernel share device bytes.
    #[error(
        "{op}: operands '{buffer}' and '{other}' share device memory; the kernel needs distinct buffers"
    )]
    AliasedOperands {
        /// The op that was called.
        op: &'static str,
        /// The buffer written in place.
        buffer: String,
        /// The second operand.
        other: String,
    },

    /// Two operands of a kernel were leased from different arenas.
    #[error(
        "{op}: '{buffer}' and '{other}' come from different arenas; kernels run inside one slab"
    )]
    ArenaMismatch {
        /// The op that was called.
        op: &'static str,
        /// The buffer written in place.
        buffer: String,
        /// The second operand.
        other: String,
    },

    /// A saved dropout mask replayed on a view of a different length.
    #[error(
        "dropout_backward_: '{buffer}' has {len} elements but the forward mask covered {expected}"
    )]
    MaskLengthMismatch {
        /// The gradient buffer.
        buffer: String,
        /// Its element count.
        len: usize,
        /// Elements of the forward call.
        expected: usize,
    },

    /// A kernel was asked to run on an element type it does not support.
    #[error("{op}: element type {dtype} is not supported; use f32, f16 or bf16")]
    UnsupportedDType {
        /// The op that was called.
        op: &'static str,
        /// The element type given ([`DType::name`](crate::DType::name)).
        dtype: &'static str,
    },

    /// Tiling parameters a device kernel cannot run with.
    #[error("kernel tiling: {what} = {value} is invalid; {rule}")]
    InvalidTiling {
        /// The parameter.
        what: &'static str,
        /// The value given.
        value: u64,
        /// What it must satisfy.
        rule: &'static str,
    },

    // ---- Recording and spec files ----
    /// After a recorder froze its plan, a site asked for a shape larger
    /// than any it asked for while recording.
    #[error(
        "site '{site}': shape {requested:?} exceeds the recorded maximum {recorded:?} (planned capacity {padded:?}); record steps of this size again (Recorder::rerecord) and re-plan with Recorder::freeze"
    )]
    ExceedsRecorded {
        /// The site.
        site: String,
        /// The shape asked for now.
        requested: Vec<usize>,
        /// The largest shape recorded for the site (per dimension).
        recorded: Vec<usize>,
        /// The planned (padded) shape: the limit each dimension must stay within.
        padded: Vec<usize>,
    },

    /// After a recorder froze its plan, a site asked for a buffer that was
    /// never requested while recording.
    #[error(
        "site '{site}' was never requested while recording, so the frozen plan has no buffer for it; record it (Recorder::rerecord) and re-plan with Recorder::freeze"
    )]
    UnrecordedSite {
        /// The site.
        site: String,
    },

    /// A name that a set of specs, or a recorder, does not know.
    #[error("no {kind} named '{name}' in {context}")]
    UnknownName {
        /// The name looked up.
        name: String,
        /// `buffer`, `phase` or `persistent buffer`.
        kind: &'static str,
        /// Where it was looked up.
        context: &'static str,
    },

    /// A spec file (or set of specs) that cannot be read or does not fit.
    #[error("specs from {source_name}: {reason}")]
    InvalidSpecs {
        /// The file path, or a description of where the specs came from.
        source_name: String,
        /// What is wrong, with the line and column where known.
        reason: String,
    },

    // ---- Devices (host and Ascend) ----
    /// The device cannot provide the slab.
    #[error("device '{device}' cannot reserve the {needed}-byte slab: {available}")]
    OutOfMemory {
        /// Device name.
        device: String,
        /// Bytes the plan needs.
        needed: usize,
        /// What the device reported as available.
        available: Available,
    },

    /// An error reported by a device backend.
    #[error("device '{device}': {operation} failed: {message}")]
    Device {
        /// Device name.
        device: String,
        /// The operation that failed.
        operation: &'static str,
        /// What the backend reported.
        message: String,
    },

    /// A shared library the Ascend backend needs (the ACL runtime, the
    /// aclnn operator libraries, the kernel library) was not found or did
    /// not load.
    #[error("{what} not found. Tried:\n{tried}\n{hint}", tried = tried.join("\n"))]
    LibraryNotFound {
        /// Which library: "the ACL runtime (libascendcl.so or libacl_rt.so)", ...
        what: String,
        /// Every candidate tried, with why it failed.
        tried: Vec<String>,
        /// How to fix it.
        hint: String,
    },

    /// A library loaded but lacks an entry point the backend needs.
    #[error("{library}: symbol '{symbol}' is missing ({message}); {hint}")]
    MissingSymbol {
        /// Path of the library.
        library: String,
        /// The C function that was not found.
        symbol: String,
        /// What the loader reported.
        message: String,
        /// Likely cause.
        hint: String,
    },

    /// An ACL runtime, aclnn or kernel-launch call returned an error code.
    #[error(
        "device '{device}': {op} failed with error {code} ({name}){}",
        if message.is_empty() { String::new() } else { format!(": {message}") }
    )]
    Acl {
        /// Device name (`ascend:0`).
        device: String,
        /// The call that failed (`aclrtMalloc`, `aclnnMm`, `aclrtlaunch_ta_mul_f32`).
        op: String,
        /// The `aclError` / `aclnnStatus` code.
        code: i32,
        /// The code's name from the CANN headers (or "unknown").
        name: &'static str,
        /// The runtime's recent error message (`aclGetRecentErrMsg`), if any.
        message: String,
    },

    /// An aclnn operator needs more workspace than the plan reserved.
    #[error(
        "{op}: needs {needed} bytes of workspace but the plan reserved {reserved}; query the workspace with the largest shapes at startup and declare at least that much"
    )]
    WorkspaceTooSmall {
        /// The operator.
        op: &'static str,
        /// Bytes it asked for.
        needed: u64,
        /// Bytes the workspace buffer holds.
        reserved: u64,
    },

    // ---- Fragmentation diagnostics ----
    /// A caching-allocator setting (`PYTORCH_NPU_ALLOC_CONF`) that torch_npu
    /// would refuse.
    #[error("allocator setting '{option}:{value}' is invalid: {reason}")]
    InvalidAllocConf {
        /// The option name, e.g. `max_split_size_mb`.
        option: String,
        /// The value given.
        value: String,
        /// Why it was refused, with the limit.
        reason: String,
    },

    /// An allocation trace that cannot be read: bad syntax, an unknown
    /// action, a free of an id that is not allocated.
    #[error("trace '{source_name}', {location}: {message}")]
    Trace {
        /// File name or description of the trace.
        source_name: String,
        /// Where in it: a line number or a snapshot entry.
        location: String,
        /// What is wrong, with the value found.
        message: String,
    },

    /// The SVG timeline could not be drawn.
    #[cfg(feature = "plot")]
    #[error("cannot draw the timeline: {message}")]
    Plot {
        /// What the plotting library reported.
        message: String,
    },

    // ---- Files and arguments ----
    /// Reading or writing a file failed. Made by [`Error::io`].
    #[error("cannot {operation} '{path}': {message}")]
    Io {
        /// What was attempted: `read`, `write`, `create`, ...
        operation: &'static str,
        /// The file.
        path: String,
        /// The kind of failure the operating system reported.
        kind: std::io::ErrorKind,
        /// What the operating system reported.
        message: String,
    },

    /// A parameter outside the range the function accepts.
    #[error("{what} = {value} is invalid: {reason}")]
    InvalidArgument {
        /// The parameter.
        what: &'static str,
        /// The value given.
        value: String,
        /// The accepted range.
        reason: String,
    },
}

/// How much memory a device said it had when a reservation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Available {
    /// The device reported this many free bytes.
    Free(usize),
    /// The device does not report free memory; the allocation itself failed.
    Unknown,
}

impl std::fmt::Display for Available {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Available::Free(bytes) => write!(f, "only {bytes} bytes are free"),
            Available::Unknown => f.write_str("the allocation failed (free memory unknown)"),
        }
    }
}

/// A write past a buffer's capacity, found in its guard bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardViolation {
    /// The buffer that overran.
    pub buffer: String,
    /// Its capacity in bytes (padded shape).
    pub capacity_bytes: usize,
    /// How far past the capacity the last modified guard byte lies.
    pub overrun_bytes: usize,
    /// Slab offset of the first guard byte.
    pub guard_offset: usize,
    /// The lease that wrote last: its number (counting this buffer's
    /// leases from 1), the step it was made in, its phase, and the number
    /// of elements its view held when it ended.
    pub lease: u64,
    /// Step number of that lease (0 for the first step).
    pub step: u64,
    /// Phase name of that lease.
    pub phase: String,
    /// Elements in that lease's view when it ended.
    pub view_elements: usize,
}

impl std::fmt::Display for GuardViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "buffer '{}' was written {} byte(s) past its {}-byte capacity (guard at slab offset {}); \
             last written through lease #{} in step {}, phase '{}', view of {} element(s)",
            self.buffer,
            self.overrun_bytes,
            self.capacity_bytes,
            self.guard_offset,
            self.lease,
            self.step,
            self.phase,
            self.view_elements
        )
    }
}

impl Error {
    /// The error for a failed file operation: `operation` says what was
    /// attempted (`read`, `write`, ...), `path` the file, `err` what the operating system said (its
    /// [`kind`](std::io::Error::kind) is kept).
    ///
    /// ```
    /// use tensor_arena::Error;
    /// let e = std::fs::read("/no/such/file").map_err(|e| Error::io("read", "/no/such/file", &e));
    /// assert!(matches!(
    ///     e,
    ///     Err(Error::Io { kind: std::io::ErrorKind::NotFound, .. })
    /// ));
    /// ```
    pub fn io(
        operation: &'static str,
        path: impl AsRef<std::path::Path>,
        err: &std::io::Error,
    ) -> Error {
        Error::Io {
            operation,
            path: path.as_ref().display().to_string(),
            kind: err.kind(),
            message: err.to_string(),
        }
    }
}
