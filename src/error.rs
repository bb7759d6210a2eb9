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

    /// A mode handle that does not belong to this planner, arena or
    /// recorder.
    #[error("mode #{index} does not belong to this {owner} (it was created by another planner)")]
    ForeignMode {
        /// Index inside its own planner.
        index: usize,
        /// "planner", "arena" or "recorder".
        owner: &'static str,
    },

    /// A buffer declared in one mode with phases of another.
    #[error(
        "buffer '{buffer}' is declared in mode '{mode}' but its phase '{phase}' belongs to mode '{phase_mode}'; a buffer lives in the phases of its own mode"
    )]
    PhaseOfAnotherMode {
        /// The buffer.
        buffer: String,
        /// The mode it was declared in.
        mode: String,
        /// The phase given.
        phase: String,
        /// The mode that phase belongs to.
        phase_mode: String,
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
        "buffer '{buffer}': view shape {shape:?} needs {elements} elements, more than its capacity of {capacity} (padded shape {padded:?}; element-count rule)"
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

    /// A view shape beyond the per-dimension limits of a buffer that opted
    /// in to them (`ShapeRule::Dims`).
    #[error(
        "buffer '{buffer}': view shape {shape:?} is outside its per-dimension limit {padded:?} ({}; per-dimension rule, which this buffer opted in to)",
        match dim {
            Some(d) => format!("dimension {d} is {} > {}", shape.get(*d).copied().unwrap_or(0), padded.get(*d).copied().unwrap_or(0)),
            None => format!("{} dimensions instead of {}: the number of dimensions is fixed", shape.len(), padded.len()),
        }
    )]
    ViewExceedsDims {
        /// The buffer.
        buffer: String,
        /// The requested view shape.
        shape: Vec<usize>,
        /// The planned (padded) shape: the limit of each dimension.
        padded: Vec<usize>,
        /// The first dimension beyond its limit; `None` when the number of
        /// dimensions differs.
        dim: Option<usize>,
    },

    /// A copy between host memory and a buffer, outside a step, whose
    /// length differs from the buffer's declared shape.
    #[error(
        "buffer '{buffer}': {op} of {given} elements, but its shape {shape:?} has {expected}; copy the whole buffer, or use {op}_prefix for a partial copy"
    )]
    CopyLength {
        /// `write` or `read`.
        op: &'static str,
        /// The buffer.
        buffer: String,
        /// Elements in the host slice.
        given: usize,
        /// Elements of the declared shape.
        expected: usize,
        /// The declared shape.
        shape: Vec<usize>,
    },

    /// A buffer of one mode leased (or a phase of one mode entered) in a
    /// step of another.
    #[error(
        "{what} '{name}' belongs to mode '{mode}' but the step runs in mode '{step_mode}'; open the step in its mode (Arena::step_in)"
    )]
    WrongMode {
        /// `buffer` or `phase`.
        what: &'static str,
        /// Its name.
        name: String,
        /// The mode it belongs to.
        mode: String,
        /// The mode of the step.
        step_mode: String,
    },

    /// A buffer asked for by name that the step's mode does not have.
    #[error(
        "no buffer named '{name}' in mode '{mode}' of this plan (sizes {shape:?} were asked for)"
    )]
    NoSuchBuffer {
        /// The name asked for.
        name: String,
        /// The step's mode.
        mode: String,
        /// The shape asked for.
        shape: Vec<usize>,
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

    /// A bit mask whose byte count is not `ceil(n / 8)` for the `n`
    /// elements it covers (the bits of
    /// [`dropout_with_bits_`](crate::Lease::dropout_with_bits_)).
    #[error(
        "{op}: bit mask '{mask}' has {bytes} bytes, but the {elements} elements of '{buffer}' need {needed} (one bit each: ops::bit_mask_bytes({elements}))"
    )]
    BitMaskBytes {
        /// The op that was called.
        op: &'static str,
        /// The buffer the mask covers.
        buffer: String,
        /// Its element count (a gradient's: the forward's).
        elements: usize,
        /// The bit-mask buffer.
        mask: String,
        /// Its length in bytes (its view's).
        bytes: usize,
        /// The bytes it must have.
        needed: usize,
    },

    /// A saved bit-mask dropout applied to a gradient of another length.
    #[error("{op}: '{buffer}' has {len} elements but the forward bit mask covered {expected}")]
    BitMaskElements {
        /// The op that was called.
        op: &'static str,
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
    /// After a recorder froze its plan, a site asked for a shape its
    /// planned buffer cannot hold, by the site's shape rule (see
    /// [`ExceedsRecorded`]).
    #[error("{0}")]
    ExceedsRecorded(Box<ExceedsRecorded>),

    /// After a recorder froze its plan, a site asked for a buffer that was
    /// never requested while recording (in the mode of the step).
    #[error(
        "site '{site}' was never requested in mode '{mode}' while recording, so the frozen plan has no buffer for it; record it (Recorder::rerecord) and re-plan with Recorder::freeze"
    )]
    UnrecordedSite {
        /// The site.
        site: String,
        /// The mode of the step that asked.
        mode: String,
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
    #[error("device '{device}' cannot reserve the slab: needs {needed} bytes, {available}")]
    OutOfMemory {
        /// Device name.
        device: String,
        /// Bytes the slab takes from the device (the plan's bytes, plus
        /// what the device's allocator adds, such as page rounding).
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

    /// The Ascend kernel library loaded but its kernels do not run: a probe
    /// launch reported success and changed nothing, which is what CANN's
    /// generated launch stubs do when the library's load-time registration
    /// failed (a library built for another SoC).
    #[error(
        "device '{device}': the kernel library {library} is not registered with the runtime: a probe launch of {symbol} returned success but did nothing (CANN's launch stubs print an error and return 0 when the library's load-time registration failed; {}). Rebuild it for this device: `npu-smi info` names the chip; `cmake -S kernels/ascend -B build/ascend -DSOC_VERSION=Ascend<chip> && cmake --build build/ascend`",
        soc_mismatch(built_for.as_deref(), device_soc.as_deref())
    )]
    KernelsNotRegistered {
        /// Device name (`ascend:0`).
        device: String,
        /// Path of the kernel library.
        library: String,
        /// The launch function the probe called.
        symbol: &'static str,
        /// The SoC the library was built for, from its kernel section name
        /// (`.ascend.kernel.<soc>.<target>`), when it has one.
        built_for: Option<String>,
        /// The device's SoC (`aclrtGetSocName`), when the runtime tells.
        device_soc: Option<String>,
    },

    /// `aclrtGetMemInfo` answered free = total = 0 for the memory attribute
    /// asked about: the device has no memory of that kind.
    #[error(
        "device '{device}': memory attribute not supported by this device: aclrtGetMemInfo reports free = total = 0 for {attr}; use MemAttr::Hbm on Atlas A2/A3 (910B/910C), MemAttr::Ddr on Atlas 300I/310 class devices"
    )]
    MemoryAttributeUnsupported {
        /// Device name.
        device: String,
        /// The `aclrtMemAttr` asked about (`ACL_DDR_MEM`, ...).
        attr: &'static str,
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

/// Why a kernel library built for `built_for` may not have registered on a
/// device of `device_soc`, as far as the names tell: CANN's registration
/// compares SoC families (`AscendCheckSoCVersion`, cannmirror/asc-devkit
/// `tools/build/asc_rt/ascendc_runtime.cpp`: Ascend910B1..B4 and the
/// Ascend910_93 parts are one family).
fn soc_mismatch(built_for: Option<&str>, device_soc: Option<&str>) -> String {
    match (built_for, device_soc) {
        (Some(b), Some(d)) if soc_family(b) != soc_family(d) => {
            format!("it was built for {b} and this device is {d}, another SoC family")
        }
        (Some(b), Some(d)) => format!(
            "it was built for {b} and this device is {d}, the same SoC family, so the cause is elsewhere: the [ERROR] line the stubs print at every launch names it"
        ),
        (Some(b), None) => format!(
            "usually a SoC mismatch: it was built for {b}; the runtime does not name this device's SoC"
        ),
        (None, Some(d)) => format!(
            "usually a SoC mismatch: this device is {d}; the library has no kernel section naming its SoC"
        ),
        (None, None) => "usually because it was built for another SoC".to_owned(),
    }
}

/// The SoC family of a SoC name (`ascend910b2` and `Ascend910B4` are both
/// `ascend910b`).
fn soc_family(soc: &str) -> String {
    let s = soc.to_ascii_lowercase();
    [
        ("ascend910b", "ascend910b"),
        ("ascend910_93", "ascend910b"),
        ("ascend310p", "ascend310p"),
        ("ascend310b", "ascend310b"),
        ("ascend910", "ascend910"),
    ]
    .iter()
    .find(|(prefix, _)| s.starts_with(prefix))
    .map_or(s.clone(), |(_, family)| (*family).to_owned())
}

/// How much memory a device said it had when a reservation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Available {
    /// The device reported this many free bytes.
    Free(usize),
    /// The device does not report free memory; the allocation itself failed.
    Unknown,
    /// The device reported `free` bytes, of which `headroom` must stay
    /// unreserved for the runtime's own allocations.
    FreeWithHeadroom {
        /// Free bytes the device reported.
        free: usize,
        /// Bytes left to the runtime.
        headroom: usize,
    },
}

impl std::fmt::Display for Available {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Available::Free(bytes) => write!(f, "only {bytes} bytes are free"),
            Available::Unknown => f.write_str("the allocation failed (free memory unknown)"),
            Available::FreeWithHeadroom { free, headroom } => write!(
                f,
                "free {free} bytes, headroom {headroom} bytes (left unreserved for the runtime's own allocations: kernel launch buffers, operator tiling and binaries; set by AscendConfig::headroom)"
            ),
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

/// A request a frozen recorder's plan cannot hold: the site, the shape,
/// what it was planned for, and which rule refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExceedsRecorded {
    /// The site.
    pub site: String,
    /// The mode of the step that asked.
    pub mode: String,
    /// The shape asked for now.
    pub requested: Vec<usize>,
    /// The shape the site was planned for (the largest request, or the
    /// declared bound).
    pub recorded: Vec<usize>,
    /// The planned (padded) shape.
    pub padded: Vec<usize>,
    /// Elements the planned buffer holds.
    pub capacity: usize,
    /// Whether the per-dimension rule refused (the site opted in to it);
    /// otherwise the element-count rule did.
    pub per_dimension: bool,
}

impl std::fmt::Display for ExceedsRecorded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "site '{}' in mode '{}': shape {:?} exceeds the recorded maximum {:?} (",
            self.site, self.mode, self.requested, self.recorded
        )?;
        if self.per_dimension {
            write!(
                f,
                "the per-dimension limit is the padded shape {:?}; per-dimension rule, which this site opted in to",
                self.padded
            )?;
        } else {
            let elements = self
                .requested
                .iter()
                .try_fold(1usize, |a, &d| a.checked_mul(d));
            match elements {
                Some(n) => write!(f, "it needs {n} elements")?,
                None => f.write_str("its element count overflows")?,
            }
            write!(
                f,
                ", the planned capacity is {} (padded shape {:?}; element-count rule)",
                self.capacity, self.padded
            )?;
        }
        f.write_str("); record steps of this size again (Recorder::rerecord) and re-plan with Recorder::freeze, or declare the site's bound up front (Recorder::bound)")
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
