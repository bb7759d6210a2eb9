"""The fragmentation doctor from Python: ``tensor-arena replay`` on a trace.

Each function builds the command line of ``tensor-arena replay`` and runs the
Rust command in-process, so :func:`replay` returns exactly what
``tensor-arena replay TRACE --json`` prints (same keys, same figures; see
docs/replay.md), and :func:`sweep` what ``--sweep --json`` prints.
"""

import json
import os
import pickle
import tempfile

from . import _native

__all__ = ["replay", "report", "sweep"]


def _flags(
    capacity=None,
    alloc_conf=None,
    max_split_size_mb=None,
    garbage_collection_threshold=None,
    expandable_segments=False,
    device=None,
    platform=None,
    format=None,
    window=None,
    top=None,
    search=True,
    svg=None,
    save_trace=None,
    seed=None,
    planned=False,
    step_frame=None,
    step_every=None,
    policy=None,
    **policy_flags,
):
    out = []

    def add(flag, value):
        if value is not None:
            out.extend([flag, str(value)])

    add("--capacity", capacity)
    add("--alloc-conf", alloc_conf)
    add("--max-split-size-mb", max_split_size_mb)
    add("--garbage-collection-threshold", garbage_collection_threshold)
    if expandable_segments:
        out.append("--expandable-segments")
    add("--device", device)
    add("--platform", platform)
    add("--format", format)
    add("--window", window)
    add("--top", top)
    if not search:
        out.append("--no-search")
    add("--svg", os.fspath(svg) if svg is not None else None)
    add("--save-trace", os.fspath(save_trace) if save_trace is not None else None)
    add("--seed", seed)
    if planned:
        out.append("--planned")
    add("--step-frame", step_frame)
    add("--step-every", step_every)
    if policy is not None:
        add("--policy", policy if isinstance(policy, str) else json.dumps(policy))
    # The planned allocator's policy keys, as the launcher's flags
    # (warmup_steps=2 is --warmup-steps 2; exact_before_plan=False is
    # --no-exact-before-plan).
    for key, value in policy_flags.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            out.append(flag if value else "--no-" + key.replace("_", "-"))
        elif value is not None:
            add(flag, value)
    return out


def _run(trace, extra, options, name):
    """Runs ``tensor-arena replay`` on ``trace`` with ``extra`` flags and returns its output."""
    synthetic = options.pop("synthetic", None)
    flags = _flags(**options) + extra
    if synthetic is not None:
        if trace is not None:
            raise ValueError("give a trace or synthetic=STEPS, not both")
        return _native.cli_output(["tensor-arena", "replay", "--synthetic", str(synthetic), *flags])
    if trace is None:
        raise ValueError("give a trace: a file path, a snapshot dict or bytes (or synthetic=STEPS)")
    if isinstance(trace, (str, os.PathLike)):
        return _native.cli_output(["tensor-arena", "replay", os.fspath(trace), *flags])
    # A live snapshot (torch.cuda.memory._snapshot(), torch.npu.memory._snapshot())
    # is pickled as _dump_snapshot would, or raw bytes are written as they are,
    # then replayed as that file: the command's own path, so its own figures.
    if isinstance(trace, dict):
        data = pickle.dumps(trace, protocol=4)
    elif isinstance(trace, (bytes, bytearray, memoryview)):
        data = bytes(trace)
    else:
        raise TypeError(
            f"trace must be a path, a snapshot dict or bytes, not {type(trace).__name__}"
        )
    with tempfile.TemporaryDirectory(prefix="tensor-arena-") as tmp:
        path = os.path.join(tmp, name)
        with open(path, "wb") as f:
            f.write(data)
        return _native.cli_output(["tensor-arena", "replay", path, *flags])


def replay(trace=None, *, name="snapshot.pickle", **options):
    """Replays ``trace`` through the caching-allocator model and the planner.

    ``trace``: a snapshot pickle, CSV or JSON-lines path (gzip allowed), a live
    snapshot dict (``torch.cuda.memory._snapshot()``), or bytes of any of those.
    ``options`` are the command's flags in Python form: ``capacity`` (bytes or
    ``"60GiB"``), ``alloc_conf``, ``max_split_size_mb``,
    ``garbage_collection_threshold``, ``expandable_segments``, ``device``,
    ``platform`` (``"npu"`` or ``"cuda"``; default: what a snapshot names),
    ``format`` (``"csv"``, ``"jsonl"``, ``"snapshot"``), ``window``, ``top``,
    ``search`` (False: ``--no-search``), ``svg``, ``save_trace``,
    ``synthetic`` (steps, instead of a trace) and ``seed``. ``planned=True``
    (``--planned``) also replays the trace through the planned allocator's
    policy: ``result["planned"]`` holds its predicted ``peak_reserved_bytes``,
    ``served_share``, ``replans``, ``steps``, ``slab_bytes``, ``lower_bound``,
    ``fallback_allocations_max_step`` and ``fits``; ``step_frame``,
    ``step_every``, ``policy`` (a dict or JSON) and the policy keys
    (``warmup_steps``, ``record_steps``, ``record_steps_changing``,
    ``replan_miss_steps``, ``recent_steps``, ``exact_before_plan``) are its
    flags. A trace written by the planned allocator (its ``trace`` option)
    is read with its step markers. ``name`` is the file
    name a dict or bytes trace is replayed under (it is the trace's name in the
    result). Returns the ``--json`` object as a dict.
    """
    return json.loads(_run(trace, ["--json"], options, name))


def sweep(trace=None, *, max_split_mb=None, gc=None, name="snapshot.pickle", **options):
    """:func:`replay` with ``--sweep``: the grid of ``PYTORCH_NPU_ALLOC_CONF``
    (or, on CUDA, ``PYTORCH_CUDA_ALLOC_CONF``) settings and the recommendation (``result["sweep"]``,
    ``result["recommendation"]``). ``max_split_mb`` and ``gc`` replace the grid's
    ``max_split_size_mb`` values and ``garbage_collection_threshold`` values."""
    extra = ["--sweep", "--json"]
    if max_split_mb is not None:
        extra += ["--sweep-max-split-mb", ",".join(str(v) for v in max_split_mb)]
    if gc is not None:
        extra += ["--sweep-gc", ",".join(str(v) for v in gc)]
    return json.loads(_run(trace, extra, options, name))


def report(trace=None, *, sweep=False, name="snapshot.pickle", **options):
    """The text report ``tensor-arena replay`` prints (with ``--sweep`` if ``sweep``)."""
    return _run(trace, ["--sweep"] if sweep else [], options, name)
