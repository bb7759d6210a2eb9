"""A drop-in for megatron-core's ``GlobalMemoryBuffer`` on a planned arena.

megatron-core (``megatron/core/utils.py``) keeps one flat buffer per ``(name, dtype)``,
grows it with ``torch.empty`` when a request needs more elements and hands out
``buffer[0:n].view(*tensor_shape)``; the caller must not use two tensors of one name
at once. :class:`GlobalMemoryBuffer` keeps that call, its parameters and that contract:

- while recording, requests are served the way megatron serves them (a growing flat
  buffer per ``(name, dtype)``) and each site's largest element count is learned on a
  :class:`~tensor_arena.Recorder`;
- at an iteration boundary, once every mode was recorded ``record_steps`` times, one slab
  is planned and reserved, and from then on every request is a view of it: a dict look-up,
  a capacity check, a slice and a view, nothing allocated;
- a request beyond the plan (more elements, or a new ``(name, dtype)``) is served from the
  growing fallback buffer, counted, and the plan is re-made at the next boundary, unless
  ``strict=True``, which raises ``CapacityError`` (``ExceedsRecorded``) or ``SpecError``
  (``UnrecordedSite``) instead.

Iteration boundaries: :meth:`GlobalMemoryBuffer.step` / :meth:`~GlobalMemoryBuffer.next_step`
explicitly, or, after :func:`install`, by themselves: every ``torch.optim`` optimizer step
and the end of every backward pass that asked for a buffer (see docs/python.md).
"""

import contextlib
import math
import warnings

import torch

from . import _native
from .recorder import RecordMode, Recorder

__all__ = ["GlobalMemoryBuffer", "install", "uninstall"]

# Element types the planner lays out; any other dtype is served megatron's way, unplanned.
_PLANNED_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.uint8)


def current_device():
    """Megatron's device rule: the current accelerator (``torch.npu`` under torch_npu, else
    CUDA), or the CPU when there is none."""
    npu = getattr(torch, "npu", None)
    if npu is not None and npu.is_available():
        return torch.device("npu", npu.current_device())
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


# The autograd engine's current graph task (-1 outside a backward pass); private, so absent
# from some torch builds, where the end of backward is no boundary.
_graph_task = getattr(torch._C, "_current_graph_task_id", lambda: -1)


def _in_backward():
    return _graph_task() != -1


class GlobalMemoryBuffer:
    """``get_tensor(tensor_shape, dtype, name, mem_alloc_context=None)`` served from one planned slab.

    ``device``: where the slab and fallback buffers live; None (the default) is megatron's rule,
    the current accelerator when the memory is allocated (``torch.npu`` under torch_npu, CUDA,
    else the CPU). ``record_steps``: iterations recorded in each mode before the plan is frozen
    (>= 1). ``strict``: a frozen plan refuses requests beyond it (``CapacityError``,
    ``SpecError``) instead of serving them from the fallback and re-planning. ``modes``: mode
    names declared up front (``("train", "eval")``), each recorded before freezing. ``specs``: a
    spec file (or ``SpecSet``) to plan from at once. ``warn_after``: iterations (or, with no
    boundary seen, repeats of the first request) after which a buffer that still cannot freeze
    warns why. Other keywords go to :class:`~tensor_arena.Recorder` (``checked=True``: every
    frozen request goes through the Rust lease book, with guard bytes and poisoning).

    Sites are keyed as megatron keys them, by ``(name, dtype)``; the view's shape is free within
    the site's element capacity (the one shape rule).
    """

    def __init__(
        self,
        device=None,
        *,
        record_steps=1,
        strict=False,
        specs=None,
        modes=(),
        warn_after=50,
        **recorder_options,
    ):
        if record_steps < 1:
            raise ValueError("record_steps must be at least 1")
        self._device = None if device is None else torch.device(device)
        self.recorder = Recorder(self._device or "cpu", **recorder_options)
        self.record_steps = record_steps
        self.strict = strict
        self.warn_after = warn_after
        for m in modes:
            self.recorder.mode(m)
        self._recorded = {m: 0 for m in modes}  # recorded iterations per mode
        self._mode = None  # the current iteration's mode name (None: the default mode)
        self._busy = False  # a request since the last boundary
        self._step_cm = self._step = None  # a Recorder step: recording, or checked mode
        self._fast = {}  # (name, dtype) -> (flat slab view, capacity): the current mode's plan
        self._fast_by_mode = {}
        self._caps = {}  # checked mode: (name, dtype) -> capacity, leased through the lease book
        self._caps_by_mode = {}
        self._relearn = None  # after a re-record: recorded iterations left before the next plan
        self._held = False  # inside a step() context
        self._fallback = {}  # (name, dtype) -> flat tensor, megatron-style
        self._unplanned = set()  # (name, dtype) served megatron's way for good
        self._pending = {}  # (mode, name, dtype) -> elements beyond the plan, for the re-plan
        self._contexts = {}  # (name, dtype) -> mem_alloc_context it was asked with
        self._queued_task = None
        self._first = None  # the first request since the last boundary, and its repeats
        self._repeats = 0
        self._warned = set()
        self._counts = dict(
            boundaries=0, plans=0, replans=0, fallback_requests=0, fallback_allocations=0
        )
        if specs is not None:
            self.recorder.preload(specs)
            self._freeze()

    # Megatron's call ---------------------------------------------------------

    def get_tensor(self, tensor_shape, dtype, name, mem_alloc_context=None, *, arena_mode=None):
        """A ``tensor_shape`` view for ``(name, dtype)``, valid until the next request of that
        ``(name, dtype)``, megatron's contract. ``mem_alloc_context``: a context manager factory
        entered around any allocation this request makes (a slab is made at a boundary, inside
        the context its sites were asked with). ``arena_mode``: the iteration's mode (None: the
        current one); another mode than the current iteration's raises ``ModeError``."""
        n = math.prod(tensor_shape)
        hit = self._fast.get((name, dtype))
        if hit is not None and n <= hit[1] and arena_mode is None:
            return hit[0][:n].view(*tensor_shape)
        return self._serve(tensor_shape, dtype, name, n, mem_alloc_context, arena_mode)

    def _serve(self, shape, dtype, name, n, context, mode):
        self._enter_mode(mode, name)
        key = (name, dtype)
        if context is not None:
            self._contexts.setdefault(key, context)
        self._busy = True
        self._watch(key, n)
        if _in_backward():
            self._queue_backward_end()
        hit = self._fast.get(key)
        if hit is not None and n <= hit[1]:
            return hit[0][:n].view(*shape)
        rec = self.recorder
        if key in self._unplanned:
            return self._from_fallback(key, n, shape)
        if dtype not in _PLANNED_DTYPES:
            if self.strict:
                raise _native.ShapeError(
                    f"get_tensor('{name}'): dtype {dtype} is not one the planner lays out "
                    f"(float32, float16, bfloat16, int32, uint8); strict=True refuses to serve it"
                )
            self._unplanned.add(key)
            self._warn_once(
                ("dtype", key),
                f"tensor_arena.GlobalMemoryBuffer: '{name}' in {dtype} is served megatron's way "
                f"(a growing buffer of its own): the planner lays out float32, float16, bfloat16, "
                f"int32 and uint8 only",
            )
            return self._from_fallback(key, n, shape)
        site = self._site(name, dtype)
        if not rec.is_frozen:
            self._open_step()
            index = rec._core.request(site, [n], dtype)
            rec._core.release(index)
            return self._from_fallback(key, n, shape)
        if self.strict:
            # The core's own check, for its error (ExceedsRecorded / UnrecordedSite).
            rec._core.frozen_site(site, [n], dtype, rec._mode(self._mode).index)
        cap = self._caps.get(key)
        if cap is not None and n <= cap:
            # Checked mode: through the Rust lease book (guards, poisoning).
            self._open_step()
            if site in self._step._live:
                self._step.release(site)
            return self._step.temp(site, [n], dtype).view(*shape)
        pkey = (self._mode, name, dtype)
        self._pending[pkey] = max(self._pending.get(pkey, 0), n)
        return self._from_fallback(key, n, shape)

    def _from_fallback(self, key, n, shape):
        self._counts["fallback_requests"] += 1
        buf = self._fallback.get(key)
        if buf is None or buf.numel() < n:
            context = self._contexts.get(key) or contextlib.nullcontext
            with context():
                buf = torch.empty(n, dtype=key[1], device=self.device, requires_grad=False)
            self._fallback[key] = buf
            self._counts["fallback_allocations"] += 1
        return buf[:n].view(*shape)

    @staticmethod
    def _site(name, dtype):
        return f"{name}/{str(dtype).replace('torch.', '')}"

    @property
    def device(self):
        """The device memory is allocated on: the one given, else megatron's rule now."""
        return self._device if self._device is not None else current_device()

    # Iterations ---------------------------------------------------------------

    def _mode_name(self, mode):
        if mode is None:
            return None
        return mode.name if isinstance(mode, RecordMode) else str(mode)

    def _enter_mode(self, mode, name):
        wanted = self._mode_name(mode)
        if wanted is None or wanted == (self._mode or self.recorder.default_mode.name):
            return
        if self._busy or self._held:
            current = self._mode or self.recorder.default_mode.name
            raise _native.ModeError(
                f"get_tensor('{name}') asks for mode '{wanted}' inside an iteration of mode "
                f"'{current}'; end the iteration first (next_step(), or a new step(mode))"
            )
        self._switch_mode(wanted)

    def _switch_mode(self, mode):
        rec = self.recorder
        if mode is not None and mode not in [m.name for m in rec.modes]:
            if rec.is_frozen:
                rec._mode(mode)  # raises ModeError naming the declared modes
            rec.mode(mode)
            self._recorded.setdefault(mode, 0)
        self._mode = mode
        self._select_mode()

    def _open_step(self):
        if self._step is None:
            self._step_cm = self.recorder.step(self._mode)
            self._step = self._step_cm.__enter__()

    def _queue_backward_end(self):
        task = _graph_task()
        if task != self._queued_task:
            self._queued_task = task
            torch.autograd.Variable._execution_engine.queue_callback(self._backward_end)

    def _backward_end(self):
        self._queued_task = None
        self.next_step()

    def _watch(self, key, n):
        """Counts repeats of the first request since the last boundary, to warn when no
        boundary ever comes."""
        if self.recorder.is_frozen and not self._pending:
            return
        if self._first is None:
            self._first = (key, n)
        elif self._first == (key, n):
            self._repeats += 1
            if self._repeats == self.warn_after and self._counts["boundaries"] == 0:
                self._warn_once(
                    "boundary",
                    f"tensor_arena.GlobalMemoryBuffer: '{key[0]}' was asked for {self._repeats + 1} "
                    f"times with no iteration boundary (no optimizer.step(), no backward pass that "
                    f"asked for a buffer, no next_step()), so the plan cannot freeze and requests "
                    f"are served megatron's way; call buffer.next_step() at the end of each "
                    f"iteration, or wrap it in `with buffer.step():`",
                )

    def _warn_once(self, what, message):
        if what not in self._warned:
            self._warned.add(what)
            warnings.warn(message, RuntimeWarning, stacklevel=4)

    def next_step(self):
        """An iteration boundary: ends the current iteration (every view of a checked-mode lease
        ends), freezes the plan once every mode was recorded ``record_steps`` times, and re-plans
        when requests went beyond the plan. An iteration that asked for nothing does not count."""
        rec = self.recorder
        if self._step is not None:
            cm, self._step_cm, self._step = self._step_cm, None, None
            cm.__exit__(None, None, None)
        if not rec.is_frozen and self._fast_by_mode:
            # recorder.rerecord() was called directly: record again, as rerecord() does.
            self._thaw()
        if not self._busy:
            return
        self._busy = False
        self._first, self._repeats = None, 0
        self._counts["boundaries"] += 1
        if rec.is_frozen:
            if self._pending:
                self._replan()
            return
        mode = self._mode or rec.default_mode.name
        self._recorded[mode] = self._recorded.get(mode, 0) + 1
        if self._relearn is not None:
            self._relearn -= 1
            if self._relearn <= 0:
                self._freeze()
            return
        if all(c >= self.record_steps for c in self._recorded.values()):
            self._freeze()
        elif self._counts["boundaries"] >= self.warn_after:
            missing = [m for m, c in self._recorded.items() if c < self.record_steps]
            self._warn_once(
                "modes",
                f"tensor_arena.GlobalMemoryBuffer: not frozen after {self._counts['boundaries']} "
                f"iterations: mode(s) {missing} recorded fewer than record_steps={self.record_steps} "
                f"times (run them, or do not declare them)",
            )

    def step(self, mode=None):
        """A context manager around one iteration of ``mode``: a boundary at entry and exit."""
        buffer = self
        wanted = self._mode_name(mode)

        class _Step:
            def __enter__(self):
                buffer.next_step()
                buffer._switch_mode(wanted)
                buffer._held = True
                return buffer

            def __exit__(self, *exc):
                buffer._held = False
                buffer.next_step()
                return False

        return _Step()

    # Plans ----------------------------------------------------------------------

    def _freeze(self):
        rec = self.recorder
        rec.device = self.device
        contexts = {id(c): c for c in self._contexts.values()}
        context = next(iter(contexts.values())) if len(contexts) == 1 else contextlib.nullcontext
        if len(contexts) > 1:
            self._warn_once(
                "contexts",
                "tensor_arena.GlobalMemoryBuffer: sites were asked for with different "
                "mem_alloc_context factories; the slab is allocated outside all of them",
            )
        with context():
            rec.freeze()
        self._counts["plans"] += 1
        arena = rec.arena
        slab, views, caps = arena.slab, {}, {}
        for b in rec.plan.buffers:
            if b["lifetime"] == "persistent":
                continue
            mode = b["mode"] or rec.default_mode.name
            key = (b["name"].rpartition("/")[0], b["dtype"])
            caps.setdefault(mode, {})[key] = b["capacity"]
            if not arena.checked:
                # `.data`: a version counter of its own per site, as megatron's separate buffers
                # have, so an in-place write into one site does not trip autograd's check on a
                # view of another site saved for backward.
                flat = slab.narrow(0, b["offset"], b["bytes"]).view(b["dtype"]).data
                views.setdefault(mode, {})[key] = (flat, b["capacity"])
        for m in rec.modes:
            views.setdefault(m.name, {})
            caps.setdefault(m.name, {})
        self._fast_by_mode, self._caps_by_mode = views, caps
        for key in list(self._fallback):
            if any(key in sites for sites in caps.values()):
                del self._fallback[key]
        self._relearn = None
        self._select_mode()

    def _select_mode(self):
        mode = self._mode or self.recorder.default_mode.name
        self._fast = self._fast_by_mode.get(mode, {})
        self._caps = self._caps_by_mode.get(mode, {}) if self.recorder.arena is not None and self.recorder.arena.checked else {}

    def _replan(self):
        """Plans the union of the plan and the requests beyond it: one more slab."""
        rec = self.recorder
        pending, self._pending = self._pending, {}
        rec.rerecord()
        by_mode = {}
        for (mode, name, dtype), n in pending.items():
            by_mode.setdefault(mode, []).append((name, dtype, n))
        for mode, sites in by_mode.items():
            with rec.step(mode):
                for name, dtype, n in sites:
                    rec._core.release(rec._core.request(self._site(name, dtype), [n], dtype))
        self._counts["replans"] += 1
        self._freeze()
        if self._counts["replans"] == self.warn_after:
            self._warn_once(
                "replans",
                f"tensor_arena.GlobalMemoryBuffer: re-planned {self.warn_after} times: the "
                f"requests keep growing; declare the largest shapes up front with "
                f"buffer.recorder.bound(name + '/' + dtype, shape, dtype) or record longer",
            )

    def _thaw(self):
        self._fast_by_mode, self._fast, self._caps_by_mode, self._caps = {}, {}, {}, {}
        self._pending = {}
        self._busy = False  # what was asked for before the re-record is no recorded iteration
        self._relearn = self.record_steps

    def rerecord(self):
        """Goes back to recording (after a strict-mode ``CapacityError``, between iterations),
        keeping what was learned: the next ``record_steps`` iterations (of any mode) are recorded,
        then the next plan holds the union (one more slab). ``buffer.recorder.rerecord()`` does
        the same, from the next boundary on."""
        if self._step is not None:
            cm, self._step_cm, self._step = self._step_cm, None, None
            cm.__exit__(None, None, None)
        self._busy = False
        self.recorder.rerecord()
        self._thaw()

    # Reports --------------------------------------------------------------------

    @property
    def arena(self):
        """The planned arena once frozen (None while recording); ``arena.slab`` is the slab."""
        return self.recorder.arena

    @property
    def is_frozen(self):
        """Whether requests are served from a plan."""
        return self.recorder.is_frozen

    def stats(self):
        """Counters: ``boundaries`` that ended an iteration with requests off the plan (an
        iteration served wholly by the plan does not count), ``plans`` made (one slab each),
        ``replans`` (plans made because requests went beyond the plan), ``fallback_requests``
        served megatron's way (while recording, beyond the plan, unplanned dtypes) and the
        ``fallback_allocations`` (``torch.empty``) they made."""
        return dict(self._counts, frozen=self.is_frozen)


# Installing into megatron-core ---------------------------------------------------

_installed = None  # (buffer, hooks, originals)


def install(buffer=None, **options):
    """Makes a :class:`GlobalMemoryBuffer` megatron-core's global memory buffer; returns it.

    Call it after ``parallel_state.initialize_model_parallel`` (or before: the buffer is then
    installed by it). Megatron's layers look the global up at each call
    (``get_global_memory_buffer()``), so every later request reaches the buffer; a
    ``destroy_model_parallel`` / ``initialize_model_parallel`` pair installs it again. Iteration
    boundaries come by themselves: each ``torch.optim`` optimizer step (megatron's optimizers
    wrap one) and the end of each backward pass that asked for a buffer. ``options`` go to
    :class:`GlobalMemoryBuffer` when no ``buffer`` is given. :func:`uninstall` undoes it.
    """
    global _installed
    from megatron.core import parallel_state

    if _installed is not None:
        uninstall()
    buf = buffer if buffer is not None else GlobalMemoryBuffer(**options)

    def _set_global_memory_buffer():
        parallel_state._GLOBAL_MEMORY_BUFFER = buf

    originals = {"_set_global_memory_buffer": parallel_state._set_global_memory_buffer}
    parallel_state._set_global_memory_buffer = _set_global_memory_buffer
    parallel_state._GLOBAL_MEMORY_BUFFER = buf
    fsdp = _fsdp_utils()
    if fsdp is not None:
        originals["fsdp"] = getattr(fsdp, "_GLOBAL_MEMORY_BUFFER", None)
        fsdp._GLOBAL_MEMORY_BUFFER = buf
    from torch.optim.optimizer import register_optimizer_step_post_hook

    hook = register_optimizer_step_post_hook(lambda *_: buf.next_step())
    _installed = (buf, hook, originals)
    return buf


def uninstall():
    """Undoes :func:`install`: megatron-core gets a buffer of its own again (if it had one)."""
    global _installed
    if _installed is None:
        return
    from megatron.core import parallel_state
    from megatron.core.utils import GlobalMemoryBuffer as MegatronBuffer

    buf, hook, originals = _installed
    _installed = None
    hook.remove()
    parallel_state._set_global_memory_buffer = originals["_set_global_memory_buffer"]
    if parallel_state._GLOBAL_MEMORY_BUFFER is buf:
        parallel_state._GLOBAL_MEMORY_BUFFER = (
            MegatronBuffer() if parallel_state.model_parallel_is_initialized() else None
        )
    fsdp = _fsdp_utils()
    if fsdp is not None and "fsdp" in originals:
        fsdp._GLOBAL_MEMORY_BUFFER = originals["fsdp"]


def _fsdp_utils():
    """Megatron-FSDP keeps a global buffer of its own (megatron_fsdp/utils.py), when present."""
    try:
        from megatron.core.distributed.fsdp.src.megatron_fsdp import utils
    except Exception:  # noqa: BLE001 - absent, or its optional dependencies are
        return None
    return utils
