"""Step boundaries where an engine wraps the optimizer.

:meth:`PlannedAllocator.auto_step` ends a step after each ``optimizer.step()``
(torch's global optimizer step post-hook). Under an engine that owns the
optimizer that is not one step per training step:

- DeepSpeed's ``DeepSpeedEngine.step()`` calls the wrapped torch optimizer's
  ``step()`` once per ZeRO-3 sub-group (several per training step for a model
  over ``sub_group_size``), and not at all on an fp16 overflow (the step is
  skipped, the loss scale lowered), nor between accumulation boundaries
  (``engine.step()`` is called every micro-batch).

So for the engines listed in :data:`ENGINES` a step ends after the engine's
own step method instead, once its module is imported (an import hook: the
launcher runs before the script imports anything), and the optimizer hook
then marks nothing. :func:`step_after` does the same for any
``module:Class.method`` (the launcher's ``--step-at``).
"""

import functools
import importlib
import importlib.abc
import sys
import weakref

__all__ = ["ENGINES", "step_after", "watch"]


def _deepspeed_ends_step(engine, *args, **kwargs):
    # engine.step() is called every micro-batch; the optimizer steps (and
    # the training step ends) only at an accumulation boundary, which
    # engine.step() moves past: ask before the call.
    return engine.is_gradient_accumulation_boundary()


#: module -> (qualified name of the step method in it, whether a call ends a
#: step: a function of the call's arguments, asked before the call; None: every call).
ENGINES = {
    "deepspeed.runtime.engine": ("DeepSpeedEngine.step", _deepspeed_ends_step),
}


def _resolve(module, qualname):
    owner = module
    *path, name = qualname.split(".")
    for part in path:
        owner = getattr(owner, part)
    return owner, name


def _wrap(alloc, module, qualname, ends=None):
    """Wraps ``module.qualname`` so that a step ends when a call that ``ends`` returns; idempotent."""
    owner, name = _resolve(module, qualname)
    original = getattr(owner, name)
    if getattr(original, "__tensor_arena__", False):
        return
    this = weakref.ref(alloc)

    @functools.wraps(original)
    def step(*args, **kwargs):
        alloc = this()
        if alloc is None or alloc._hook is None:
            return original(*args, **kwargs)
        alloc._engine_steps = True  # the optimizer hook marks nothing from now on
        boundary = ends is None or bool(ends(*args, **kwargs))
        alloc._engine_depth += 1
        try:
            return original(*args, **kwargs)
        finally:
            alloc._engine_depth -= 1
            # A nested call (an engine's step calling another wrapped step) ends nothing.
            if boundary and alloc._engine_depth == 0 and alloc._hook is not None:
                alloc.end_step()
                alloc.begin_step()

    step.__tensor_arena__ = True
    setattr(owner, name, step)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``callback(module)`` right after each watched module is executed."""

    def __init__(self, callbacks):
        self.callbacks = callbacks  # module name -> [callback]

    def find_spec(self, name, path, target=None):
        if name not in self.callbacks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        execute, callbacks = loader.exec_module, self.callbacks[name]

        def exec_module(module):
            execute(module)
            for callback in callbacks:
                callback(module)

        loader.exec_module = exec_module
        return spec


_FINDER = None


def _on_import(module_name, callback):
    """``callback(module)`` now if ``module_name`` is imported, else right after its import."""
    global _FINDER
    if module_name in sys.modules:
        callback(sys.modules[module_name])
        return
    if _FINDER is None:
        _FINDER = _AfterImport({})
        sys.meta_path.insert(0, _FINDER)
    _FINDER.callbacks.setdefault(module_name, []).append(callback)


def watch(alloc):
    """Ends ``alloc``'s steps after the step method of every engine in :data:`ENGINES` it sees imported."""
    for module_name, (qualname, ends) in ENGINES.items():
        _on_import(module_name, lambda m, q=qualname, e=ends: _wrap(alloc, m, q, e))


def step_after(alloc, target):
    """A step ends after each call of ``target`` (``module:qualname``, e.g. ``trainer:Engine.step``).

    The optimizer hook marks nothing once such a call happened. The module is
    wrapped when it is imported (now, if it is).
    """
    module_name, sep, qualname = target.partition(":")
    if not sep or not module_name or not qualname:
        raise ValueError(f"--step-at {target!r}: expected MODULE:QUALNAME, e.g. mytrainer:Engine.step")
    _on_import(module_name, lambda m: _wrap(alloc, m, qualname))
