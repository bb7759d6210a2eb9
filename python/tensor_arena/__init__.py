"""tensor-arena for PyTorch: planned arenas of torch tensors and the fragmentation doctor.

Declare every buffer once on a :class:`Planner`, plan one slab, reserve it with
one ``torch.empty(slab_bytes, dtype=torch.uint8, device=device)``, then lease
typed, shaped, zero-copy views of it inside step scopes::

    import torch, tensor_arena as ta
    p = ta.Planner()
    fwd, bwd = p.phase("forward"), p.phase("backward")
    h = p.span("h", (128, 64), torch.float32, fwd, bwd)
    arena = p.plan().reserve("cpu")
    with arena.step() as s:
        x = s.lease(h, (77, 64))      # a torch.Tensor view of the slab
        x.bernoulli_(0.9)

Modes (``p.mode("eval")``, ``arena.step(mode="eval")``) put training and
evaluation steps of different shapes in one slab. The Rust core keeps the
lease book and refuses double leases, overlapping live leases, leases outside
their phases or their mode and views beyond the padded capacity with
exceptions that name the buffer, the shape, the mode and the limit.
:func:`replay` and :func:`sweep` run the fragmentation doctor
(``tensor-arena replay``) on a snapshot, a trace file or a live snapshot dict.
:class:`PlannedAllocator` (``tensor_arena.allocator``) puts the planned
allocator library in torch's own allocator slot for unmodified training loops;
``python -m tensor_arena.run train.py`` does so without editing the script.
See docs/python.md.
"""

from ._native import (
    AlreadyLeasedError,
    Arena,
    ArenaError,
    Buffer,
    CapacityError,
    ForeignHandleError,
    GUARD_BYTE,
    GuardViolationError,
    LeaseError,
    Mode,
    ModeError,
    OverlapError,
    Phase,
    PhaseError,
    Plan,
    Planner,
    POISON_BYTE,
    ShapeError,
    SpecError,
    SpecSet,
    StaleLeaseError,
    Step,
    StepError,
    TraceError,
)
from .doctor import replay, report, sweep

# The recorder and the Megatron adapter import torch; the doctor and the
# console script do not need it, so they are loaded on first use (PEP 562).
_LAZY = {
    "AllocatorError": "allocator",
    "GlobalMemoryBuffer": "megatron",
    "Persistent": "recorder",
    "PlannedAllocator": "allocator",
    "RecordMode": "recorder",
    "Recorder": "recorder",
    "RecordPhase": "recorder",
    "RecordStep": "recorder",
}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tensor_arena' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value

__version__ = "0.1.0"

__all__ = [
    "AllocatorError",
    "AlreadyLeasedError",
    "Arena",
    "ArenaError",
    "Buffer",
    "CapacityError",
    "ForeignHandleError",
    "GUARD_BYTE",
    "GlobalMemoryBuffer",
    "GuardViolationError",
    "LeaseError",
    "Mode",
    "ModeError",
    "OverlapError",
    "POISON_BYTE",
    "Persistent",
    "Phase",
    "PhaseError",
    "Plan",
    "PlannedAllocator",
    "Planner",
    "RecordMode",
    "RecordPhase",
    "RecordStep",
    "Recorder",
    "ShapeError",
    "SpecError",
    "SpecSet",
    "StaleLeaseError",
    "Step",
    "StepError",
    "TraceError",
    "replay",
    "report",
    "sweep",
]
