"""Runs an unmodified training script with the planned allocator installed.

::

    python -m tensor_arena.run [OPTIONS] train.py [ARGS...]
    python -m tensor_arena.run [OPTIONS] -m package.module [ARGS...]
    torchrun --nproc-per-node 8 -m tensor_arena.run [OPTIONS] train.py [ARGS...]

The allocator is installed before the script runs (so before torch's first
device allocation) and a step ends after every ``optimizer.step()`` (a global
optimizer step post-hook; with several optimizers the first one that steps
paces the boundaries; a script with no optimizer: after every ``loss.backward()`` once two
backward passes returned without an optimizer step between them), or, under an engine that wraps the optimizer, after the
engine's step (DeepSpeed's ``engine.step()`` at an accumulation boundary;
``--step-at MODULE:QUALNAME`` names any other). Eval passes need no marks: the device extension reads
torch's grad mode at every request (``torch.no_grad()`` outside autograd's
backward is the eval phase; docs/allocator.md, "Request phases"). The device is ``--device``, else
``$TENSOR_ARENA_ALLOCATOR`` (``cpu``, ``cuda``, ``npu``), else the first of
npu, cuda found by torch, else cpu; the choice is printed to stderr. At exit,
``--report`` prints the text report and the summary to stderr, ``--stats`` and
``--snapshot`` write the stats JSON and a ``_snapshot()`` pickle, and
``--trace`` has the library write every event to a CSV file as the run goes
(``tensor-arena replay PATH --planned`` reads it); ``{rank}`` in a path is
replaced by ``$RANK`` (0 without a launcher).

Every key of the allocator's configuration has a flag (``--record-steps 3``,
``--no-exact-before-plan``, ...; see ``_POLICY_FLAGS``), and ``--policy JSON``
passes any keys as they are (flags given beside it win), so a key the library
gains works before it has a flag. The library refuses unknown keys.
"""

import argparse
import json
import os
import runpy
import sys

from . import engines
from .allocator import AllocatorError, PlannedAllocator, _backend

# One row per key of the library's configuration (alloc/src/config.rs `Config`):
# (key, kind, help). kind: int, bool (--key / --no-key), or a tuple of choices.
# A new key is one row here.
_POLICY_FLAGS = (
    ("warmup_steps", int, "steps served by the fallback and not planned (the first creates optimizer state)"),
    ("record_steps", int, "steps recorded before the first plan"),
    ("record_steps_changing", int, "steps recorded before the first plan while the recorded shapes differ"),
    ("replan_miss_steps", int, "steps with misses since the last re-plan (consecutive or not) after which the allocator re-plans"),
    ("recent_steps", int, "steps kept for re-planning"),
    ("background_plan_requests", int, "plans of steps with at least this many requests (default 1024) are "
                                      "made on a thread of their own and swapped in a step later"),
    ("exact_before_plan", bool, "one backing region per request before the first plan, and for the few "
                                "requests a plan does not serve (--no-exact-before-plan: the caching pools)"),
    ("checked", bool, "poison freed planned blocks and verify guard bytes (also TENSOR_ARENA_CHECKED=1)"),
    ("platform", ("cuda", "npu"), "the fallback's and the comparison model's rounding rules"),
    ("log_errors", bool, "log the first error of each kind to stderr"),
    ("mapped_range", bool, "take every region from mapped address ranges (pages mapped as needed, no "
                           "device call per region); --no-mapped-range: a device region per region"),
    ("lend_slab_pages", bool, "before a miss no gap of the slab holds maps pages past the run's peak, unmap "
                              "the slab's idle pages (mapped again as blocks land there and at the step's end), "
                              "and decline a loose re-plan that would raise the peak"),
    ("parity_offsets", bool, "give every site one offset for even steps and one for odd steps where the slab "
                             "is lower (--no-parity-offsets: one offset per site)"),
    ("range_bytes", int, "bytes of address space each mapped range reserves (default: the device's capacity)"),
    ("step_request_cap", int, "a step that makes this many requests without ending is cut (its record dropped; "
                              "default: 4x the largest ended step, at least 65536)"),
    ("step_time_cap_s", float, "a step open this many seconds is cut likewise (default: no time cap)"),
)


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
    for key, kind, text in _POLICY_FLAGS:
        flag = f"--{key.replace('_', '-')}"
        if kind is bool:
            ap.add_argument(flag, dest=key, action=argparse.BooleanOptionalAction, default=None, help=text)
        elif isinstance(kind, tuple):
            ap.add_argument(flag, dest=key, choices=kind, help=text)
        else:
            ap.add_argument(flag, dest=key, type=kind, metavar="N", help=text)
    ap.add_argument("--policy", metavar="JSON", type=_policy_json,
                    help="configuration keys as a JSON object, passed as they are (flags win)")
    ap.add_argument("--report", action="store_true", help="print the report and the summary to stderr at exit")
    ap.add_argument("--stats", metavar="PATH", help="write the stats JSON here at exit")
    ap.add_argument("--snapshot", metavar="PATH", help="write a _snapshot()-shaped pickle here at exit")
    ap.add_argument("--trace", metavar="PATH",
                    help="write every allocator event here (the allocator's trace CSV, flushed at each "
                         "step boundary; the policy's trace key), for `tensor-arena replay PATH --planned`")
    ap.add_argument("--step-at", metavar="MODULE:QUALNAME", action="append", default=[],
                    help="a step ends after each call of this function or method (e.g. "
                         "mytrainer:Engine.step) instead of after optimizer.step(); for an engine "
                         "that wraps the optimizer (DeepSpeed's engine is known already). Repeatable")
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


def _policy_json(text):
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not JSON ({e}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"not a JSON object: {text!r}")
    return value


def _policy(opts):
    """The configuration keys: --policy, then the flags given, then --trace; {rank} in the trace path."""
    policy = dict(opts.policy or {})
    for key, _, _ in _POLICY_FLAGS:
        value = getattr(opts, key)
        if value is not None:
            policy[key] = value
    if opts.trace is not None:
        policy["trace"] = opts.trace
    if isinstance(policy.get("trace"), str):
        policy["trace"] = _path(policy["trace"])
    return policy


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
    try:
        alloc = PlannedAllocator(device, **_policy(opts)).install()
    except (ValueError, AllocatorError) as e:
        ap.error(str(e))
    alloc.auto_step()
    for target in opts.step_at:
        try:
            engines.step_after(alloc, target)
        except (ValueError, ImportError, AttributeError) as e:
            ap.error(str(e))
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
