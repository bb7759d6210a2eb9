"""A Megatron-style ``get_tensor(tensor_shape, dtype, name)`` on a planned arena.

Megatron-LM's ``GlobalMemoryBuffer`` keeps one flat buffer per ``(name, dtype)``
and hands out views of it; the caller must make sure that buffers of the same
name are not used concurrently. :class:`GlobalMemoryBuffer` keeps that
contract and that call, on a :class:`~tensor_arena.Recorder`: the first
``record_steps`` steps learn each ``(name, dtype, rank)`` site's largest shape
(serving ``torch.empty`` tensors), then one slab is planned and every later call
is a view of it, with the arena's checks. A new request for a name ends the
previous view of that name, as in Megatron.
"""


from .recorder import Recorder

__all__ = ["GlobalMemoryBuffer"]


class GlobalMemoryBuffer:
    """``get_tensor(tensor_shape, dtype, name)`` served from one planned slab.

    ``device``: the torch device. ``record_steps``: steps recorded before the plan is
    frozen (>= 1). ``specs``: a spec file (or ``SpecSet``) to plan from at once, with no
    recording step. Other keywords go to :class:`~tensor_arena.Recorder`.

    A step is one training iteration: ``with buffer.step(): ...``, or call
    :meth:`next_step` at the end of each iteration (a ``get_tensor`` outside a step
    opens one).
    """

    def __init__(self, device="cpu", *, record_steps=1, specs=None, **recorder_options):
        if record_steps < 1:
            raise ValueError("record_steps must be at least 1")
        self.recorder = Recorder(device, **recorder_options)
        self.record_steps = record_steps
        self._step_cm = None
        self._step = None
        if specs is not None:
            self.recorder.preload(specs)
            self.recorder.freeze()

    @staticmethod
    def _site(name, dtype, ndim):
        return f"{name}/{str(dtype).replace('torch.', '')}/{ndim}d"

    def get_tensor(self, tensor_shape, dtype, name):
        """A ``tensor_shape`` view for ``name``: valid until the next request for ``name``
        (same dtype) or the end of the step."""
        if self._step is None:
            self._begin()
        site = self._site(name, dtype, len(tensor_shape))
        if site in self._step._live:
            self._step.release(site)
        return self._step.temp(site, tuple(tensor_shape), dtype)

    def _begin(self):
        self._step_cm = self.recorder.step()
        self._step = self._step_cm.__enter__()

    def next_step(self):
        """Ends the current step (every view of it ends); freezes the plan after
        ``record_steps`` recorded steps."""
        if self._step is not None:
            cm, self._step_cm, self._step = self._step_cm, None, None
            cm.__exit__(None, None, None)
        if not self.recorder.is_frozen and self.recorder.recorded_steps >= self.record_steps:
            self.recorder.freeze()

    def step(self):
        """A context manager around one iteration (ends it with :meth:`next_step`)."""
        buffer = self

        class _Step:
            def __enter__(self):
                buffer.next_step()
                buffer._begin()
                return buffer

            def __exit__(self, *exc):
                buffer.next_step()
                return False

        return _Step()

    @property
    def arena(self):
        """The planned arena once frozen (None while recording)."""
        return self.recorder.arena
