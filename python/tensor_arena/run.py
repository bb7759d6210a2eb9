"""Runs an unmodified training script with the planned allocator installed.

::

    python -m tensor_arena.run [OPTIONS] train.py [ARGS...]
    python -m tensor_arena.run [OPTIONS] -m package.module [ARGS...]
    torchrun --nproc-per-node 8 -m tensor_arena.run [OPTIONS] train.py [ARGS...]

The allocator is installed before the script runs (so before torch's first
device allocation) and a step ends after every ``optimizer.step()`` (a global
optimizer step post-hook; with several optimizers the first one that steps
paces the boundaries). The device is ``--device``, else
``$TENSOR_ARENA_ALLOCATOR`` (``cpu``, ``cuda``, ``npu``), else the first of
npu, cuda found by torch, else cpu; the choice is printed to stderr. At exit,
``--report`` prints the text report and the summary to stderr, ``--stats`` and
``--snapshot`` write the stats JSON and a ``_snapshot()`` pickle; ``--trace``
writes every allocator event as it happens (``tensor-arena replay PATH --planned``
reads it); ``{rank}``
in a path is replaced by ``$RANK`` (0 without a launcher).
"""

import argparse
import json
import os
import runpy
import sys

from .allocator import PlannedAllocator, _backend

_POLICY_INT = ("warmup_steps", "record_steps", "replan_miss_steps", "recent_steps")


def _auto_device():
    try:
        import torch_npu  # noqa: F401
        import torch

        if torch.npu.is_available():
            return "npu"
    except ImportError:
        pass
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _parser():
    ap = argparse.ArgumentParser(
        prog="python -m tensor_arena.run",
        description="Run a training script with tensor-arena's planned allocator as torch's allocator.",
    )
    ap.add_argument("--device", help="cpu, cuda, npu (cuda:N, npu:N: that device); "
                    "default: $TENSOR_ARENA_ALLOCATOR, else detected")
    for key in _POLICY_INT:
        ap.add_argument(f"--{key.replace('_', '-')}", type=int, dest=key)
    ap.add_argument("--checked", action="store_true", default=None,
                    help="poison freed planned blocks and verify guard bytes (also TENSOR_ARENA_CHECKED=1)")
    ap.add_argument("--platform", choices=("cuda", "npu"), help="the fallback's rounding rules")
    ap.add_argument("--report", action="store_true", help="print the report and the summary to stderr at exit")
    ap.add_argument("--stats", metavar="PATH", help="write the stats JSON here at exit")
    ap.add_argument("--snapshot", metavar="PATH", help="write a _snapshot()-shaped pickle here at exit")
    ap.add_argument("--trace", metavar="PATH",
                    help="write every allocator event here (the allocator's trace CSV, flushed at each "
                         "step end), for `tensor-arena replay PATH --planned`")
    ap.add_argument("-m", dest="module", metavar="MODULE", help="run a module, as python -m does")
    ap.add_argument("script", nargs="?", help="the training script, then its own arguments")
    return ap


def _split(ap, argv):
    """Our options, then the target (script or -m module), then the target's own arguments.

    Split by hand so that the script's options are never read as ours.
    """
    valued = {opt for a in ap._actions if a.nargs is None and a.option_strings for opt in a.option_strings}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "-m" or a == "--":
            return argv[: i + 2], argv[i + 2 :]
        if not a.startswith("-") or a == "-":
            return argv[: i + 1], argv[i + 1 :]
        i += 2 if a in valued else 1
    return argv, []


def _path(template):
    return template.replace("{rank}", os.environ.get("RANK", "0"))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ap = _parser()
    ours, target_args = _split(ap, argv)
    opts = ap.parse_args(ours)
    if opts.module is None and opts.script is None:
        ap.error("give a script (train.py) or -m MODULE")

    device = opts.device or os.environ.get("TENSOR_ARENA_ALLOCATOR") or _auto_device()
    try:
        _backend(device)
    except ValueError as e:
        ap.error(f"--device / TENSOR_ARENA_ALLOCATOR: {e}")
    policy = {k: getattr(opts, k) for k in (*_POLICY_INT, "checked", "platform")}
    policy = {k: v for k, v in policy.items() if v is not None}
    if opts.trace:
        policy["trace"] = _path(opts.trace)
    alloc = PlannedAllocator(device, **policy).install()
    alloc.auto_step()
    print(f"tensor-arena: planned allocator installed for {device}", file=sys.stderr)

    try:
        if opts.module is not None:
            sys.argv = [opts.module, *target_args]
            runpy.run_module(opts.module, run_name="__main__", alter_sys=True)
        else:
            sys.argv = [opts.script, *target_args]
            sys.path.insert(0, os.path.dirname(os.path.abspath(opts.script)))
            runpy.run_path(opts.script, run_name="__main__")
    finally:
        # The step opened after the last optimizer.step() is left open: it is
        # not a training step, and ending it would count it as one.
        if opts.stats:
            with open(_path(opts.stats), "w") as f:
                json.dump(alloc.stats(), f, indent=1)
        if opts.snapshot:
            alloc.dump_snapshot(_path(opts.snapshot))
        if opts.report:
            print(alloc.report(), file=sys.stderr)
            print(alloc.summary(), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
