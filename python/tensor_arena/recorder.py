"""Record, then plan: learn buffer specs from recorded steps by site name.

While recording, ``s.temp(name, shape, dtype)`` returns an ordinary
``torch.empty`` tensor on the recorder's device (allocation allowed) and the
site's element type, the shape its buffer must hold (by the one shape rule:
the request with the most elements, or the largest of each dimension for a
site opted in with :meth:`Recorder.per_dimension`) and phase span are
learned, per mode, with the rules of the Rust ``Recorder`` (docs/record.md).
:meth:`Recorder.freeze` plans what was learned, reserves one slab, copies the
persistent buffers into it, and from then on the same calls lease planned
buffers: views of the slab, nothing allocated. The learned specs save to and
load from the Rust crate's TOML spec files.
"""

import contextlib

import torch

from . import _native

__all__ = ["Persistent", "RecordMode", "RecordPhase", "RecordStep", "Recorder"]

DEFAULT_MODE = "default"


def _key(mode, name):
    """How declare_on and the native core key a name: bare in the default mode, (mode, name) otherwise."""
    return name if mode in (None, DEFAULT_MODE) else (mode, name)


class RecordMode:
    """A mode of a :class:`Recorder` (``train``, ``eval``, ...): its own phases and sites.

    ``mode.phase(name)``, ``mode.bound(...)`` and ``mode.per_dimension(...)`` declare
    in it; ``recorder.step(mode)`` runs a step of it.
    """

    __slots__ = ("_rec", "name", "index")

    def __init__(self, recorder, name, index):
        self._rec = recorder
        self.name = name
        self.index = index

    def phase(self, name):
        """Declares the next phase of this mode."""
        return self._rec.phase(name, mode=self)

    def bound(self, name, shape, dtype=torch.float32):
        """Declares the largest shape site ``name`` of this mode must hold (see :meth:`Recorder.bound`)."""
        self._rec.bound(name, shape, dtype, mode=self)

    def per_dimension(self, name, dtype=torch.float32):
        """Opts site ``name`` of this mode in to per-dimension limits (see :meth:`Recorder.per_dimension`)."""
        self._rec.per_dimension(name, dtype, mode=self)

    def __eq__(self, other):
        return isinstance(other, RecordMode) and other._rec is self._rec and other.index == self.index

    def __hash__(self):
        return hash((id(self._rec), self.index))

    def __repr__(self):
        return f"RecordMode({self.name!r}, index={self.index})"


class RecordPhase:
    """A phase declared on a :class:`Recorder`, in one mode."""

    __slots__ = ("name", "index", "mode")

    def __init__(self, name, index, mode=DEFAULT_MODE):
        self.name = name
        self.index = index
        self.mode = mode

    def __repr__(self):
        return f"RecordPhase({self.name!r}, index={self.index}, mode={self.mode!r})"


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
        self._modes = [RecordMode(self, DEFAULT_MODE, 0)]
        self._phases = []
        self._persistent = {}  # site index -> (Persistent, tensor while recording)
        self._frozen = None  # (arena, handles by site index, native phases by index)
        self._plans = 0

    # Declarations ---------------------------------------------------------

    def mode(self, name):
        """Declares a mode: a kind of step (``train``, ``eval``, ...) with its own phases and sites.

        Persistent buffers are shared by every mode; sites of different modes are planned to
        share bytes (a step runs in one mode). The same site name in two modes is two sites.
        """
        if self._frozen is not None:
            raise _native.SpecError(f"mode '{name}' declared after freeze(); call rerecord() first")
        mode = RecordMode(self, name, self._core.mode(name))
        self._modes.append(mode)
        return mode

    @property
    def default_mode(self):
        """The default mode: the one :meth:`step` runs in without a mode."""
        return self._modes[0]

    @property
    def modes(self):
        """Every mode, the default one first."""
        return list(self._modes)

    def _mode(self, mode):
        """The RecordMode for a RecordMode, a mode's name, or None (the default mode)."""
        if mode is None:
            return self._modes[0]
        if isinstance(mode, RecordMode):
            if mode._rec is not self:
                raise _native.ModeError(f"mode '{mode.name}' belongs to another recorder")
            return mode
        for m in self._modes:
            if m.name == mode:
                return m
        raise _native.ModeError(
            f"no mode named {mode!r} in this recorder (modes: {[m.name for m in self._modes]}); declare it with Recorder.mode"
        )

    def phase(self, name, *, mode=None):
        """Declares the next phase of ``mode`` (default: the default mode); phases run in
        declaration order. Declare them before the first step."""
        m = self._mode(mode)
        if self._frozen is not None:
            raise _native.SpecError(f"phase '{name}' declared after freeze(); call rerecord() first")
        index = self._core.phase(name, m.index)
        phase = RecordPhase(name, index, m.name)
        self._phases.append(phase)
        return phase

    def bound(self, name, shape, dtype=torch.float32, *, mode=None):
        """Declares up front the largest shape site ``name`` of ``mode`` must hold, so the
        worst case need not be recorded.

        By the site's rule: its element count (any later request of no more elements fits),
        or each dimension for a site opted in with :meth:`per_dimension`. Recorded requests
        can still raise it; a site bounded but never requested lives for the whole step.
        """
        self._core.bound(self._mode(mode).index, name, [int(d) for d in shape], dtype)

    def per_dimension(self, name, dtype=torch.float32, *, mode=None):
        """Opts site ``name`` of ``mode`` in to per-dimension limits, before its first request:
        it learns the largest of each dimension (keeping its number of dimensions) and, frozen,
        refuses a view beyond any of them even when the elements would fit."""
        self._core.per_dimension(self._mode(mode).index, name, dtype)

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
    def step(self, mode=None):
        """One step of ``mode`` (a :class:`RecordMode`, a mode's name, or None for the default
        mode): a context manager yielding a :class:`RecordStep`."""
        m = self._mode(mode)
        if self._frozen is not None:
            arena, handles, phases = self._frozen
            with arena.step(mode=m.name) as native:
                yield RecordStep(self, native, handles, phases, m)
            return
        self._core.begin_step(m.index)
        s = RecordStep(self, None, None, None, m)
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

        The set's modes and phases must be this recorder's, in order; its persistent buffers
        are declared.
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
        plan = planner.plan()
        arena = plan.reserve(self.device, checked=self._checked)
        self._core.freeze(plan)
        # A site never sized (opted in to per-dimension limits, never requested) has no buffer.
        handles = [buffers.get(key) for key in self._core.sites]
        native_phases = {(p.mode, p.index): phases[_key(p.mode, p.name)] for p in self._phases}
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
        self._core.rerecord()
        self._frozen = None


class RecordStep:
    """One step of a :class:`Recorder`: temporaries by site name, persistent buffers by handle."""

    def __init__(self, recorder, native, handles, phases, mode):
        self._rec = recorder
        self._native = native  # the arena Step once frozen
        self._handles = handles
        self._phases = phases
        self._mode = mode
        self._live = {}  # site name -> (index, tensor)

    @property
    def mode(self):
        """The step's mode (a :class:`RecordMode`)."""
        return self._mode

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

        Recording: a fresh ``torch.empty`` tensor, and the request is learned for the step's
        mode. Frozen: the site's planned buffer viewed with ``shape`` (no allocation); a site
        never recorded in the step's mode raises ``SpecError`` (``UnrecordedSite``, naming the
        mode), a shape its buffer cannot hold by the one shape rule (more elements than the
        padded capacity; for a per-dimension site, a dimension beyond the padded one) raises
        ``CapacityError`` (``ExceedsRecorded``, naming the rule in ``e.rule``).
        """
        shape = [int(d) for d in shape]
        core = self._rec._core
        if self._native is None:
            index = core.request(name, shape, dtype)
            tensor = torch.empty(shape, dtype=dtype, device=self._rec.device)
        else:
            index = core.frozen_site(name, shape, dtype, self._mode.index)
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
        """Moves the step to ``phase``, a phase of the step's mode; phases only move forward."""
        mode = self._rec._mode(phase.mode)
        if self._native is None:
            self._rec._core.enter(mode.index, phase.index)
        else:
            self._native.enter(self._phases[(phase.mode, phase.index)])
