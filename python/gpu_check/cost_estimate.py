"""Where would a GPU lose time to device calls? An ESTIMATE from a CPU trace of the planned allocator.

::

    python python/gpu_check/cost_estimate.py TRACE.csv[.gz] ... [--json OUT] [--policy JSON]

Each trace (written by ``python -m tensor_arena.run --trace``, on any
device; ``alloc/tests/data/loops/*.csv.gz`` are the CPU allocator suite's) is
replayed through the allocator library with the CUDA platform's rules and
CUDA's 2 MiB mapping unit (``{"backend": "cpu", "platform": "cuda",
"map_granularity": 2097152}``, then ``--policy``): the same sizes in the same
order, so the policy makes the run's decisions, and the mapped range counts
the map and unmap calls a CUDA device's 2 MiB pages would take. After every
step the library's cumulative ``backing_calls`` (by kind) are read; each
step's calls are priced with the per-call costs of docs/device-costs.md
(medians measured once on an NVIDIA H200, idle device) and summed by the kind
of step: ``warmup``, ``recording``, ``serving`` steps whose plan is new or
re-made (the step of a plan swap and the one after), and ``steady`` steps
(serving, the same plan since before the previous step).

This is a cost model applied to a host replay, **not a measurement**: the
costs are one device's idle-device medians; a ``cudaFree`` (``release``)
while kernels are queued also waits for them (20 ms in the measurement; not
counted, flagged as ``releases``); the run's own backing (host pages on the
CPU) is not what is priced. On a GPU the run's own counts are in its stats
(``backing_calls``, ``backing_calls_max_steady_step``).
"""

import argparse
import ctypes
import gzip
import json
import pathlib
import sys

# docs/device-costs.md, "The figures the cost model uses": medians, idle device, NVIDIA H200,
# 2026-12-04 (alloc/src/cost.rs holds the same figures). Seconds per call.
COSTS_S = {
    "reserve": 54e-6,          # cudaMalloc, 512 B to 20 MiB
    "release": 43e-6,          # cudaFree, idle (a busy device: + the queued work, not counted)
    "reserve_address": 3.7e-6,  # cuMemAddressReserve
    "release_address": 2.0e-6,  # cuMemAddressFree
    "map": 54e-6,              # cuMemCreate + cuMemMap + cuMemSetAccess, 2 MiB
    "unmap": 37e-6,            # cuMemUnmap + cuMemRelease, 2 MiB
    "event_record": 1.6e-6,
    "event_query": 1.3e-6,
    "event_destroy": 1.1e-6,
}
# The calls that take or give memory (the library's steady-step counters count these; events aside).
MEMORY_CALLS = ("reserve", "release", "reserve_address", "release_address", "map", "unmap")
CUDA_PAGE = 2 << 20
CPU_DEVICE = 0
CLASSES = ("warmup", "recording", "serving_new_plan", "steady")


def price(calls):
    return sum(COSTS_S.get(k, 0.0) * v for k, v in calls.items())


def diff(after, before):
    return {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}


def open_trace(path):
    path = pathlib.Path(path)
    return gzip.open(path, "rt") if path.suffix == ".gz" else open(path)


def classify(phase, calls, counted_steady, plans_before, plans_prev):
    """The kind of a step. A serving step with device calls is steady when the library counted it as one
    (``steady_steps_with_backing_calls`` grew: its plan served since before it, its region in place); one
    without calls when the plan count did not change since before the previous step."""
    if phase in ("warmup", "recording"):
        return phase
    if phase == "serving":
        if calls:
            return "steady" if counted_steady else "serving_new_plan"
        return "steady" if plans_prev is not None and plans_before == plans_prev else "serving_new_plan"
    return phase or "recording"


def replay(path, policy=None):
    """Per-step device calls of the trace replayed with CUDA's page; returns the estimate's dict."""
    from tensor_arena.allocator import library

    lib = library()
    dll = lib.dll
    config = json.dumps({"backend": "cpu", "platform": "cuda", "map_granularity": CUDA_PAGE,
                         "log_errors": False, **(policy or {})})
    lib.check(dll.tensor_arena_configure(config.encode()), f"configure {config}")
    try:
        ptr_of, size_of = {}, {}
        steps, phase, steady_before = [], None, 0
        calls_before = {}
        plans_before = plans_prev = None
        with open_trace(path) as f:
            next(f)
            for line in f:
                event, addr, size = line.split(",")[:3]
                if event == "alloc":
                    n = int(size)
                    p = dll.tensor_arena_alloc(n, CPU_DEVICE, None)
                    if not p:
                        raise SystemExit(f"cost_estimate: {path}: alloc of {n} bytes failed: {lib.text('last_error')}")
                    ptr_of[addr], size_of[addr] = p, n
                elif event == "free":
                    p = ptr_of.pop(addr, None)
                    if p is not None:
                        dll.tensor_arena_free(ctypes.c_void_p(p), size_of.pop(addr), CPU_DEVICE, None)
                elif event == "step_begin":
                    s = lib.json("stats_json")
                    phase, calls_before = s["phase"], dict(s.get("backing_calls") or {})
                    steady_before = s.get("steady_steps_with_backing_calls", 0)
                    plans_prev, plans_before = plans_before, s.get("plans")
                    lib.check(dll.tensor_arena_step_begin(), "step_begin")
                elif event == "phase":
                    lib.check(dll.tensor_arena_set_phase(int(size)), f"set_phase {size}")
                elif event == "step_end":
                    lib.check(dll.tensor_arena_step_end(), "step_end")
                    s = lib.json("stats_json")
                    calls = diff(s.get("backing_calls") or {}, calls_before)
                    counted = s.get("steady_steps_with_backing_calls", 0) > steady_before
                    memory = sum(v for k, v in calls.items() if k in MEMORY_CALLS)
                    kind = classify(phase, memory, counted, plans_before, plans_prev)
                    steps.append({"phase": phase, "kind": kind,
                                  "calls": calls, "seconds": price(calls)})
        final = lib.json("stats_json")
    finally:
        dll.tensor_arena_reset()
    return summarise(path, steps, final)


def summarise(path, steps, final):
    by_kind = {}
    for k in CLASSES:
        mine = [s for s in steps if s["kind"] == k]
        calls = {}
        for s in mine:
            for name, v in s["calls"].items():
                calls[name] = calls.get(name, 0) + v
        by_kind[k] = {"steps": len(mine), "calls": calls, "seconds": sum(s["seconds"] for s in mine),
                      "max_step_seconds": max((s["seconds"] for s in mine), default=0.0),
                      "steps_with_calls": sum(1 for s in mine if s["calls"]),
                      "releases": calls.get("release", 0)}
    steady = by_kind["steady"]
    return {
        "trace": str(path), "steps": len(steps), "estimate": "cost model (docs/device-costs.md, H200 idle medians) "
        "applied to a CPU replay with CUDA's 2 MiB page; not a measurement",
        "by_kind": by_kind,
        "steady_ms_per_step_mean": 1000 * steady["seconds"] / steady["steps"] if steady["steps"] else None,
        "steady_ms_per_step_max": 1000 * steady["max_step_seconds"],
        "whole_run_ms": 1000 * sum(s["seconds"] for s in steps),
        "replans": final.get("replans"), "served_share": final.get("served_share"),
        "per_step": [{"kind": s["kind"], "ms": round(1000 * s["seconds"], 3), "calls": s["calls"]} for s in steps],
    }


def line(est):
    b = est["by_kind"]
    parts = [f"{k} {b[k]['steps']} steps {1000 * b[k]['seconds']:.2f} ms" for k in CLASSES if b[k]["steps"]]
    mean = est["steady_ms_per_step_mean"]
    return (f"{pathlib.Path(est['trace']).name}: steady steps {b['steady']['steps_with_calls']} of "
            f"{b['steady']['steps']} with device calls, "
            f"{'n/a' if mean is None else f'{mean:.3f}'} ms per steady step (max {est['steady_ms_per_step_max']:.3f}), "
            f"releases in steady steps {b['steady']['releases']}; whole run {est['whole_run_ms']:.2f} ms "
            f"({'; '.join(parts)}); re-plans {est['replans']}")


def one(path, policy):
    """In a fresh process: the library is one per process and keeps its configuration."""
    import subprocess

    done = subprocess.run([sys.executable, __file__, "--child", str(path), "--policy", json.dumps(policy or {})],
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        return {"trace": str(path), "error": done.stderr.strip()[-600:]}
    return json.loads(done.stdout)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--json", help="write every estimate here")
    ap.add_argument("--policy", default="{}", help="configuration keys of the traced run (JSON)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    policy = json.loads(args.policy)
    if args.child:
        print(json.dumps(replay(args.traces[0], policy)))
        return 0
    results = [one(p, policy) for p in args.traces]
    for r in results:
        print(line(r) if "error" not in r else f"{r['trace']}: {r['error']}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
