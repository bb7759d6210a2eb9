"""Generated training loops: the planned allocator held to loops nobody tuned it on.

::

    python python/benches/generated_loops --count N --seed S --out DIR [--only I,J] [--steps N]
        [--jobs J] [--timeout SECONDS] [--keep-traces] [--traces DIR] [--launcher-args "..."]
        [--allow-failures]

Loop ``i`` of generation ``S`` is made from ``(S, i)`` alone (``_spec.py``): a
random stack of linear, convolution, attention and norm layers, a shape
schedule (fixed, bucketed, random per step, growing), sizes that depend on the
data (boolean masks, ``nonzero``, padding masks), eval passes with another
batch size under ``no_grad``, gradient accumulation, kept tensors, 20 to 200
steps. Each loop runs twice in fresh processes with one intra-op thread, the
way the allocator suite runs its loops (``allocator_suite/__main__.py``, whose
process machinery this reuses): as it is, under torch's own CPU allocator, and
under ``python -m tensor_arena.run --device cpu --stats S --trace T``. The losses,
eval losses and the digest of the final state (parameters, buffers, kept
tensors) must be bit-identical. The whole-run figures come from the planned
run's stats (every figure there is over the whole run) and its trace
(``_trace.py``: the segment lines' peak, the steps that set a new live peak).

Writes ``DIR/summary.json`` (per loop: seed, index, description, spec, status
and figures; ``distribution``: median, 90th percentile, min and max of every
ratio, the share of loops bit-identical) and ``DIR/summary.md``; both are
rewritten after every loop, so a run cut short leaves what it measured.
``--keep-traces`` gzips each planned run's trace (cut after its last
``step_end``) to ``--traces`` (default ``DIR/traces``) as
``loop-S-III.csv.gz``, the format of ``alloc/tests/data/loops`` (replay them in
Rust with ``TA_LOOPS_DIR=DIR cargo run --release -p tensor-arena-alloc
--example replay_loops``). ``--only I,J`` reruns those loops; a summary
already in ``DIR`` of the same seed, steps and launcher flags keeps its other
loops. A loss mismatch, a crash or a run past ``--timeout`` is recorded as such
(``status``); the process then exits 1 unless ``--allow-failures``.
"""

import argparse
import concurrent.futures
import datetime
import gzip
import importlib.util
import json
import math
import os
import pathlib
import platform
import shlex
import shutil
import sys
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _spec import describe, make_spec  # noqa: E402
from _trace import analyse  # noqa: E402

MIB = 2**20


def _suite():
    """The allocator suite's runner as a module (its process machinery: environment, runs, compare)."""
    path = HERE.parent / "allocator_suite" / "__main__.py"
    spec = importlib.util.spec_from_file_location("allocator_suite_runner", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


suite = _suite()

#: The ratios of the distribution (lower is better; 1 is the live lower bound's limit).
RATIOS = ("planned_over_lower_bound", "planned_over_caching", "planned_over_expandable",
          "caching_over_lower_bound", "new_peak_step_ratio_max")
#: The other figures of the distribution.
FIGURES = ("served_share", "replans", "device_calls", "device_calls_max_steady_step",
           "planning_wait_seconds_max", "lower_bound_bytes", "step_time_ratio")


def parse(argv=None):
    ap = argparse.ArgumentParser(prog="python python/benches/generated_loops", description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=100, help="loops 0..N-1 (default 100)")
    ap.add_argument("--seed", type=int, default=1, help="the generation's seed (default 1)")
    ap.add_argument("--out", default="generated-loops-out", help="directory for summary.json, summary.md, runs")
    ap.add_argument("--only", default=None, help="comma-separated loop indices to (re)run instead of 0..N-1")
    ap.add_argument("--steps", type=int, default=None, help="override every loop's step count (e.g. for CI)")
    ap.add_argument("--jobs", type=int, default=1, help="loops run at once (default 1)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per run (a run past it is a hang)")
    ap.add_argument("--keep-traces", action="store_true", help="gzip each planned run's trace into --traces")
    ap.add_argument("--traces", default=None, help="where --keep-traces writes loop-S-III.csv.gz (default DIR/traces)")
    ap.add_argument("--launcher-args", default="", help="extra flags for python -m tensor_arena.run")
    ap.add_argument("--resummarize", action="store_true",
                    help="run nothing: write summary.json and summary.md again from the loops of DIR/summary.json "
                         "(their kept traces read again)")
    ap.add_argument("--allow-failures", action="store_true",
                    help="exit 0 even when a loop's losses differ or a run crashed or hung")
    args = ap.parse_args(argv)
    if args.only:
        try:
            args.indices = sorted({int(x) for x in args.only.split(",") if x.strip()})
        except ValueError:
            ap.error(f"--only takes comma-separated integers, not {args.only!r}")
    else:
        args.indices = list(range(args.count))
    if any(i < 0 for i in args.indices):
        ap.error("loop indices are >= 0")
    if args.steps is not None and args.steps < 1:
        ap.error("--steps must be >= 1")
    if args.jobs < 1:
        ap.error("--jobs must be >= 1")
    return args


def command(seed, index, steps, planned, run_dir, launcher_args):
    own = [str(HERE / "_loop.py"), "--seed", str(seed), "--index", str(index), "--out", str(run_dir / "res.json")]
    if steps is not None:
        own += ["--steps", str(steps)]
    if not planned:
        return [sys.executable, *own]
    return [sys.executable, "-m", "tensor_arena.run", "--device", "cpu", "--stats", str(run_dir / "stats.json"),
            "--trace", str(run_dir / "trace.csv"), *shlex.split(launcher_args), *own]


def status_of(row):
    """ok, mismatch (both ran, results differ), crash (a run's exit status not 0), timeout."""
    rcs = (row["torch_rc"], row["planned_rc"])
    if "timeout" in rcs:
        return "timeout"
    if any(rc != 0 for rc in rcs):
        return "crash"
    return "ok" if row["identical"] else "mismatch"


def run_loop(index, args, out, env):
    spec = make_spec(args.seed, index)
    if args.steps is not None:
        spec["steps"] = args.steps
    name = f"loop-{args.seed}-{index:03d}"
    row = {"index": index, "seed": args.seed, "name": name, "description": describe(spec), "spec": spec,
           "steps": spec["steps"]}
    dirs = {}
    for mode in ("torch", "planned"):
        run_dir = out / "runs" / name / mode
        if run_dir.exists():
            shutil.rmtree(run_dir)
        cmd = command(args.seed, index, args.steps, mode == "planned", run_dir, args.launcher_args)
        rc, wall, err = suite.execute(cmd, run_dir, env, args.timeout)
        row[f"{mode}_command"] = shlex.join(cmd)
        row[f"{mode}_wall_s"] = round(wall, 1)
        row[f"{mode}_rc"] = rc
        if rc != 0:
            row[f"{mode}_error"] = err.strip()[-2000:]
        dirs[mode] = run_dir
    t = suite.read_json(dirs["torch"] / "res.json")
    p = suite.read_json(dirs["planned"] / "res.json")
    row["identical"], row["comparison"] = suite.compare(t, p)
    row["status"] = status_of(row)
    row["torch_median_step_s"] = suite.median_step(t)
    row["planned_median_step_s"] = suite.median_step(p)
    row["step_time_ratio"] = suite.ratio(row["planned_median_step_s"], row["torch_median_step_s"])
    s = suite.read_json(dirs["planned"] / "stats.json") or {}
    figures(row, s)
    trace = dirs["planned"] / "trace.csv"
    if trace.is_file():
        lines = suite.complete_lines(trace)
        row["trace_lines"] = len(lines)
        row.update(analyse(lines))
        # Reading the stats flushes the trace (the library's `stats()`), so the whole file holds
        # every event the stats count, the step left open at exit included; the figures above
        # (and a kept trace) stop at the last step boundary.
        whole = [line for line in trace.read_text().splitlines(keepends=True) if line.endswith("\n")]
        whole_peak = analyse(whole)["trace_peak_reserved_bytes"]
        row["trace_matches_stats"] = whole_peak == row["planned_peak_reserved_bytes"]
        if args.keep_traces and len(lines) > 1:
            dest = pathlib.Path(args.traces) / f"{name}.csv.gz"
            dest.parent.mkdir(parents=True, exist_ok=True)
            with gzip.GzipFile(dest, "wb", mtime=0) as gz:
                gz.write("".join(lines).encode())
            row["kept_trace"] = str(dest)
        trace.unlink()
    print(f"{name}: {row['status']}, planned/LB {num(row.get('planned_over_lower_bound'), '{:.3f}')}, "
          f"planned/caching {num(row.get('planned_over_caching'), '{:.3f}')}, "
          f"served {pct(row.get('served_share'))}, re-plans {row.get('replans')}, "
          f"{row['torch_wall_s']} + {row['planned_wall_s']} s: {row['description']}", file=sys.stderr, flush=True)
    return row


def figures(row, s):
    """The whole-run figures of the planned run's stats JSON (``s``; empty when the run wrote none)."""
    get, ratio = suite.get, suite.ratio
    row["planned_peak_reserved_bytes"] = s.get("peak_reserved_bytes")
    row["lower_bound_bytes"] = s.get("lower_bound_bytes")
    row["caching_peak_reserved_bytes"] = get(s, "caching_model", "peak_reserved_bytes")
    row["expandable_peak_reserved_bytes"] = get(s, "expandable_model", "peak_reserved_bytes")
    row["planned_over_lower_bound"] = ratio(row["planned_peak_reserved_bytes"], row["lower_bound_bytes"])
    row["planned_over_caching"] = ratio(row["planned_peak_reserved_bytes"], row["caching_peak_reserved_bytes"])
    row["planned_over_expandable"] = ratio(row["planned_peak_reserved_bytes"], row["expandable_peak_reserved_bytes"])
    row["caching_over_lower_bound"] = ratio(row["caching_peak_reserved_bytes"], row["lower_bound_bytes"])
    for key in ("served_share", "replans", "plans", "fallback_allocations_max_step", "slab_bytes",
                "planning_wait_seconds_max", "device_call_seconds_estimate", "steady_steps_with_backing_calls"):
        row[key] = s.get(key)
    row["device_calls_max_steady_step"] = s.get("backing_calls_max_steady_step")
    calls = s.get("backing_calls")
    # Device calls that take or give memory (events aside), as the allocator suite counts them.
    row["device_calls"] = sum(calls.get(k, 0) for k in (
        "reserve", "release", "reserve_address", "release_address", "map", "unmap")) if calls else None
    row["caching_device_allocations"] = get(s, "caching_model", "device_allocations")
    row["errors"] = {k: v for k, v in (s.get("errors") or {}).items() if v} if s else None


def quantile(xs, q):
    """The ``q`` quantile of ``xs`` (sorted), linear between the two nearest ranks (numpy's default)."""
    if not xs:
        return None
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def spread(values):
    xs = sorted(x for x in values if isinstance(x, (int, float)) and not isinstance(x, bool))
    if not xs:
        return {"n": 0, "median": None, "p10": None, "p90": None, "min": None, "max": None}
    return {"n": len(xs), "median": quantile(xs, 0.5), "p10": quantile(xs, 0.1), "p90": quantile(xs, 0.9),
            "min": xs[0], "max": xs[-1]}


#: Classes of the live lower bound (MiB, lower edge inclusive): a loop's fixed costs (512-byte blocks, 4 KiB host
#: pages, the warm-up's last chunk) are a larger share of a smaller bound, so the distribution is given per class too.
BOUND_CLASSES = ((0, 1), (1, 2), (2, 8), (8, None))


def bound_class(lower_bound_bytes):
    """The name of the class of ``BOUND_CLASSES`` a live lower bound falls in ("2-8 MiB"), or None without one."""
    if not isinstance(lower_bound_bytes, (int, float)) or lower_bound_bytes <= 0:
        return None
    mib_ = lower_bound_bytes / MIB
    for lo, hi in BOUND_CLASSES:
        if mib_ >= lo and (hi is None or mib_ < hi):
            return class_name(lo, hi)
    return None


def class_name(lo, hi):
    return f"{lo}-{hi} MiB" if hi is not None else f"{lo} MiB and over"


def by_bound(rows):
    """Per class of the live lower bound: loops, planned / LB median and p90, served median, the new-peak step's
    reserved / live p90 (the classes in ``BOUND_CLASSES`` order; a class with no loop is left out)."""
    groups = {}
    for r in rows:
        name = bound_class(r.get("lower_bound_bytes"))
        if name is not None:
            groups.setdefault(name, []).append(r)
    order = [class_name(lo, hi) for lo, hi in BOUND_CLASSES]
    out = {}
    for name in order:
        g = groups.get(name)
        if not g:
            continue
        ratio = spread(r.get("planned_over_lower_bound") for r in g)
        out[name] = {"loops": len(g), "planned_over_lower_bound_median": ratio["median"],
                     "planned_over_lower_bound_p90": ratio["p90"],
                     "served_share_median": spread(r.get("served_share") for r in g)["median"],
                     "new_peak_step_ratio_max_p90": spread(r.get("new_peak_step_ratio_max") for r in g)["p90"]}
    return out


def distribution(rows):
    dist = {"loops": len(rows)}
    statuses = {}
    for r in rows:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    dist["status"] = statuses
    dist["identical_share"] = sum(1 for r in rows if r["identical"]) / len(rows) if rows else None
    for key in (*RATIOS, *FIGURES):
        dist[key] = spread(r.get(key) for r in rows)
    for key in RATIOS[:3]:
        xs = [r.get(key) for r in rows if isinstance(r.get(key), (int, float))]
        dist[key]["geomean"] = suite.geomean(xs)
    dist["planned_above_caching"] = [r["index"] for r in rows
                                     if isinstance(r.get("planned_over_caching"), float) and r["planned_over_caching"] > 1]
    dist["planned_above_expandable"] = [r["index"] for r in rows if isinstance(r.get("planned_over_expandable"), float)
                                        and r["planned_over_expandable"] > 1]
    dist["trace_differs_from_stats"] = [r["index"] for r in rows if r.get("trace_matches_stats") is False]
    dist["targets"] = targets(dist, rows)
    for part in ("family", "schedule"):
        groups = {}
        for r in rows:
            groups.setdefault(r["spec"]["family"] if part == "family" else r["spec"]["shape"]["kind"], []).append(r)
        dist[f"by_{part}"] = {name: {"loops": len(g), **{key: spread(r.get(key) for r in g)["median"] for key in (
            "planned_over_lower_bound", "planned_over_caching", "served_share", "replans")}}
            for name, g in sorted(groups.items())}
    dist["by_bound"] = by_bound(rows)
    return dist


def targets(dist, rows):
    """Issue 38's targets for the generated loops: each with the figure it is judged on and whether it is met."""
    def at_most(value, limit):
        return {"value": value, "limit": limit, "met": value is not None and value <= limit}

    over = [r for r in rows if r["status"] == "ok" and not (
        isinstance(r.get("planned_over_caching"), float) and r["planned_over_caching"] <= 1
        and isinstance(r.get("planned_over_expandable"), float) and r["planned_over_expandable"] <= 1)]
    served = dist["served_share"]["median"]
    return {
        "planned_over_lower_bound_median": at_most(dist["planned_over_lower_bound"]["median"], 1.05),
        "planned_over_lower_bound_p90": at_most(dist["planned_over_lower_bound"]["p90"], 1.12),
        "served_share_median": {"value": served, "limit": 0.99, "met": served is not None and served >= 0.99},
        "replans_p90": at_most(dist["replans"]["p90"], 3),
        "new_peak_step_ratio_max": at_most(dist["new_peak_step_ratio_max"]["max"], 1.10),
        "planned_within_both_models": {"value": len(rows) - len(over), "limit": len(rows), "met": not over},
        "bit_identical": {"value": dist["identical_share"], "limit": 1.0, "met": dist["identical_share"] == 1.0},
    }


def mib(n):
    return f"{n / MIB:.1f}" if isinstance(n, (int, float)) else "n/a"


def pct(x):
    return f"{math.floor(x * 10000) / 100:.2f}%" if isinstance(x, (int, float)) else "n/a"


def num(x, fmt="{:.3f}"):
    return fmt.format(x) if isinstance(x, (int, float)) else "n/a"


def markdown(record):
    d = record["distribution"]
    out = [f"Command: `{record['command']}`", "",
           f"Started {record['started']}, {record['wall_s']} s ({record.get('cpu_s', 'n/a')} CPU s); {record['machine']}; torch {record['torch']}, "
           f"Python {record['python']}.", "",
           f"{d['loops']} loops: {', '.join(f'{n} {k}' for k, n in sorted(d['status'].items()))}; "
           f"bit-identical (losses, eval losses, final state): {pct(d['identical_share'])}.", "",
           "| figure | median | p90 | min | max | geomean |", "|---|---|---|---|---|---|"]
    for key in (*RATIOS, "served_share", "replans", "device_calls", "device_calls_max_steady_step",
                "planning_wait_seconds_max", "lower_bound_bytes", "step_time_ratio"):
        x = d[key]
        if key == "served_share":
            f = pct
        elif key == "lower_bound_bytes":
            def f(v):
                return f"{mib(v)} MiB"
        elif key in ("replans", "device_calls", "device_calls_max_steady_step"):
            def f(v):
                return num(v, "{:g}")
        elif key == "planning_wait_seconds_max":
            def f(v):
                return f"{num(v * 1000 if v is not None else None, '{:.1f}')} ms"
        else:
            f = num
        out.append(f"| {key} | {f(x['median'])} | {f(x['p90'])} | {f(x['min'])} | {f(x['max'])} "
                   f"| {num(x.get('geomean'))} |")
    out += ["", "| target (issue 38) | value | limit | met |", "|---|---|---|---|"]
    for key, t in d["targets"].items():
        value = num(t["value"], "{}" if isinstance(t["value"], int) else "{:.3f}")
        out.append(f"| {key} | {value} | {num(t['limit'], '{:g}')} | {'yes' if t['met'] else '**no**'} |")
    for part in ("family", "schedule"):
        out += ["", f"| {part} | loops | planned / LB | planned / caching | served | re-plans (medians) |",
                "|---|---|---|---|---|---|"]
        for name, g in d[f"by_{part}"].items():
            out.append(f"| {name} | {g['loops']} | {num(g['planned_over_lower_bound'])} "
                       f"| {num(g['planned_over_caching'])} | {pct(g['served_share'])} | {num(g['replans'], '{:g}')} |")
    out += ["", "| live lower bound | loops | planned / LB median | planned / LB p90 | served median "
            "| new-peak step reserved / live p90 |", "|---|---|---|---|---|---|"]
    for name, g in d.get("by_bound", {}).items():
        out.append(f"| {name} | {g['loops']} | {num(g['planned_over_lower_bound_median'])} "
                   f"| {num(g['planned_over_lower_bound_p90'])} | {pct(g['served_share_median'])} "
                   f"| {num(g['new_peak_step_ratio_max_p90'])} |")
    out += ["", f"Planned above the caching model: {d['planned_above_caching'] or 'none'}; above the expandable "
            f"model: {d['planned_above_expandable'] or 'none'}; trace's peak differs from the stats': "
            f"{d['trace_differs_from_stats'] or 'none'}.", "",
            "| loop | status | planned / LB / caching / expandable MiB | planned / LB | planned / caching "
            "| planned / expandable | served | re-plans | device calls (steady max) | planning wait ms "
            "| new-peak step reserved / live (step) | peak step | description |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in record["loops"]:
        st = r["status"] if r["status"] == "ok" else f"**{r['status']}** ({r['comparison']})"
        wait = r.get("planning_wait_seconds_max")
        out.append(
            f"| {r['index']} | {st} | {mib(r.get('planned_peak_reserved_bytes'))} / {mib(r.get('lower_bound_bytes'))} "
            f"/ {mib(r.get('caching_peak_reserved_bytes'))} / {mib(r.get('expandable_peak_reserved_bytes'))} "
            f"| {num(r.get('planned_over_lower_bound'))} | {num(r.get('planned_over_caching'))} "
            f"| {num(r.get('planned_over_expandable'))} | {pct(r.get('served_share'))} | {num(r.get('replans'), '{}')} "
            f"| {num(r.get('device_calls'), '{}')} ({num(r.get('device_calls_max_steady_step'), '{}')}) "
            f"| {num(wait * 1000 if wait is not None else None, '{:.1f}')} "
            f"| {num(r.get('new_peak_step_ratio_max'))} ({num(r.get('new_peak_step_worst'), '{}')}) "
            f"| {num(r.get('peak_reserved_step'), '{}')} | {r['description']} |")
    return "\n".join(out) + "\n"


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs ({cpu})"


def previous_rows(out, args):
    """The loops of a summary already in ``out`` made with the same seed, steps and launcher flags."""
    old = suite.read_json(out / "summary.json")
    if not old or (old.get("seed"), old.get("steps"), old.get("launcher_args")) != \
            (args.seed, args.steps, args.launcher_args):
        return {}
    return {r["index"]: r for r in old.get("loops", []) if r["index"] not in args.indices}


def resummarize(out):
    """The summary of ``out`` written again from its loops (a newer runner's distribution and tables)."""
    record = suite.read_json(out / "summary.json")
    if not record:
        print(f"no summary to read in {out}", file=sys.stderr)
        return 2
    for row in record["loops"]:
        kept = pathlib.Path(row.get("kept_trace") or "")
        if kept.is_file():  # the trace's figures read again, with this runner's _trace.py
            lines = gzip.decompress(kept.read_bytes()).decode().splitlines(keepends=True)
            row.update(analyse(lines))
            # A kept trace stops at the last step boundary: the run's own check (over the whole
            # file) stays where it was made.
            row.setdefault("trace_matches_stats",
                           row["trace_peak_reserved_bytes"] == row["planned_peak_reserved_bytes"])
    record["distribution"] = distribution(record["loops"])
    (out / "summary.json").write_text(json.dumps(record, indent=1))
    (out / "summary.md").write_text(markdown(record))
    print(markdown(record).split("\n\n| loop |")[0])
    return 0


def main(argv=None):
    args = parse(argv)
    out = pathlib.Path(args.out).resolve()
    if args.resummarize:
        return resummarize(out)
    out.mkdir(parents=True, exist_ok=True)
    args.traces = str(pathlib.Path(args.traces).resolve()) if args.traces else str(out / "traces")
    env = suite.environment()
    import torch

    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.perf_counter()
    rows = previous_rows(out, args)
    lock = threading.Lock()

    def write():
        ordered = [rows[i] for i in sorted(rows)]
        record = {"command": shlex.join([sys.executable, *sys.argv]) if argv is None else shlex.join(argv),
                  "started": started.isoformat(timespec="seconds"), "wall_s": round(time.perf_counter() - t0, 1),
                  # CPU seconds of every run so far (user + system of the waited-for children): the cost
                  # of the loops whatever else loads the machine.
                  "cpu_s": round(os.times().children_user + os.times().children_system, 1),
                  "machine": machine(), "python": platform.python_version(), "torch": torch.__version__,
                  "seed": args.seed, "steps": args.steps, "launcher_args": args.launcher_args,
                  "timeout_s": args.timeout, "selected": args.indices,
                  "complete": all(i in rows for i in args.indices),
                  "distribution": distribution(ordered), "loops": ordered}
        (out / "summary.json").write_text(json.dumps(record, indent=1))
        (out / "summary.md").write_text(markdown(record))
        return record

    def one(index):
        row = run_loop(index, args, out, env)
        with lock:
            rows[index] = row
            write()
        return row

    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        list(pool.map(one, args.indices))
    record = write()
    d = record["distribution"]
    print(markdown(record).split("\n\n| loop |")[0])
    failed = [r for r in record["loops"] if r["status"] != "ok"]
    for r in failed:
        print(f"{r['name']}: {r['status']}: {r['comparison']}", file=sys.stderr)
    print(f"\n{d['loops']} loops, {record['wall_s']:.0f} s; {out / 'summary.json'}", file=sys.stderr)
    return 1 if failed and not args.allow_failures else 0


if __name__ == "__main__":
    sys.exit(main())
