"""The planned allocator against torch's caching allocator and expandable segments, one command.

::

    python python/gpu_check/suite.py OUT [--budget S] [--only NAME ...] [--device cuda|cpu] [--tiny]

Every loop of ``suite_loops.py`` runs three times, each in a fresh process:
``caching`` (torch's caching allocator, ``PYTORCH_CUDA_ALLOC_CONF`` unset),
``expandable`` (``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``) and
``planned`` (``python -m tensor_arena.run --device DEVICE``). Then, per loop
and allocator: device memory as the driver sees it (NVML per process, else
``cudaMemGetInfo`` against the baseline before the first allocation) beside
``max_memory_reserved()``, the median step time with the device synchronised,
whether the losses are bit-identical across the three, and for the planned
run the served share, re-plans and device calls in steady steps.

Two more items: ``capacity`` (on the article's loop, the smallest
``torch.cuda.set_per_process_memory_fraction`` at which each allocator trains
30 steps without running out of memory, found by bisection in
``--capacity-tries`` runs each) and ``contract`` (``suite_contract.py``: out of
memory, ``_snapshot()``, ``memory_summary()``, the memory fraction, graph
capture refused, ``record_stream`` under the mapped ranges).

``OUT/suite.json`` and ``OUT/suite.md`` are rewritten after every run, so a
run stopped from outside keeps what finished. No run starts when its estimate
does not fit in what is left of ``--budget`` (default 480 s) and every run's
timeout is what is left, so the suite ends within the budget; what was
skipped is listed with the reason. ``--only`` gives the items and their order
(default: ``ITEMS``, the ones that decide the question first).

``--device cpu --tiny`` runs every loop small on the CPU (device columns
n/a, the planned run under ``--device cpu``, the contract's CPU checks, the
capacity n/a) and fills the same table: the suite's CI form
(python/tests/test_gpu_suite.py). There the planned run also writes its trace,
and ``cost_estimate.py`` prices the device calls a CUDA device would make
for it (an estimate, named as one). ``--device cuda`` without a CUDA device
exits 2 before running anything, as the rest of python/gpu_check does.
"""

import argparse
import concurrent.futures
import datetime
import json
import math
import os
import pathlib
import platform
import shlex
import socket
import statistics
import subprocess
import sys
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
MIB = 2**20

LOOPS = ("article", "gpt2_eval", "bert_varlen", "resnet_multiscale", "fixed_shape", "cudnn_benchmark")
#: Default order: the loops that decide the question first, the contract (a crash there was the
#: last GPU run's finding) and the capacity (the seed's complaint) right after the first two.
ITEMS = ("article", "gpt2_eval", "contract", "capacity", "bert_varlen", "resnet_multiscale", "fixed_shape",
         "cudnn_benchmark")
ALLOCATORS = ("caching", "expandable", "planned")
#: Seconds one run is expected to take (startup, model build, steps), before a run of the same loop
#: measured it; a run starts only when this fits in what is left of the budget.
ESTIMATE_S = {"cuda": {"article": 15, "gpt2_eval": 30, "bert_varlen": 25, "resnet_multiscale": 25,
                       "fixed_shape": 25, "cudnn_benchmark": 20, "contract": 25, "capacity_try": 12},
              "cpu": {"article": 10, "gpt2_eval": 15, "bert_varlen": 15, "resnet_multiscale": 10,
                      "fixed_shape": 15, "cudnn_benchmark": 10, "contract": 10, "capacity_try": 10}}
CAPACITY_STEPS = 30
TARGETS = {"device_vs_caching_geomean": 0.85, "step_time_ratio": 1.02, "capacity_ratio": 0.75}


def parse(argv=None):
    ap = argparse.ArgumentParser(prog="python python/gpu_check/suite.py", description=__doc__.split("\n")[0])
    ap.add_argument("out", help="folder for suite.json, suite.md and each run's files")
    ap.add_argument("--budget", type=float, default=480.0, help="seconds the whole suite may take (default 480)")
    ap.add_argument("--only", action="append", default=None,
                    help=f"items in this order (repeatable or comma-separated): {', '.join(ITEMS)}")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--tiny", action="store_true", help="small sizes (the CPU form in CI)")
    ap.add_argument("--steps", type=int, help="steps per loop (default 30, --tiny 12)")
    ap.add_argument("--capacity-tries", type=int, default=3, help="bisection runs per allocator (default 3: the answer to 1/8 of the range)")
    ap.add_argument("--launcher-args", default="", help="extra flags for python -m tensor_arena.run")
    ap.add_argument("--trace", action=argparse.BooleanOptionalAction, default=None,
                    help="the planned run writes its trace and cost_estimate.py prices it (default: on the CPU)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="CPU only: run a loop's three runs at once (for CI's time; their step times then "
                         "compete for the cores)")
    args = ap.parse_args(argv)
    if args.jobs > 1 and args.device != "cpu":
        ap.error("--jobs > 1 is for --device cpu: on a GPU the runs would share the device and its memory figures")
    items = []
    for group in args.only or [",".join(ITEMS)]:
        items += [n for n in group.split(",") if n]
    unknown = [n for n in items if n not in ITEMS]
    if unknown:
        ap.error(f"unknown items {unknown}; known: {', '.join(ITEMS)}")
    args.items = items
    if args.trace is None:
        args.trace = args.device == "cpu"
    return args


# ---- running one process -------------------------------------------------------------------


def environment(allocator):
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    for key in ("TENSOR_ARENA_ALLOCATOR", "TENSOR_ARENA_CHECKED", "PYTORCH_CUDA_ALLOC_CONF"):
        env.pop(key, None)
    if allocator == "expandable":
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    return env


def loop_command(loop, allocator, run_dir, args, fraction=None, steps=None):
    own = [str(HERE / "suite_loops.py"), loop, "--device", args.device, "--out", str(run_dir / "result.json")]
    if args.tiny:
        own.append("--tiny")
    steps = steps or args.steps
    if steps:
        own += ["--steps", str(steps)]
    if fraction is not None:
        own += ["--fraction", f"{fraction:.6f}"]
    if allocator != "planned":
        return [sys.executable, *own]
    launcher = [sys.executable, "-m", "tensor_arena.run", "--device", args.device,
                "--stats", str(run_dir / "stats.json"), *shlex.split(args.launcher_args)]
    if args.trace and fraction is None:
        launcher += ["--trace", str(run_dir / "trace.csv")]
    return launcher + own


def execute(cmd, run_dir, env, timeout):
    run_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=max(1, timeout))
        rc, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = "timeout", e.stdout or "", e.stderr or ""
        out, err = (x.decode(errors="replace") if isinstance(x, bytes) else x for x in (out, err))
    wall = time.perf_counter() - t0
    (run_dir / "stdout.txt").write_text(out)
    (run_dir / "stderr.txt").write_text(err)
    (run_dir / "command.txt").write_text(shlex.join(cmd) + "\n")
    return rc, wall, err


def read_json(path):
    try:
        return json.loads(pathlib.Path(path).read_text())
    except (OSError, ValueError):
        return None


# ---- figures -------------------------------------------------------------------------------


def ratio(a, b):
    return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None


def geomean(xs):
    xs = [x for x in xs if isinstance(x, (int, float)) and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def compare_losses(results):
    """Losses and eval losses of the three runs: bit-identical, or the first difference."""
    present = {a: r for a, r in results.items() if r is not None}
    if len(present) < len(ALLOCATORS):
        return None, f"runs missing: {', '.join(a for a in ALLOCATORS if a not in present)}"
    ref = present["caching"]
    for a in ("expandable", "planned"):
        for key in ("losses", "eval_losses"):
            x, y = ref.get(key) or [], present[a].get(key) or []
            if x != y:
                i = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
                return False, f"{a}: {key} differ from the caching run's at step {i} (lengths {len(x)} / {len(y)})"
    if not ref.get("losses"):
        return None, "no losses"
    return True, f"bit-identical ({len(ref['losses'])} losses, {len(ref.get('eval_losses') or [])} eval losses)"


def serving_step_calls(probes):
    """From the planned run's per-step probes: ``(serving steps, serving steps with device calls, most calls in
    one)``; (None, None, None) without probes. probes[0] is read before the first step, probes[i + 1] after
    step i: its ``backing_calls_last_step`` are step i's calls, and step i ran in the phase probes[i] read.
    The library's own steady-step figures (``backing_calls_max_steady_step``) leave out the plan's first
    steps; these count every serving step."""
    if not probes or probes[0] is None:
        return None, None, None
    serving, with_calls, worst = 0, 0, 0
    for before, after in zip(probes[:-1], probes[1:]):
        if before is None or after is None or before.get("phase") != "serving":
            continue
        calls = after.get("backing_calls_last_step") or 0
        serving += 1
        with_calls += calls > 0
        worst = max(worst, calls)
    return serving, with_calls, worst


def figures(result, stats):
    """One run's row: memory, time, planned figures (None where not applicable)."""
    if result is None:
        return None
    dm = result.get("device_memory") or {}
    f = {"steps_done": result.get("steps_done"), "oom": result.get("oom"),
         "device_bytes": dm.get("peak_over_baseline_bytes"), "device_source": dm.get("source"),
         "total_bytes": dm.get("total_bytes"),
         "max_memory_reserved": result.get("max_memory_reserved"),
         "max_memory_allocated": result.get("max_memory_allocated"),
         "median_step_s": result.get("median_step_s"), "nondeterministic": result.get("nondeterministic"),
         "model": result.get("model"), "reserved_at_baseline": result.get("reserved_at_baseline")}
    ps = result.get("planned_stats") or stats
    if result.get("planned") and ps:
        serving, with_calls, worst = serving_step_calls(result.get("probes"))
        f.update(served_share=ps.get("served_share"), replans=ps.get("replans"),
                 fallback_allocations_max_step=ps.get("fallback_allocations_max_step"),
                 backing_calls_max_steady_step=ps.get("backing_calls_max_steady_step"),
                 steady_steps_with_backing_calls=ps.get("steady_steps_with_backing_calls"),
                 device_call_seconds_estimate=ps.get("device_call_seconds_estimate"),
                 library_peak_reserved_bytes=ps.get("peak_reserved_bytes"),
                 lower_bound_bytes=ps.get("lower_bound_bytes"),
                 caching_model_peak_reserved_bytes=ps.get("caching_model_peak_reserved_bytes"),
                 serving_steps=serving, serving_step_calls_max=worst, serving_steps_with_calls=with_calls,
                 errors={k: v for k, v in (ps.get("errors") or {}).items() if v})
    return f


# ---- the capacity search ---------------------------------------------------------------------


def bisect_fraction(trains, lo, hi, tries):
    """The smallest fraction in (lo, hi] at which ``trains(f)`` holds, by bisection in ``tries`` calls.

    Assumes ``trains`` fails at ``lo``, holds at ``hi`` (not tried: the bracket comes from the
    unconstrained runs' peaks) and is monotonic. Returns ``(passed, failed, log)``: the smallest
    fraction seen to train (None when no try did: the answer is then in (failed, hi]), the largest
    seen to fail (``lo`` when none did), and every try as ``(fraction, trained)``. ``trains``
    returns True, False, or None (no answer, e.g. no budget left: the search stops there).
    """
    passed, failed, log = None, lo, []
    for _ in range(tries):
        f = (failed + (passed if passed is not None else hi)) / 2
        ok = trains(f)
        log.append((f, ok))
        if ok is None:
            break
        if ok:
            passed = f
        else:
            failed = f
    return passed, failed, log


# ---- the report ----------------------------------------------------------------------------


def mib(n):
    return f"{n / MIB:,.0f}" if isinstance(n, (int, float)) else "n/a"


def num(x, fmt="{:.2f}"):
    return fmt.format(x) if isinstance(x, (int, float)) else "n/a"


def pct(x):
    return f"{math.floor(x * 10000) / 100:.2f}%" if isinstance(x, (int, float)) else "n/a"


def run_state(run):
    if run is None:
        return "not run"
    if run.get("skipped"):
        return "skipped"
    if run.get("rc") != 0:
        return f"rc {run.get('rc')}"
    f = run.get("figures") or {}
    if f.get("oom"):
        return f"OOM at step {f['oom']['step']}"
    return "ok"


def loop_table(record):
    head = ("| loop | runs c / e / p | losses | device MiB c / e / p | max_memory_reserved MiB c / e / p "
            "| planned / caching device | planned / expandable device | median step ms c / e / p "
            "| planned / caching time | served | re-plans | device calls in steady steps: max per step, steps with "
            "any (library) | serving steps with device calls / serving steps (most in one) "
            "| est. device-call ms per steady step, mean (max) (CPU trace, cost model) |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for name in LOOPS:
        row = record["loops"].get(name)
        if row is None:
            continue
        f = {a: ((row["runs"].get(a) or {}).get("figures") or {}) for a in ALLOCATORS}
        p = f["planned"]
        states = " / ".join(run_state(row["runs"].get(a)) for a in ALLOCATORS)
        ident = {True: "identical", False: f"**differ**: {row.get('comparison')}", None: row.get("comparison")}[
            row.get("identical")]
        if name == "cudnn_benchmark" and row.get("identical") is False:
            ident += " (cudnn.benchmark picks algorithms by timing)"
        est = row.get("cost_estimate") or {}
        calls = (f"{num(p.get('backing_calls_max_steady_step'), '{}')}, "
                 f"{num(p.get('steady_steps_with_backing_calls'), '{}')} | "
                 f"{num(p.get('serving_steps_with_calls'), '{}')} / {num(p.get('serving_steps'), '{}')} "
                 f"({num(p.get('serving_step_calls_max'), '{}')})") if p else "n/a | n/a"
        lines.append(
            f"| {name} | {states} | {ident} "
            f"| {' / '.join(mib(f[a].get('device_bytes')) for a in ALLOCATORS)} "
            f"| {' / '.join(mib(f[a].get('max_memory_reserved')) for a in ALLOCATORS)} "
            f"| {num(row.get('planned_over_caching_device'), '{:.3f}')} "
            f"| {num(row.get('planned_over_expandable_device'), '{:.3f}')} "
            f"| {' / '.join(num(f[a].get('median_step_s') and 1000 * f[a]['median_step_s']) for a in ALLOCATORS)} "
            f"| {num(row.get('planned_over_caching_time'), '{:.3f}')} "
            f"| {pct(p.get('served_share'))} | {num(p.get('replans'), '{}')} | {calls} "
            f"| {num(est.get('steady_ms_per_step_mean'), '{:.3f}')} (max {num(est.get('steady_ms_per_step_max'), '{:.3f}')}) |")
    return "\n".join(lines)


def capacity_table(cap):
    if not cap:
        return ""
    if cap.get("na"):
        return f"Capacity: {cap['na']}"
    lines = ["| allocator | smallest fraction that trained 30 steps | largest that ran out of memory | GiB at the "
             "smallest | tries |",
             "|---|---|---|---|---|"]
    for a in ALLOCATORS:
        c = cap.get("allocators", {}).get(a)
        if c is None:
            lines.append(f"| {a} | not run | | | |")
            continue
        gib = c["needs"] * cap["total_bytes"] / 2**30 if c.get("needs") and cap.get("total_bytes") else None
        passed = num(c.get("passed"), "{:.4f}") if c.get("needs_tested") else \
            f"none of the tries (<= {cap['hi']:.4f}, untested)"
        crashed = c.get("crashed") or []
        tries = ", ".join(f"{f:.4f}: " + ("trained" if ok else "no answer" if ok is None else
                                          "crashed" if f in crashed else "OOM") for f, ok in c["log"])
        lines.append(f"| {a} | {passed} | {num(c.get('failed'), '{:.4f}')} "
                     f"| {num(gib)} | {tries or c.get('note', '')} |")
    lines.append("")
    lines.append(f"Range searched: {cap['lo']:.4f} .. {cap['hi']:.4f} ({cap.get('range_from')}); planned / caching "
                 f"fraction: {num(cap.get('planned_over_caching'), '{:.3f}')}"
                 f"{'' if cap.get('planned_over_caching_tested', True) else ' (an untested bound in it)'} "
                 f"(target <= {TARGETS['capacity_ratio']}).")
    return "\n".join(lines)


def contract_table(contract):
    if not contract:
        return ""
    if contract.get("skipped"):
        return f"Contract: skipped ({contract['skipped']})"
    checks = (contract.get("result") or {}).get("checks") or {}
    lines = ["| contract check | result | detail |", "|---|---|---|"]
    for name, c in checks.items():
        ok = {True: "yes", False: "**NO**", None: "n/a"}[c.get("ok")]
        detail = json.dumps(c.get("detail"))[:300].replace("|", "/")
        lines.append(f"| {name} | {ok} | {detail} |")
    if not checks:
        lines.append(f"| (none) | rc {contract.get('rc')} | {str(contract.get('error', ''))[-300:]} |")
    return "\n".join(lines)


def targets(record):
    """Each target of issue 40 with its figure: met, missed, or n/a (and why)."""
    rows, loops = [], record["loops"]
    device = record["device"] == "cuda"
    worse, slower = [], []
    for name, row in loops.items():
        pc, pe, t = row.get("planned_over_caching_device"), row.get("planned_over_expandable_device"), \
            row.get("planned_over_caching_time")
        if device and (pc is None or pc > 1 or pe is None or pe > 1):
            worse.append(f"{name} ({num(pc, '{:.3f}')} / {num(pe, '{:.3f}')})")
        if t is not None and t > TARGETS["step_time_ratio"]:
            slower.append(f"{name} ({t:.3f})")
    g = record.get("geomean_planned_over_caching_device")
    na = "n/a on the CPU (no device memory)"
    rows.append(("planned device memory <= caching and <= expandable, every loop",
                 (("missed: " + ", ".join(worse)) if worse else "met") if device else na))
    rows.append((f"geomean planned / caching device memory <= {TARGETS['device_vs_caching_geomean']}",
                 (f"{'met' if g is not None and g <= TARGETS['device_vs_caching_geomean'] else 'missed'}: "
                  f"{num(g, '{:.3f}')}") if device else na))
    rows.append((f"median step time <= {TARGETS['step_time_ratio']}x caching, every loop",
                 ("missed: " + ", ".join(slower)) if slower else
                 ("met" if device else "met on the CPU (not the target's device; timings of a shared VM)")))
    cap = record.get("capacity") or {}
    cr = cap.get("planned_over_caching")
    rows.append((f"capacity: planned fraction <= {TARGETS['capacity_ratio']}x caching's",
                 cap.get("na") or (f"{'met' if cr is not None and cr <= TARGETS['capacity_ratio'] else 'missed'}: "
                                   f"{num(cr, '{:.3f}')}" if cap else "not run")))
    calls = [(n, (r["runs"].get("planned") or {}).get("figures") or {}) for n, r in loops.items()]
    busy = [f"{n} ({f.get('backing_calls_max_steady_step')} in a step, {f.get('steady_steps_with_backing_calls')} "
            "steps)" for n, f in calls if f.get("backing_calls_max_steady_step")]
    rows.append(("0 device calls in steady steps", ("missed: " + ", ".join(busy)) if busy else "met"
                 + ("" if device else " (host backing; the cost model's estimate is in its column)")))
    differ = [n for n, r in loops.items() if r.get("identical") is False]
    rows.append(("losses bit-identical", ("missed: " + ", ".join(differ)) if differ else "met"))
    oom = ((record.get("contract") or {}).get("result") or {}).get("checks", {}).get("oom", {})
    rows.append(("out of memory an exception the process survives",
                 {True: "met", False: "missed", None: "n/a"}.get(oom.get("ok"), "not run")))
    rows.append(("whole suite <= 8 minutes", f"{'met' if record['wall_s'] <= 480 else 'missed'}: {record['wall_s']:.0f} s"))
    return "\n".join(["| target | result |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows])


def markdown(record):
    dev = record["device"]
    lines = [f"# GPU suite of the planned allocator ({dev}{', tiny' if record['tiny'] else ''})", "",
             f"{record['started']} on {record['host']} ({record.get('gpu') or 'no GPU'}), torch {record['torch']}, "
             f"{record['wall_s']:.0f} s of a {record['budget']:.0f} s budget. Command: `{record['command']}`", "",
             "c / e / p: torch's caching allocator / expandable_segments:True / planned (python -m tensor_arena.run). "
             "Device MiB: " + ("the driver's figure over the baseline before the first allocation "
                               "(source per run in suite.json)." if dev == "cuda" else
                               "n/a on the CPU (max_memory_reserved too)."), "",
             loop_table(record), ""]
    if record.get("jobs", 1) > 1:
        lines += [f"The three runs of each loop ran at once (--jobs {record['jobs']}): their step times competed "
                  "for the cores and compare nothing.", ""]
    if record.get("geomean_planned_over_caching_device") is not None:
        lines += [f"Geometric mean planned / caching device memory: "
                  f"{record['geomean_planned_over_caching_device']:.3f}.", ""]
    lines += [capacity_table(record.get("capacity")), "", contract_table(record.get("contract")), "",
              "Targets (issue 40):", "", targets(record), ""]
    if record["skipped"]:
        lines += ["Skipped:", ""] + [f"- {s}" for s in record["skipped"]] + [""]
    if record.get("estimate_note"):
        lines += [record["estimate_note"], ""]
    return "\n".join(lines)


# ---- the driver ------------------------------------------------------------------------------


class Suite:
    def __init__(self, args):
        self.args = args
        self.out = pathlib.Path(args.out).resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        self.start = time.perf_counter()
        self.deadline = self.start + args.budget
        self.estimates = dict(ESTIMATE_S[args.device])
        self.lock = threading.Lock()
        self.record = {
            "command": shlex.join([sys.executable, *sys.argv]), "device": args.device, "tiny": args.tiny,
            "budget": args.budget, "items": args.items, "host": socket.gethostname(),
            "platform": platform.platform(), "python": platform.python_version(),
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "torch": None, "gpu": None, "wall_s": 0.0, "loops": {}, "capacity": None, "contract": None,
            "skipped": [], "targets": TARGETS, "jobs": args.jobs,
        }

    def left(self):
        return self.deadline - time.perf_counter()

    def write(self):
        self.record["wall_s"] = time.perf_counter() - self.start
        # Written under a temporary name and renamed: a run stopped from outside leaves whole files.
        for name, text in (("suite.json", json.dumps(self.record, indent=1)), ("suite.md", markdown(self.record))):
            tmp = self.out / f".{name}.tmp"
            tmp.write_text(text)
            os.replace(tmp, self.out / name)

    def fits(self, what, estimate):
        if estimate <= self.left():
            return True
        self.record["skipped"].append(f"{what}: budget (needs about {estimate:.0f} s, {max(0, self.left()):.0f} s left)")
        print(f"  {what}: skipped, does not fit the budget", file=sys.stderr, flush=True)
        return False

    def run_loop_once(self, loop, allocator, run_dir, fraction=None, steps=None):
        cmd = loop_command(loop, allocator, run_dir, self.args, fraction, steps)
        (run_dir / "result.json").unlink(missing_ok=True)
        rc, wall, err = execute(cmd, run_dir, environment(allocator), self.left())
        result = read_json(run_dir / "result.json")
        stats = read_json(run_dir / "stats.json")
        if result:
            self.record["torch"] = self.record["torch"] or result.get("torch")
            self.record["gpu"] = self.record["gpu"] or result.get("gpu")
        run = {"rc": rc, "wall_s": round(wall, 1), "command": shlex.join(cmd), "figures": figures(result, stats)}
        if rc != 0:
            run["error"] = err.strip()[-1500:]
        return run, result

    def loop(self, name):
        row = {"loop": name, "runs": {}}
        self.record["loops"][name] = row
        results = {a: None for a in ALLOCATORS}
        todo = []
        for allocator in ALLOCATORS:
            # One at a time, each run is checked just before it starts; in parallel (--jobs, CPU only)
            # they start together, each with the whole time left.
            if not self.fits(f"{name} / {allocator}", self.estimates[name]):
                row["runs"][allocator] = {"skipped": "budget"}
                continue
            todo.append(allocator)
            if self.args.jobs > 1:
                continue
            self.loop_run(name, allocator, row, results)
        if self.args.jobs > 1 and todo:
            with concurrent.futures.ThreadPoolExecutor(self.args.jobs) as pool:
                list(pool.map(lambda a: self.loop_run(name, a, row, results), todo))

    def loop_run(self, name, allocator, row, results):
        run_dir = self.out / "runs" / name / allocator
        run_dir.mkdir(parents=True, exist_ok=True)
        for stale in ("stats.json", "trace.csv"):
            (run_dir / stale).unlink(missing_ok=True)
        run, result = self.run_loop_once(name, allocator, run_dir)
        self.estimates[name] = max(self.estimates[name] * 0.5, run["wall_s"] * 1.2)
        if self.args.jobs > 1:
            run["parallel"] = self.args.jobs
        estimate = None
        if allocator == "planned" and self.args.trace and (run_dir / "trace.csv").is_file():
            estimate = self.estimate(run_dir / "trace.csv")
        print(f"  {name} / {allocator}: rc {run['rc']}, {run['wall_s']} s", file=sys.stderr, flush=True)
        with self.lock:  # the record changes only under the lock: write() serialises it
            row["runs"][allocator] = run
            results[allocator] = result if run["rc"] == 0 else None
            if estimate is not None:
                row["cost_estimate"] = estimate
            self.summarise_loop(row, results)
            self.write()

    def estimate(self, trace):
        est_json = trace.with_name("cost_estimate.json")
        cmd = [sys.executable, str(HERE / "cost_estimate.py"), str(trace), "--json", str(est_json),
               "--policy", json.dumps(launcher_policy(self.args.launcher_args))]
        execute(cmd, trace.parent / "cost_estimate", environment("caching"), max(1, self.left()))
        got = read_json(est_json)
        if not got or "error" in got[0]:
            return {"error": (got or [{}])[0].get("error", "no output")}
        e = got[0]
        return {k: e.get(k) for k in ("steady_ms_per_step_mean", "steady_ms_per_step_max", "whole_run_ms",
                                      "estimate")} | {"by_kind": {k: {kk: v[kk] for kk in ("steps", "seconds",
                                                                                            "steps_with_calls", "releases")}
                                                                  for k, v in e["by_kind"].items()}}

    def summarise_loop(self, row, results):
        row["identical"], row["comparison"] = compare_losses(results)
        f = {a: ((row["runs"].get(a) or {}).get("figures") or {}) for a in ALLOCATORS}
        row["planned_over_caching_device"] = ratio(f["planned"].get("device_bytes"), f["caching"].get("device_bytes"))
        row["planned_over_expandable_device"] = ratio(f["planned"].get("device_bytes"),
                                                      f["expandable"].get("device_bytes"))
        row["planned_over_caching_time"] = ratio(f["planned"].get("median_step_s"), f["caching"].get("median_step_s"))
        row["expandable_over_caching_time"] = ratio(f["expandable"].get("median_step_s"),
                                                    f["caching"].get("median_step_s"))
        self.record["geomean_planned_over_caching_device"] = geomean(
            r.get("planned_over_caching_device") for r in self.record["loops"].values())

    def contract(self):
        if not self.fits("contract", self.estimates["contract"]):
            self.record["contract"] = {"skipped": "budget"}
            return
        run_dir = self.out / "runs" / "contract"
        cmd = [sys.executable, str(HERE / "suite_contract.py"), "--device", self.args.device,
               "--out", str(run_dir / "contract.json")]
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "contract.json").unlink(missing_ok=True)
        rc, wall, err = execute(cmd, run_dir, environment("planned"), self.left())
        self.record["contract"] = {"rc": rc, "wall_s": round(wall, 1), "command": shlex.join(cmd),
                                   "result": read_json(run_dir / "contract.json")}
        if rc != 0:
            self.record["contract"]["error"] = err.strip()[-1500:]
        print(f"  contract: rc {rc}, {wall:.1f} s", file=sys.stderr, flush=True)
        self.write()

    def capacity_range(self):
        """Bracket from the article's own runs: below the smallest live peak nothing trains; 10% above the
        largest device peak every allocator should. Without them, 2% .. 30% of the device."""
        row = self.record["loops"].get("article")
        figs = [((row or {}).get("runs", {}).get(a) or {}).get("figures") or {} for a in ALLOCATORS]
        lives = [f.get("max_memory_allocated") for f in figs if f.get("max_memory_allocated")]
        tops = [max(f.get("device_bytes") or 0, f.get("max_memory_reserved") or 0) for f in figs]
        return lives, tops

    def capacity(self):
        cap = {"allocators": {}}
        self.record["capacity"] = cap
        if self.args.device != "cuda":
            cap["na"] = "n/a on the CPU (set_per_process_memory_fraction is CUDA's); the bisection is tested in CI"
            self.write()
            return
        total = self.total_memory()
        cap["total_bytes"] = total
        lives, tops = self.capacity_range()
        if total and lives and max(tops) > 0:
            cap["lo"], cap["hi"] = 0.95 * min(lives) / total, min(1.0, 1.10 * max(tops) / total)
            cap["range_from"] = "the article loop's runs: 0.95 x smallest live peak .. 1.10 x largest device peak"
        else:
            cap["lo"], cap["hi"], cap["range_from"] = 0.02, 0.30, "default (the article loop's runs missing)"
        for allocator in ("caching", "planned", "expandable"):
            entry = {"log": []}
            cap["allocators"][allocator] = entry

            def trains(fraction, allocator=allocator):
                i = len(entry["log"])
                if not self.fits(f"capacity / {allocator} / try {i + 1}", self.estimates["capacity_try"]):
                    return None
                run_dir = self.out / "runs" / "capacity" / allocator / f"try{i + 1}"
                run, result = self.run_loop_once("article", allocator, run_dir, fraction, CAPACITY_STEPS)
                self.estimates["capacity_try"] = max(self.estimates["capacity_try"] * 0.5, run["wall_s"] * 1.2)
                entry.setdefault("runs", []).append({"fraction": fraction, **run})
                if run["rc"] == "timeout":
                    return None  # cut by the budget: no answer
                if run["rc"] != 0 or result is None:
                    entry.setdefault("crashed", []).append(fraction)
                    return False  # a crash is no training; it is listed (``crashed``) and in its run's files
                return result.get("oom") is None and result.get("steps_done") == CAPACITY_STEPS

            passed, failed, log = bisect_fraction(trains, cap["lo"], cap["hi"], self.args.capacity_tries)
            # No try trained: the answer is in (failed, hi], and hi stands for it (untested).
            entry.update(passed=passed, failed=failed, log=log, needs=passed if passed is not None else cap["hi"],
                         needs_tested=passed is not None)
            got = {a: cap["allocators"][a] for a in ("planned", "caching") if a in cap["allocators"]}
            if len(got) == 2:
                cap["planned_over_caching"] = ratio(got["planned"]["needs"], got["caching"]["needs"])
                cap["planned_over_caching_tested"] = all(g["needs_tested"] for g in got.values())
            print(f"  capacity / {allocator}: {log}", file=sys.stderr, flush=True)
            self.write()

    def total_memory(self):
        for row in self.record["loops"].values():
            for run in row["runs"].values():
                f = (run or {}).get("figures") or {}
                if f.get("total_bytes"):
                    return f["total_bytes"]
        done = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.get_device_properties(0)"
                               ".total_memory)"], capture_output=True, text=True, timeout=120)
        try:
            return int(done.stdout.strip())
        except ValueError:
            return None

    def run(self):
        self.write()
        for item in self.args.items:
            print(f"{item} ({self.left():.0f} s left):", file=sys.stderr, flush=True)
            if item == "contract":
                self.contract()
            elif item == "capacity":
                self.capacity()
            else:
                self.loop(item)
        if self.args.trace:
            self.record["estimate_note"] = (
                "Last column: an ESTIMATE, not a measurement: the planned run's CPU trace replayed with CUDA's "
                "2 MiB page and priced with docs/device-costs.md's per-call costs (python/gpu_check/cost_estimate.py).")
        self.write()
        print(markdown(self.record))
        return self.record


def launcher_policy(launcher_args):
    """The configuration the launcher makes of ``--launcher-args`` (its own parser), without the trace."""
    from tensor_arena import run as launcher

    policy = launcher._policy(launcher._parser().parse_args([*shlex.split(launcher_args), "loop.py"]))
    policy.pop("trace", None)
    return policy


def cuda_missing():
    """Why CUDA cannot be used here (None when it can), asked in a child: the driver never holds a context."""
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                           capture_output=True, text=True)
    if probe.stdout.strip() == "True":
        return None
    return f"torch.cuda.is_available() -> {probe.stdout.strip() or probe.stderr.strip()[-300:]}"


def main(argv=None):
    args = parse(argv)
    if args.device == "cuda":
        why = cuda_missing()
        if why:
            print(f"gpu_check suite: --device cuda but no CUDA device ({why}); "
                  "the CPU form is --device cpu --tiny", file=sys.stderr)
            return 2
    record = Suite(args).run()
    failed = [n for n, r in record["loops"].items()
              if any((r["runs"].get(a) or {}).get("rc") not in (0, None) for a in ALLOCATORS)]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
