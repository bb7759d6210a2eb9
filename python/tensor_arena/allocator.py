"""The planned allocator for unmodified PyTorch training loops.

torch's own allocator slot (the pluggable allocator on CUDA and torch_npu, the
CPU allocator through a small C++ extension) is served by the tensor-arena
allocator library: the first steps are served by its caching fallback while
every request is recorded, then the recorded steps are planned into one slab
and every later step is served from it by request order, with the fallback
taking whatever deviates from the recording (counted, by reason)::

    import torch, tensor_arena as ta

    alloc = ta.PlannedAllocator("cpu")      # or "cuda", "npu"; policy keywords below
    alloc.install()                         # before the model is built
    model, opt = build()
    for batch in data:
        with alloc.step():                  # or alloc.auto_step(): one step per optimizer.step()
            loss = model(batch).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    print(alloc.summary())

Without editing the script: ``python -m tensor_arena.run train.py`` (see
:mod:`tensor_arena.run`). The library is one per process, so is the
allocator object. See docs/python.md and docs/allocator.md.
"""

import contextlib
import ctypes
import json
import math
import os
import pickle
import threading
import warnings
import weakref

from . import extensions

__all__ = [
    "AllocatorError",
    "BACKENDS",
    "PHASES",
    "PlannedAllocator",
    "library",
    "library_path",
]

#: The devices a :class:`PlannedAllocator` can serve.
BACKENDS = ("cpu", "cuda", "npu")

#: Request phases and their codes in the C ABI (``tensor_arena_set_phase``).
PHASES = {"train": 0, "eval": 1}

# torch's default CPU allocator holds the slot at priority 0; ours overrides it.
_CPU_PRIORITY = 1
_LIBRARY = None
_INSTANCE = None
# torch_npu's setter and the NPU extension's hook for it (csrc/npu_allocator.cpp).
_NPU_HOOKS = (
    ("set_get_device_stats_fn", "get_device_stats"),
    ("set_reset_peak_status_fn", "reset_peak_status"),
    ("set_record_stream_fn", "record_stream"),
    ("set_erase_stream_fn", "erase_stream"),
    ("set_reset_fn", "reset"),
    ("set_memory_fraction_fn", "memory_fraction"),
)


class AllocatorError(RuntimeError):
    """The allocator library refused a call, or the allocator cannot be installed here."""


def library_path():
    """The shared library that exports the allocator's C ABI.

    ``$TENSOR_ARENA_ALLOC_LIB`` when set (for instance the standalone
    ``target/release/libtensor_arena_alloc.so``), else the package's own native
    module, which links the same crate and exports the same symbols.
    """
    env = os.environ.get("TENSOR_ARENA_ALLOC_LIB")
    if env:
        if not os.path.isfile(env):
            raise AllocatorError(f"TENSOR_ARENA_ALLOC_LIB={env} is not a file")
        return env
    from . import _native

    return _native.__file__


class _Library:
    """The C ABI through ctypes: typed functions and the JSON getters."""

    _JSON = ("stats_json", "report_json", "snapshot_json", "last_error")

    def __init__(self, path):
        self.path = path
        try:
            self.dll = ctypes.CDLL(path)
        except OSError as e:
            raise AllocatorError(f"cannot load the allocator library {path}: {e}") from None
        c = ctypes
        sigs = {
            "tensor_arena_alloc": ([c.c_size_t, c.c_int, c.c_void_p], c.c_void_p),
            "tensor_arena_free": ([c.c_void_p, c.c_size_t, c.c_int, c.c_void_p], None),
            "tensor_arena_configure": ([c.c_char_p], c.c_int),
            "tensor_arena_step_begin": ([], c.c_int),
            "tensor_arena_step_end": ([], c.c_int),
            "tensor_arena_reset": ([], c.c_int),
        }
        for name in self._JSON:
            sigs[f"tensor_arena_{name}"] = ([c.c_char_p, c.c_size_t], c.c_size_t)
        for name, (args, res) in sigs.items():
            try:
                fn = getattr(self.dll, name)
            except AttributeError:
                raise AllocatorError(
                    f"{path} does not export {name}: not the tensor-arena allocator library"
                ) from None
            fn.argtypes, fn.restype = args, res
        # The rest of torch's allocator contract (statistics in the caching
        # allocator's schema, stream-safe reuse, empty_cache, the memory
        # fraction): typed when exported; the device paths need them and say
        # so (extensions.library_table) when they are missing.
        contract = {
            "tensor_arena_device_stats_json": ([c.c_char_p, c.c_size_t], c.c_size_t),
            "tensor_arena_reset_peak_stats": ([], None),
            "tensor_arena_reset_accumulated_stats": ([], None),
            "tensor_arena_record_stream": ([c.c_void_p, c.c_void_p], None),
            "tensor_arena_erase_stream": ([c.c_void_p, c.c_void_p], None),
            "tensor_arena_empty_cache": ([], None),
            "tensor_arena_set_memory_fraction": ([c.c_double, c.c_int], c.c_int),
            "tensor_arena_cache_info": ([], c.c_size_t),
            "tensor_arena_set_phase": ([c.c_int], c.c_int),
            "tensor_arena_alloc_phase": ([c.c_size_t, c.c_int, c.c_void_p, c.c_int], c.c_void_p),
            "tensor_arena_set_step_thread": ([c.c_int], c.c_int),
        }
        for name, (args, res) in contract.items():
            fn = getattr(self.dll, name, None)
            if fn is not None:
                fn.argtypes, fn.restype = args, res

    def address(self, name):
        """The address of an exported function, for C callers (torch, the CPU extension)."""
        return ctypes.cast(getattr(self.dll, f"tensor_arena_{name}"), ctypes.c_void_p).value

    def text(self, name):
        fn = getattr(self.dll, f"tensor_arena_{name}")
        need = fn(None, 0)
        while True:
            buf = ctypes.create_string_buffer(need + 1)
            got = fn(buf, need + 1)
            if got <= need:
                return buf.value.decode("utf-8", "replace")
            need = got  # it grew between the calls

    def json(self, name):
        value = json.loads(self.text(name))
        if not value:
            # The library answers {} when it could not make its allocator (a backing that
            # did not load, say); its last error says why.
            raise AllocatorError(
                f"tensor_arena_{name}: the allocator library has no allocator: "
                f"{self.text('last_error') or 'no message'}"
            )
        return value

    def check(self, rc, what):
        if rc < 0:
            raise AllocatorError(f"{what}: {self.text('last_error') or 'no message'}")
        return rc


def library():
    """The process's allocator library (loaded once; see :func:`library_path`)."""
    global _LIBRARY
    if _LIBRARY is None:
        _LIBRARY = _Library(library_path())
    return _LIBRARY


def _backend(device):
    """``"cuda:1"`` -> ``("cuda", 1)``; ``"cuda"`` -> ``("cuda", None)``."""
    name = str(device)
    kind, colon, index = name.partition(":")
    if kind not in BACKENDS or (colon and not index.isdigit()) or (kind == "cpu" and index not in ("", "0")):
        raise ValueError(
            f"device must be one of {', '.join(BACKENDS)} (with an index for cuda and npu), not {name!r}"
        )
    return kind, (int(index) if colon and kind != "cpu" else None)


def _mib(n):
    return f"{n / 2**20:.2f} MiB"


def _percent_floor(share):
    # Floored so that 100% means every request, never a rounded 99.996%.
    return f"{math.floor(share * 10000) / 100:.2f}%"


class _PhaseMark:
    """What :meth:`PlannedAllocator.phase` returns: as a context manager, puts the previous mark back."""

    def __init__(self, alloc, previous):
        self._alloc = alloc
        self._previous = previous

    def __enter__(self):
        return self._alloc

    def __exit__(self, *exc):
        self._alloc._mark(self._previous)
        return False


class PlannedAllocator:
    """torch's allocator for ``device`` served by the planned allocator library.

    ``device``: ``"cpu"``, ``"cuda"`` or ``"npu"``. The library serves one
    device per process (a rank): ``"cuda:1"`` names it, a bare ``"cuda"``
    takes the device of the first request (torch passes its current device);
    requests for another device get NULL and are counted. ``policy`` keywords go to ``tensor_arena_configure`` as they are:
    ``warmup_steps`` (default 1: the first step, where the optimizer creates
    its state, is not planned), ``record_steps`` (2), ``replan_miss_steps``
    (2: steps with misses since the last re-plan), ``recent_steps`` (4), ``checked`` (default ``TENSOR_ARENA_CHECKED=1``)
    and ``platform`` (``"cuda"`` or ``"npu"``: the fallback's rounding). The
    library refuses unknown keys; the error names them.

    One per process: the library and torch's allocator slot are global.
    """

    def __init__(self, device="cpu", **policy):
        global _INSTANCE
        self.device, self.index = _backend(device)
        if _INSTANCE is not None:
            raise AllocatorError(
                f"a PlannedAllocator({_INSTANCE.device!r}) exists in this process already: "
                "the allocator library is configured once per process"
            )
        self._lib = library()
        config = {"backend": self.device, **policy}
        if self.index is not None:
            config["device"] = self.index
        try:
            text = json.dumps(config)
        except TypeError as e:
            raise ValueError(f"policy values must be JSON numbers, strings or booleans: {e}") from None
        self._lib.check(
            self._lib.dll.tensor_arena_configure(text.encode()),
            f"tensor_arena_configure({text})",
        )
        self.policy = dict(policy)
        self._installed = False
        self._pluggable = None
        #: The device extension serving torch's allocator slot (its path), or None.
        self.extension = None
        self._in_step = False
        self._hook = None
        self._pacer = None
        # Set by an engine's wrapped step method (tensor_arena.engines): the
        # engine's step ends the steps, the optimizer hook marks nothing.
        self._engine_steps = False
        self._engine_depth = 0
        self._phase = "train"
        # Steps without an optimizer (auto_step): whether an optimizer step
        # ended a step, and backward passes returned since the last boundary.
        self._optimizer_seen = False
        self._backwards = 0
        # Whether a torch optimizer existed when the second backward
        # returned (looked up once): a loop that accumulates gradients has
        # one and steps it after several backwards.
        self._optimizer_exists = None
        self._backward_patch = None
        _INSTANCE = self

    # ---- installing -----------------------------------------------------------------

    @property
    def library_path(self):
        """The shared library torch calls (``so_path`` of the pluggable allocator)."""
        return self._lib.path

    @property
    def installed(self):
        """Whether torch's allocator slot for the device is served by this allocator."""
        if self.device == "cpu" and self._installed:
            return bool(extensions.load("cpu").tensor_arena_cpu_installed())
        if self.device == "cuda" and self._installed and self.extension is not None:
            return bool(extensions.load("cuda").tensor_arena_cuda_installed())
        return self._installed

    def install(self):
        """Makes the allocator torch's allocator for the device; returns ``self``.

        CPU: the C++ extension (built at first use against the installed
        torch) takes torch's CPU allocator slot; tensors allocated before keep
        torch's own deleter. CUDA: the CUDA extension's ``CUDAPluggableAllocator``
        subclass, which answers the whole allocator contract (statistics,
        ``cacheInfo``, snapshot, ``record_stream``, ``empty_cache``, the memory
        fraction, ``torch.OutOfMemoryError``). torch_npu: its
        ``NPUPluggableAllocator`` over the NPU extension's alloc/free, with the
        extension's hooks handed to its setters. torch allows both only before
        the device's first allocation. Where a device extension cannot be
        built (no compiler), a warning says what is lost and the statistics,
        their resets and the snapshot are answered at Python level
        (:mod:`tensor_arena.torch_hooks`). See docs/allocator.md, "torch's
        allocator contract".
        """
        if self._installed:
            return self
        if self.device == "cpu":
            import torch  # noqa: F401  (the extension links torch's libc10)

            ext = extensions.load("cpu")
            try:
                alloc_phase = self._lib.address("alloc_phase")
            except AttributeError:
                raise AllocatorError(
                    f"{self._lib.path} does not export tensor_arena_alloc_phase: an allocator library "
                    "older than the CPU extension (rebuild the package)"
                ) from None
            rc = ext.tensor_arena_cpu_install(
                alloc_phase,
                self._lib.address("free"),
                self._lib.address("last_error"),
                _CPU_PRIORITY,
            )
            if rc != 0:
                raise AllocatorError(
                    "torch's CPU allocator slot is held by an allocator registered at a "
                    f"priority above {_CPU_PRIORITY}; the planned allocator was not installed"
                )
        elif self.device == "cuda":
            self._install_cuda()
        else:
            self._install_npu()
        self._installed = True
        return self

    def _device_extension(self, kind):
        """The device extension and the library's table for it, or ``(None, None)`` with a warning."""
        table = extensions.library_table(self._lib)
        try:
            return extensions.load(kind), table
        except extensions.ExtensionBuildError as e:
            warnings.warn(
                f"tensor-arena: the {kind} allocator extension could not be built, so torch gets the "
                "plain pluggable allocator: memory_stats(), memory_allocated(), max_memory_allocated(), "
                "memory_summary(), the peak and accumulated resets and the snapshot are answered at "
                "Python level from the library (C++ callers still get torch's error), graph capture is "
                "refused at Python level, and an out-of-memory gives a tensor with a null data pointer "
                "(a crash at its first use, after the library's log line) instead of "
                f"torch.OutOfMemoryError. Install a C++ compiler (g++) to fix this. Build error: {e}",
                RuntimeWarning,
                stacklevel=3,
            )
            return None, table

    def _install_cuda(self):
        import torch

        from . import torch_hooks

        if not torch.cuda.is_available():
            raise AllocatorError("PlannedAllocator('cuda'): torch sees no CUDA device")
        ext, table = self._device_extension("cuda")
        if ext is not None:
            err = ctypes.create_string_buffer(2048)
            if ext.tensor_arena_cuda_install(ctypes.byref(table), err, len(err)) != 0:
                raise AllocatorError(f"PlannedAllocator('cuda').install(): {err.value.decode(errors='replace')}")
            self.extension = ext.path
            return
        pluggable = torch.cuda.memory.CUDAPluggableAllocator(
            self._lib.path, "tensor_arena_alloc", "tensor_arena_free"
        )
        torch_hooks.c_setter_hooks(self._lib, pluggable.allocator(), "cuda")
        torch.cuda.memory.change_current_allocator(pluggable)
        torch_hooks.cuda_python_answers(self._lib, torch)
        self._pluggable = pluggable

    def _install_npu(self):
        try:
            import torch
            import torch_npu
        except ImportError as e:
            raise AllocatorError(f"PlannedAllocator('npu') needs torch_npu: {e}") from None
        from . import torch_hooks

        if not torch.npu.is_available():
            raise AllocatorError("PlannedAllocator('npu'): torch_npu sees no NPU")
        ext, table = self._device_extension("npu")
        if ext is not None:
            err = ctypes.create_string_buffer(2048)
            if ext.tensor_arena_npu_bind(ctypes.byref(table), err, len(err)) != 0:
                raise AllocatorError(f"PlannedAllocator('npu').install(): {err.value.decode(errors='replace')}")
            # Defined in torch_npu/npu/memory.py (also exported as torch_npu.npu.NPUPluggableAllocator).
            pluggable = torch_npu.npu.memory.NPUPluggableAllocator(
                str(ext.path), "tensor_arena_npu_alloc", "tensor_arena_npu_free"
            )
            hooks = pluggable.allocator()
            # The setters' Python binding takes the address as an integer and
            # casts it to the hook's type (torch_npu/csrc/npu/Module.cpp).
            for setter, hook in _NPU_HOOKS:
                address = ext.tensor_arena_npu_hook(hook.encode())
                if address == 0:
                    raise AllocatorError(f"the NPU extension {ext.path} has no hook {hook!r}")
                getattr(hooks, setter)(address)
            self.extension = ext.path
        else:
            pluggable = torch_npu.npu.memory.NPUPluggableAllocator(
                self._lib.path, "tensor_arena_alloc", "tensor_arena_free"
            )
            torch_hooks.c_setter_hooks(self._lib, pluggable.allocator(), "npu")
        torch_npu.npu.memory.change_current_allocator(pluggable)
        # torch_npu has no setter for these, extension or not.
        torch_hooks.npu_python_answers(self._lib, torch_npu, stats=ext is None)
        self._pluggable = pluggable

    def uninstall(self):
        """CPU only: gives torch's CPU allocator slot back to torch's default allocator.

        Blocks the planned allocator handed out stay valid and are freed
        through it. CUDA and torch_npu cannot change their allocator after the
        first allocation, so there is no uninstall there.
        """
        if self.device != "cpu":
            raise AllocatorError(
                f"torch cannot change the {self.device} allocator after its first allocation"
            )
        if not self._installed:
            return
        if extensions.load("cpu").tensor_arena_cpu_uninstall(_CPU_PRIORITY) != 0:
            raise AllocatorError("torch's CPU allocator slot no longer holds the planned allocator")
        self._installed = False

    # ---- steps ----------------------------------------------------------------------

    def begin_step(self):
        """Marks the start of a training step (``tensor_arena_step_begin``)."""
        if self._in_step:
            raise AllocatorError("begin_step: a step is open already; end it first")
        self._lib.check(self._lib.dll.tensor_arena_step_begin(), "tensor_arena_step_begin")
        self._in_step = True

    def end_step(self):
        """Marks its end (``tensor_arena_step_end``): recording, planning and re-planning happen here."""
        if not self._in_step:
            raise AllocatorError("end_step: no step is open")
        self._in_step = False
        self._lib.check(self._lib.dll.tensor_arena_step_end(), "tensor_arena_step_end")

    @contextlib.contextmanager
    def step(self):
        """One training step: ``with alloc.step(): ...`` (ended also when the body raises)."""
        if self._hook is not None:
            raise AllocatorError("auto_step() marks the steps already; do not nest alloc.step()")
        self.begin_step()
        try:
            yield self
        finally:
            self.end_step()

    def auto_step(self):
        """Marks steps without editing the loop: a step ends after each ``optimizer.step()``.

        Opens a step now and registers a global optimizer step post-hook
        (``torch.optim.optimizer.register_optimizer_step_post_hook``) that ends
        it and opens the next one. With several optimizers, the first one that
        steps paces the boundaries. Where an engine wraps the optimizer
        (DeepSpeed: :data:`tensor_arena.engines.ENGINES`) a step ends after the
        engine's own step method instead, and the hook marks nothing. Returns
        the hook's handle; ``remove()`` it (or call :meth:`stop_auto_step`) to
        stop.
        """
        if self._hook is not None:
            return self._hook
        from torch.optim.optimizer import register_optimizer_step_post_hook

        if not self._in_step:
            self.begin_step()
        this = weakref.ref(self)

        def boundary(optimizer, args, kwargs):
            alloc = this()
            if alloc is None or alloc._engine_steps or alloc._engine_depth:
                return
            alloc._optimizer_seen = True
            pacer = alloc._pacer() if alloc._pacer is not None else None
            if pacer is None:
                alloc._pacer = weakref.ref(optimizer)
            elif pacer is not optimizer:
                return
            alloc.end_step()
            alloc.begin_step()

        self._hook = register_optimizer_step_post_hook(boundary)
        self._watch_backward()
        from . import engines

        engines.watch(self)
        return self._hook

    def _watch_backward(self):
        """Steps without an optimizer: a step ends where the training thread's backward returns.

        ``torch.Tensor.backward`` and ``torch.autograd.backward`` are wrapped:
        once a second backward returns with no optimizer step (nor engine
        step) since the first, and no torch optimizer exists then (a loop
        that accumulates gradients has one), every backward that returns
        ends the step and opens the next, on the thread that called it. The first optimizer step
        turns this off for good (the optimizer's hook paces the steps). A
        script that updates its parameters by hand (``p.data.add_(p.grad,
        alpha=-lr)``) is then planned like one with an optimizer.
        """
        if self._backward_patch is not None:
            return
        import torch

        this = weakref.ref(self)
        tensor_backward = torch.Tensor.backward
        autograd_backward = torch.autograd.backward

        def after_backward():
            alloc = this()
            if alloc is None or alloc._hook is None or alloc._optimizer_seen:
                return
            if alloc._engine_steps or alloc._engine_depth:
                return
            alloc._backwards += 1
            if alloc._backwards == 2 and alloc._optimizer_exists is None:
                alloc._optimizer_exists = _an_optimizer_exists()
            if alloc._backwards >= 2 and alloc._in_step and not alloc._optimizer_exists:
                alloc.end_step()
                alloc.begin_step()

        depth = threading.local()

        def counted(fn, *args, **kwargs):
            # Tensor.backward calls torch.autograd.backward: the outer call
            # alone counts.
            level = getattr(depth, "n", 0)
            depth.n = level + 1
            try:
                out = fn(*args, **kwargs)
            finally:
                depth.n = level
            if level == 0:
                after_backward()
            return out

        def backward(tensor, *args, **kwargs):
            return counted(tensor_backward, tensor, *args, **kwargs)

        def autograd(*args, **kwargs):
            return counted(autograd_backward, *args, **kwargs)

        backward.__wrapped__ = tensor_backward
        autograd.__wrapped__ = autograd_backward
        torch.Tensor.backward = backward
        torch.autograd.backward = autograd
        self._backward_patch = (tensor_backward, autograd_backward)

    def _unwatch_backward(self):
        if self._backward_patch is None:
            return
        import torch

        torch.Tensor.backward, torch.autograd.backward = self._backward_patch
        self._backward_patch = None

    def stop_auto_step(self, end=True):
        """Removes the :meth:`auto_step` hook; ``end`` also ends the open step."""
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
            self._pacer = None
        self._unwatch_backward()
        if end and self._in_step:
            self.end_step()

    def step_thread(self, on=True):
        """Names the calling thread as the one the plan follows (``on=False``: the step calls decide again).

        By default the plan follows the thread that begins and ends steps
        (the one that calls ``optimizer.step()`` under :meth:`auto_step`):
        requests made on other threads outside autograd's backward (a data
        thread, a TorchScript loop, intra-op workers) are served outside the
        step, from the fallback's pools, and never move the plan's cursor.
        Name a thread here when another one ends the steps for it.
        """
        fn = getattr(self._lib.dll, "tensor_arena_set_step_thread", None)
        if fn is None:
            raise AllocatorError(
                f"{self._lib.path} does not export tensor_arena_set_step_thread: an allocator library "
                "older than this package (rebuild it)"
            )
        self._lib.check(fn(1 if on else 0), "tensor_arena_set_step_thread")

    # ---- request phases ---------------------------------------------------------------

    def phase(self, name):
        """Marks the phase of the requests that follow: ``"eval"`` or ``"train"``.

        Usable as a call (the mark holds until the next one) or as a context
        manager that puts the previous mark back at its end::

            with alloc.phase("eval"):
                val = model(batch)       # an eval pass the plan serves from its own sites

        An eval pass makes the training forward's sizes in the same order, so
        the allocator cannot tell it apart by itself; its requests are recorded
        and planned as sites of their own and served by a cursor of their own.
        The device extensions (CPU, CUDA, torch_npu) already read torch's grad
        mode at every request (``torch.no_grad()`` and ``torch.inference_mode()``
        are eval), so a mark is needed only for eval passes that run with grad
        mode on, or where no extension serves (no compiler): a mark of
        ``"eval"`` holds whatever grad mode says; ``"train"`` leaves the phase
        to it. Raises ``ValueError`` for another name, ``AllocatorError`` when
        the library refuses the call.
        """
        if name not in PHASES:
            raise ValueError(f"phase must be one of {', '.join(map(repr, PHASES))}, not {name!r}")
        previous = self._phase
        self._mark(name)
        return _PhaseMark(self, previous)

    @property
    def marked_phase(self):
        """The phase last marked with :meth:`phase` (``"train"`` before any)."""
        return self._phase

    def _mark(self, name):
        fn = getattr(self._lib.dll, "tensor_arena_set_phase", None)
        if fn is None:
            raise AllocatorError(
                f"{self._lib.path} does not export tensor_arena_set_phase: an allocator library older "
                "than this package (rebuild it)"
            )
        self._lib.check(fn(PHASES[name]), f"tensor_arena_set_phase({PHASES[name]})")
        self._phase = name

    # ---- figures --------------------------------------------------------------------

    def stats(self):
        """The library's stats (``tensor_arena_stats_json``) as a dict; keys in docs/allocator.md."""
        return self._lib.json("stats_json")

    def report_json(self):
        """The report (``tensor_arena_report_json``): stats, the caching-model comparison, ``text``."""
        return self._lib.json("report_json")

    def report(self):
        """The text report: requests, the share served from the plan, misses by reason, the
        slab against the recorded steps' lower bound, the fallback, and fragmentation beside
        the caching allocator model's for the same steps."""
        return self.report_json()["text"]

    def snapshot(self):
        """A ``torch.cuda.memory._snapshot()``-shaped dict (``segments``, ``device_traces``),
        for ``tensor_arena.replay`` and ``torch.cuda._memory_viz``."""
        return self._lib.json("snapshot_json")

    def dump_snapshot(self, path):
        """Writes :meth:`snapshot` as a pickle, as ``torch.cuda.memory._dump_snapshot`` does."""
        with open(path, "wb") as f:
            pickle.dump(self.snapshot(), f, protocol=4)

    def last_error(self):
        """The library's last error message ("" when none)."""
        return self._lib.text("last_error")

    def reset(self):
        """Drops plans, slabs and fallback caches and starts over in warm-up; returns 0.

        Only between steps, and only when no block the library gave is still
        live: with live blocks (tensors still alive) the library refuses and
        releases nothing, and this raises ``AllocatorError`` naming how many
        blocks and bytes are live.
        """
        if self._in_step:
            raise AllocatorError("reset: a step is open; end it first")
        return self._lib.check(self._lib.dll.tensor_arena_reset(), "tensor_arena_reset")

    def summary(self, stats=None):
        """Three lines: the share served from the plan, fallback allocations per step and the
        slab against the lower bound; fragmentation over the whole run beside the caching
        allocator model's over the same run; and the whole-run line
        ``whole run: peak reserved P MiB planned vs C MiB caching allocator model (E MiB with
        expandable segments), lower bound L MiB``, L the live lower bound (the most bytes live
        at once, each request rounded to 512 bytes: no allocator holds less). Every figure
        covers the whole run (warm-up, recording and every re-plan), from the process's first
        request on. Before any serving step, the first line says ``no request served yet``."""
        s = self.stats() if stats is None else stats
        cm, em = s["caching_model"], s["expandable_model"]
        share = s["served_share"]
        served = "no request served yet" if share is None else _percent_floor(share)
        first = (
            f"served from the plan: {served} of "
            f"{s['requests_after_warmup']} requests after warm-up; "
            f"fallback allocations per step: {s['fallback_allocations_max_step']}; "
            f"slab {_mib(s['slab_bytes'])} = {s['slab_ratio']:.4f} x lower bound"
        )
        if s["peak_reserved_bytes"] > 0:
            second = (
                f"fragmentation over the whole run: {s['fragmentation'] * 100:.2f}% planned "
                f"(peak reserved {_mib(s['peak_reserved_bytes'])}, peak live {_mib(s['peak_live_bytes'])}) "
                f"vs {cm['fragmentation'] * 100:.2f}% for the caching allocator model of the same run "
                f"(peak reserved {_mib(cm['peak_reserved_bytes'])})"
            )
        else:
            second = "fragmentation over the whole run: nothing reserved yet"
        mib = 1 << 20
        third = (
            f"whole run: peak reserved {s['peak_reserved_bytes'] / mib:.2f} MiB planned vs "
            f"{cm['peak_reserved_bytes'] / mib:.2f} MiB caching allocator model "
            f"({em['peak_reserved_bytes'] / mib:.2f} MiB with expandable segments), "
            f"lower bound {s['lower_bound_bytes'] / mib:.2f} MiB"
        )
        return f"{first}\n{second}\n{third}"

    def __repr__(self):
        state = "installed" if self._installed else "not installed"
        return f"PlannedAllocator({self.device!r}, {state}, library={self._lib.path!r})"


def _an_optimizer_exists():
    """Whether any ``torch.optim.Optimizer`` is alive (one scan of the
    collector's objects, made once per allocator): a loop that accumulates
    gradients over several backwards before its optimizer's first step has
    one, a script that updates its parameters by hand has none."""
    import gc

    import torch

    return any(isinstance(o, torch.optim.Optimizer) for o in gc.get_objects())
