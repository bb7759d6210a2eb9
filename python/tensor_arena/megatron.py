"""A Megatron-style ``get_tensor(tensor_shape, dtype, name)`` on a planned arena.

Megatron-LM's ``GlobalMemoryBuffer`` keeps one flat buffer per ``(name, dtype)``
and hands out views of it; the caller must make sure that buffers of the same
name are not used concurrently. :class:`GlobalMemoryBuffer` keeps that
contract and that call, on a :class:`~tensor_arena.Recorder`: the first
``record_steps`` steps learn each ``(name, dtype, rank)`` site's largest shape
(serving ``torch.empty`` tensors), then one slab is planned and every later call
is a view of it, with the arena's checks. A new request for a name ends the
previous view of that name, as in Megatron. With modes (training and
evaluation in one slab), each mode learns its own sites and ``get_tensor``
takes the mode of its step.
"""


from . import _native
from .recorder import RecordMode, Recorder

__all__ = ["GlobalMemoryBuffer"]


class GlobalMemoryBuffer:
    """``get_tensor(tensor_shape, dtype, name, mode=None)`` served from one planned slab.

    ``device``: the torch device. ``record_steps``: steps recorded in each mode before the
    plan is frozen (>= 1). ``modes``: mode names to declare up front (``("train", "eval")``),
    each of which must be recorded before the plan is frozen; a mode first asked for while
    recording is declared then. Without modes every step is of the default mode. ``specs``: a spec
    file (or ``SpecSet``) to plan from at once, with no recording step (declare its modes
    with ``modes``). Other keywords go to :class:`~tensor_arena.Recorder`.

    A step is one training (or evaluation) iteration: ``with buffer.step("eval"): ...``, or
    call :meth:`next_step` at the end of each iteration (a ``get_tensor`` outside a step
    opens one, in its ``mode``).
    """

    def __init__(self, device="cpu", *, record_steps=1, specs=None, modes=(), **recorder_options):
        if record_steps < 1:
            raise ValueError("record_steps must be at least 1")
        self.recorder = Recorder(device, **recorder_options)
        self.record_steps = record_steps
        for m in modes:
            self.recorder.mode(m)
        # Recorded steps per mode: those declared up front, and any mode seen while recording.
        self._recorded = {m: 0 for m in modes}
        self._step_cm = None
        self._step = None
        if specs is not None:
            self.recorder.preload(specs)
            self.recorder.freeze()

    @staticmethod
    def _site(name, dtype, ndim):
        return f"{name}/{str(dtype).replace('torch.', '')}/{ndim}d"

    def _mode_name(self, mode):
        if mode is None:
            return None
        return mode.name if isinstance(mode, RecordMode) else str(mode)

    def get_tensor(self, tensor_shape, dtype, name, mode=None):
        """A ``tensor_shape`` view for ``name``: valid until the next request for ``name``
        (same dtype) or the end of the step. ``mode``: the step's mode (None: the open step's,
        or the default mode); a mode other than the open step's raises ``ModeError``."""
        wanted = self._mode_name(mode)
        if self._step is None:
            self._begin(wanted)
        elif wanted is not None and wanted != self._step.mode.name:
            raise _native.ModeError(
                f"get_tensor('{name}') asks for mode '{wanted}' inside a step of mode "
                f"'{self._step.mode.name}'; end the step first (next_step(), or a new step(mode))"
            )
        site = self._site(name, dtype, len(tensor_shape))
        if site in self._step._live:
            self._step.release(site)
        return self._step.temp(site, tuple(tensor_shape), dtype)

    def _begin(self, mode=None):
        rec = self.recorder
        if mode is not None and not rec.is_frozen and mode not in [m.name for m in rec.modes]:
            rec.mode(mode)
        self._step_cm = rec.step(mode)
        self._step = self._step_cm.__enter__()

    def next_step(self):
        """Ends the current step (every view of it ends); freezes the plan once every mode
        was recorded ``record_steps`` times."""
        if self._step is not None:
            cm, step, self._step_cm, self._step = self._step_cm, self._step, None, None
            recording = step.is_recording
            cm.__exit__(None, None, None)
            if recording:
                name = step.mode.name
                self._recorded[name] = self._recorded.get(name, 0) + 1
        rec, counts = self.recorder, self._recorded.values()
        if not rec.is_frozen and counts and all(n >= self.record_steps for n in counts):
            rec.freeze()

    def step(self, mode=None):
        """A context manager around one iteration of ``mode`` (ends it with :meth:`next_step`)."""
        buffer = self
        wanted = self._mode_name(mode)

        class _Step:
            def __enter__(self):
                buffer.next_step()
                buffer._begin(wanted)
                return buffer

            def __exit__(self, *exc):
                buffer.next_step()
                return False

        return _Step()

    @property
    def arena(self):
        """The planned arena once frozen (None while recording)."""
        return self.recorder.arena
