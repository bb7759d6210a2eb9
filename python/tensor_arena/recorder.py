"""Record, then plan: learn buffer specs from recorded steps by site name.

While recording, ``s.temp(name, shape, dtype)`` returns an ordinary
``torch.empty`` tensor on the recorder's device (allocation allowed) and the
site's element type, largest shape per dimension and phase span are learned,
with the rules of the Rust ``Recorder`` (docs/record.md).
:meth:`Recorder.freeze` plans what was learned, reserves one slab, copies the
persistent buffers into it, and from then on the same calls lease planned
buffers: views of the slab, nothing allocated. The learned specs save to and
load from the Rust crate's TOML spec files.
"""

import contextlib

import torch

from . import _native

__all__ = ["Persistent", "RecordPhase", "RecordStep", "Recorder"]


class RecordPhase:
    """A phase declared on a :class:`Recorder`."""

    __slots__ = ("name", "index")

    def __init__(self, name, index):
        self.name = name
        self.index = index

    def __repr__(self):
        return f"RecordPhase({self.name!r}, index={self.index})"


class Persistent:
    """A persistent buffer of a :class:`Recorder` (weights, optimizer state)."""

    __slots__ = ("name", "shape", "dtype", "index")

    def __init__(self, name, shape, dtype, index):
        self.name = name
        self.shape = tuple(shape)
        self.dtype = dtype
        self.index = index

    def __repr__(self):
        return f"Persistent({self.name!r}, shape={self.shape}, dtype={self.dtype})"


class Recorder:
    """Learns specs from recorded steps, then serves the same requests from a plan.

    ``device``: where recorded tensors and the slab live (any torch device).
    ``rounding``, ``offset_align``, ``strategy``: the planner's settings.
    ``checked``: checked mode of the frozen arena (None: ``TENSOR_ARENA_CHECKED``).
    """

    def __init__(self, device="cpu", *, rounding="inner16", offset_align=512, strategy="auto", checked=None):
        self.device = torch.device(device)
        self._config = dict(rounding=rounding, offset_align=offset_align, strategy=strategy)
        self._checked = checked
        self._core = _native.RecorderCore(rounding)
        self._phases = []
        self._persistent = {}  # site index -> (Persistent, tensor while recording)
        self._frozen = None  # (arena, handles by site index, native phases by index)
        self._plans = 0

    # Declarations ---------------------------------------------------------

    def phase(self, name):
        """Declares the next phase; phases run in declaration order. Declare them before the first step."""
        index = self._core.phase(name)
        phase = RecordPhase(name, index)
        self._phases.append(phase)
        return phase

    def persistent(self, name, shape, dtype=torch.float32):
        """Declares a persistent buffer; its contents survive steps, freezing and re-recording.

        Declaring the same name again with the same shape and dtype returns the same handle.
        """
        for handle, _ in self._persistent.values():
            if handle.name == name and handle.shape == tuple(shape) and handle.dtype == dtype:
                return handle
        if self._frozen is not None:
            raise _native.SpecError(f"persistent buffer '{name}' declared after freeze(); call rerecord() first")
        index = self._core.persistent(name, list(shape), dtype)
        handle = Persistent(name, shape, dtype, index)
        tensor = torch.zeros(tuple(shape), dtype=dtype, device=self.device)
        self._persistent[index] = (handle, tensor)
        return handle

    def tensor(self, handle):
        """The current tensor of a persistent buffer: its own tensor while recording, the slab view once frozen.

        Fetch it again after :meth:`freeze` and :meth:`rerecord`: the contents move.
        """
        if self._frozen is not None:
            arena, handles, _ = self._frozen
            return arena.persistent(handles[handle.index])
        return self._persistent[handle.index][1]

    # Steps -----------------------------------------------------------------

    @contextlib.contextmanager
    def step(self):
        """One step (a context manager yielding a :class:`RecordStep`)."""
        if self._frozen is not None:
            arena, handles, phases = self._frozen
            with arena.step() as native:
                yield RecordStep(self, native, handles, phases)
            return
        self._core.begin_step()
        s = RecordStep(self, None, None, None)
        try:
            yield s
        finally:
            s._live.clear()
            self._core.end_step()

    # Plans and specs -------------------------------------------------------

    def specs(self):
        """Everything learned so far, as a :class:`SpecSet` (persistent buffers as declared)."""
        return self._core.specs()

    def save(self, path):
        """Writes the learned specs as a spec file (the Rust crate's format)."""
        self.specs().save(path)

    def preload(self, specs):
        """Merges a :class:`SpecSet` (or a spec-file path) as if its steps had been recorded here.

        The set's phases must be this recorder's, in order; its persistent buffers are declared.
        Then :meth:`freeze` plans without any recording step.
        """
        if self._frozen is not None:
            raise _native.SpecError("the recorder is frozen; call rerecord() before preloading specs")
        if not isinstance(specs, _native.SpecSet):
            specs = _native.SpecSet.load(specs)
        self._core.preload(specs)
        for b in specs.buffers:
            if b["lifetime"] == "persistent":
                self.persistent(b["name"], b["shape"], b["dtype"])

    @property
    def is_frozen(self):
        """Whether requests are served from a plan."""
        return self._frozen is not None

    @property
    def arena(self):
        """The frozen arena (None while recording)."""
        return None if self._frozen is None else self._frozen[0]

    @property
    def plan(self):
        """The frozen plan (None while recording)."""
        return None if self._frozen is None else self._frozen[0].plan

    @property
    def recorded_steps(self):
        """Steps recorded here."""
        return self._core.recorded_steps

    @property
    def plans(self):
        """How many times :meth:`freeze` planned (each one slab allocation)."""
        return self._plans

    def freeze(self):
        """Plans what was learned, reserves one slab, copies the persistent buffers into it.

        Returns the :class:`Plan`. From now on steps lease planned buffers. Does nothing
        but return the plan if already frozen.
        """
        if self._frozen is not None:
            return self._frozen[0].plan
        specs = self._core.specs()
        planner = _native.Planner(**self._config)
        phases, buffers = specs.declare_on(planner)
        arena = planner.plan().reserve(self.device, checked=self._checked)
        handles = [buffers[name] for name in self._core.sites]
        native_phases = [phases[p.name] for p in self._phases]
        for index, (_, tensor) in self._persistent.items():
            arena.persistent(handles[index]).copy_(tensor)
        self._frozen = (arena, handles, native_phases)
        self._persistent = {i: (h, None) for i, (h, _) in self._persistent.items()}
        self._plans += 1
        return arena.plan

    def rerecord(self):
        """Goes back to recording, keeping what was learned and the persistent contents.

        Use it between steps after a ``CapacityError`` (``ExceedsRecorded``); the next
        :meth:`freeze` plans the union (one more slab allocation).
        """
        if self._frozen is None:
            return
        arena, handles, _ = self._frozen
        self._persistent = {
            i: (h, arena.persistent(handles[i]).clone()) for i, (h, _) in self._persistent.items()
        }
        self._frozen = None


class RecordStep:
    """One step of a :class:`Recorder`: temporaries by site name, persistent buffers by handle."""

    def __init__(self, recorder, native, handles, phases):
        self._rec = recorder
        self._native = native  # the arena Step once frozen
        self._handles = handles
        self._phases = phases
        self._live = {}  # site name -> (index, tensor)

    @property
    def is_recording(self):
        """Whether this step is being recorded."""
        return self._native is None

    @property
    def phase(self):
        """The current phase's name."""
        return self._rec._core.phase_name if self._native is None else self._native.phase

    def temp(self, name, shape, dtype=torch.float32):
        """A temporary of ``shape`` for the site ``name`` (any stable name).

        Recording: a fresh ``torch.empty`` tensor, and the request is learned. Frozen: the
        site's planned buffer viewed with ``shape`` (no allocation); a site never recorded
        raises ``SpecError`` (``UnrecordedSite``), a dimension beyond the planned (padded)
        maximum raises ``CapacityError`` (``ExceedsRecorded``).
        """
        shape = [int(d) for d in shape]
        core = self._rec._core
        if self._native is None:
            index = core.request(name, shape, dtype)
            tensor = torch.empty(shape, dtype=dtype, device=self._rec.device)
        else:
            index = core.frozen_site(name, shape, dtype)
            tensor = self._native.lease(self._handles[index], shape)
        self._live[name] = (index, tensor)
        return tensor

    def lease(self, handle):
        """A persistent buffer's tensor (declared shape)."""
        return self._rec.tensor(handle)

    def release(self, *leases):
        """Ends temporaries early: each argument is a site name or the tensor :meth:`temp` returned."""
        for x in leases:
            name = x if isinstance(x, str) else self._name_of(x)
            index, _ = self._live.pop(name, (None, None))
            if index is None:
                raise _native.StaleLeaseError(f"site '{name}' has no live temporary in this step")
            if self._native is None:
                self._rec._core.release(index)
            else:
                self._native.release(self._handles[index])

    def _name_of(self, tensor):
        for name, (_, t) in self._live.items():
            if t is tensor:
                return name
        raise _native.ForeignHandleError("not a live temporary of this step: pass the tensor temp() returned, or its site name")

    def enter(self, phase):
        """Moves the step to ``phase``; phases only move forward."""
        if self._native is None:
            self._rec._core.enter(phase.index)
        else:
            self._native.enter(self._phases[phase.index])
