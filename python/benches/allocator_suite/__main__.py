"""The allocator suite's runner: every loop under torch's own allocator, then under the planned allocator.

::

    python python/benches/allocator_suite [--loops a,b] [--steps N] [--out DIR] [--keep-traces]

For each loop (``LOOPS``) it runs the script twice with the same seed and one
intra-op thread (``OMP_NUM_THREADS=1``): as it is, and under ``python -m
tensor_arena.run --device cpu --stats S --trace T`` (the loops of 2 ranks, DDP,
FSDP2, DeepSpeed, Lightning, under ``torch.distributed.run --standalone
--nproc-per-node 2``, both times). It
checks that the losses and the final parameters' digest are bit-identical,
reads the allocator's stats JSON, and measures the whole run from the trace
(cut after its last ``step_end``): replayed through the same library
(``_replay.py``: the largest ``reserved_bytes`` after any request) for the
planned allocator, and through the repository's caching-allocator model
(``tensor-arena replay --platform cuda``, with and without
``--expandable-segments``; skipped when the binary is not found) for the
caching allocator. Then it writes ``DIR/suite.json`` and ``DIR/suite.md`` (the table for
BENCHMARKS.md; a table per rank follows for the loops of 2 ranks, each
rank's trace replayed too). ``--keep-traces`` also gzips each loop's trace
(rank 0 of the loops of 2 ranks) into ``alloc/tests/data/loops/NAME.csv.gz``
(``--traces DIR`` elsewhere). A loop whose package is missing (``NEEDS``:
DeepSpeed, Lightning) is skipped with its pip line, or installed first with
``--install``.

The stats keys are read defensively: a key the library does not write is
``n/a``. ``windows`` in the JSON says whether the stats carry the whole-run
figures (``expandable_model`` present) or, before them, the figures of the
current plan's steady steps (``peak_reserved_bytes``) and of the recorded
steps (``caching_model``). The planning wait: ``planning_wait_seconds_max``
(the most of any rank's stats) and ``planning_wait_over_median_step`` (against
the planned run's median step) per loop, the table's last column and the
worst ratio in its closing line (the target: at most 0.1).
"""

import argparse
import datetime
import gzip
import json
import math
import os
import pathlib
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[2]
MIB = 2**20

#: name: (script, what it exercises, ranks[, extra arguments]). A new loop is one row and one script.
LOOPS = {
    "resnet_multiscale": ("resnet_multiscale.py", "torchvision resnet18, image side and batch per step", 1),
    "masked_shapes": ("masked_shapes.py", "input shape per step, x[randn(x.shape) > 0.5] into an MLP", 1),
    "bert_varlen": ("bert_varlen.py", "BERT masked LM, sequence length 16..256 per step", 1),
    "t5_varlen": ("t5_varlen.py", "T5 encoder-decoder, source and target lengths per step", 1),
    "gpt2_accum_eval": ("gpt2_accum_eval.py", "GPT-2, 4 micro-batches per step, eval every 5 steps", 1),
    "ddp_gloo": ("ddp_gloo.py", "DDP (gloo, 2 ranks, torchrun), tiny GPT-2, fixed shape", 2),
    "dataloader_workers": ("dataloader_workers.py", "DataLoader, 2 forked workers, batch before zero_grad", 1),
    # The same loop with workers from a fresh interpreter: forked workers inherit the
    # allocator library and its trace buffer, so the fork run's trace is not one process's.
    "dataloader_forkserver": ("dataloader_workers.py", "the same, workers started by a forkserver", 1,
                              ["--start-method", "forkserver"]),
    "gpt2_fixed": ("gpt2_fixed.py", "GPT-2 at a fixed length", 1),
    "random_shapes": ("random_shapes.py", "masked attention, batch 1..32 and length 8..256 drawn every step", 1),
    "kept_losses": ("kept_losses.py", "GPT-2, loss history kept as tensors (never .item())", 1),
    # The engines users move to past plain DDP (issue 34), world size 2 over gloo.
    "fsdp2": ("fsdp2.py", "FSDP2 fully_shard per block (gloo, 2 ranks), tiny GPT-2", 2),
    "fsdp2_mixed": ("fsdp2.py", "the same, MixedPrecisionPolicy bf16 parameters, fp32 reduction", 2,
                    ["--mixed", "1"]),
    "fsdp2_checkpoint": ("fsdp2.py", "the same, activation checkpointing of every block", 2,
                         ["--checkpoint", "1"]),
    "fsdp2_keep_unsharded": ("fsdp2.py", "the same, reshard_after_forward=False (unsharded from all-gather to "
                             "reduce-scatter)", 2, ["--reshard", "0"]),
    "deepspeed_zero2": ("deepspeed_zero.py", "DeepSpeed ZeRO-2 (CPU accelerator, gloo, 2 ranks), tiny GPT-2", 2,
                        ["--stage", "2"]),
    "deepspeed_zero3": ("deepspeed_zero.py", "DeepSpeed ZeRO-3 (CPU accelerator, gloo, 2 ranks), tiny GPT-2", 2,
                        ["--stage", "3"]),
    "lightning_trainer": ("lightning_trainer.py", "Lightning Trainer, DDP (gloo, 2 ranks), validation every 5 steps",
                          2),
}

#: The loops that need a package the suite does not otherwise use: its import name and the
#: pinned pip line (``--install`` runs it into this interpreter's environment, else the loop is
#: reported as skipped with the line to run). DeepSpeed is built against the torch installed
#: (no build isolation: its setup.py looks torch up), the way the recorded runs installed it; it
#: JIT-builds its shared-memory op with ninja (a dependency of it) at run time.
NEEDS = {
    "deepspeed_zero2": ("deepspeed", ["--no-build-isolation", "deepspeed==0.19.8"]),
    "deepspeed_zero3": ("deepspeed", ["--no-build-isolation", "deepspeed==0.19.8"]),
    "lightning_trainer": ("lightning", ["lightning==2.6.6"]),
}


def parse():
    ap = argparse.ArgumentParser(prog="python python/benches/allocator_suite", description=__doc__.split("\n")[0])
    ap.add_argument("--loops", default=",".join(LOOPS), help="comma-separated loop names (default: all)")
    ap.add_argument("--steps", type=int, default=60, help="optimizer steps per run (default 60)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="allocator-suite-out", help="directory for suite.json, suite.md, runs")
    ap.add_argument("--keep-traces", action="store_true",
                    help="gzip each loop's trace into --traces (the replay data of alloc/tests)")
    ap.add_argument("--traces", default=str(REPO / "alloc" / "tests" / "data" / "loops"),
                    help="where --keep-traces puts NAME.csv.gz (default alloc/tests/data/loops)")
    ap.add_argument("--launcher-args", default="",
                    help="extra flags for python -m tensor_arena.run, e.g. \"--policy '{\\\"recent_steps\\\": 8}'\"")
    ap.add_argument("--binary", default=os.environ.get("TENSOR_ARENA_BIN", str(REPO / "target" / "release" / "tensor-arena")),
                    help="the tensor-arena binary for the trace replay (skipped when absent)")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per run")
    ap.add_argument("--install", action="store_true",
                    help="pip-install the pinned packages a selected loop needs (DeepSpeed, Lightning) when missing")
    args = ap.parse_args()
    args.loops = [n for n in args.loops.split(",") if n]
    unknown = [n for n in args.loops if n not in LOOPS]
    if unknown:
        ap.error(f"unknown loops {unknown}; known: {', '.join(LOOPS)}")
    return args


def environment():
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = "1"
    env["MKL_NUM_THREADS"] = "1"
    env.pop("TENSOR_ARENA_ALLOCATOR", None)
    env.pop("TENSOR_ARENA_CHECKED", None)
    env.pop("ALLOC_SUITE_OUT", None)
    # This interpreter's scripts directory first, as an activated environment has it: DeepSpeed
    # builds its ops with the ninja that pip put there.
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env.setdefault("DS_ACCELERATOR", "cpu")
    env.setdefault("DS_BUILD_OPS", "0")
    return env


def missing_packages(names, install):
    """The loops of ``names`` whose package is missing after ``--install`` (name -> the pip line)."""
    import importlib.util

    missing = {}
    for name in names:
        if name not in NEEDS:
            continue
        module, pip_args = NEEDS[name]
        if importlib.util.find_spec(module) is None and install:
            cmd = [sys.executable, "-m", "pip", "install", *pip_args]
            print(f"installing: {shlex.join(cmd)}", file=sys.stderr, flush=True)
            subprocess.run(cmd, env=environment(), check=False)
            importlib.invalidate_caches()
        if importlib.util.find_spec(module) is None:
            missing[name] = shlex.join([sys.executable, "-m", "pip", "install", *pip_args])
    return missing


def command(name, planned, run_dir, args):
    """The command line of one run; the results file is ``res-{rank}.json`` in ``run_dir``."""
    script, _, ranks, *extra = LOOPS[name]
    own = [str(HERE / script), *(extra[0] if extra else []), "--steps", str(args.steps),
           "--seed", str(args.seed), "--out", str(run_dir / "res-{rank}.json")]
    launch = [sys.executable]
    if ranks > 1:
        launch += ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks)]
    if not planned:
        return launch + own
    ta = ["-m", "tensor_arena.run", "--device", "cpu", "--stats", str(run_dir / "stats-{rank}.json"),
          "--trace", str(run_dir / "trace-{rank}.csv"), *shlex.split(args.launcher_args)]
    return launch + ta + own


def execute(cmd, run_dir, env, timeout):
    run_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, env=env, cwd=run_dir, capture_output=True, text=True, timeout=timeout)
        rc, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = "timeout", e.stdout or "", e.stderr or ""
        out, err = (x.decode() if isinstance(x, bytes) else x for x in (out, err))
    wall = time.perf_counter() - t0
    (run_dir / "stdout.txt").write_text(out)
    (run_dir / "stderr.txt").write_text(err)
    (run_dir / "command.txt").write_text(shlex.join(cmd) + "\n")
    return rc, wall, err


def read_json(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def get(d, *keys):
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def ratio(a, b):
    return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None


def complete_lines(trace):
    """The trace's lines up to its last ``step_end`` and the step boundary's segment lines after it.

    The library flushes at every ``step_end`` and ``step_begin``, so a process that exits leaves
    its last step's lines unwritten or cut in the middle of one. What the allocator does at a step
    boundary (a plan installed, a trim, the take-over's late pages mapped) is written after the
    ``step_end`` line and flushed with the next ``step_begin``: where that line is there, the
    boundary's lines are whole and kept (they can hold the run's peak)."""
    lines = trace.read_text().splitlines(keepends=True)
    last = max((i for i, line in enumerate(lines) if line.startswith("step_end")), default=0)
    begin = next((i for i in range(last + 1, len(lines)) if lines[i].startswith("step_begin")), None)
    if begin is not None and all(line.startswith("segment_") for line in lines[last + 1 : begin]):
        return lines[:begin]
    return lines[: last + 1]


def replay(binary, trace, expandable):
    """The caching-allocator model (CUDA rules) fed with every alloc/free of the trace: whole run.

    The trace's step markers are dropped and frees are written as ``free,ID``
    (the library's current trace gives 0 for a free's size; the replay
    checks sizes it is given).
    """
    if not (binary and os.path.isfile(binary) and trace.is_file()):
        return None
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as tmp:
        for line in complete_lines(trace)[1:]:
            event, addr, size, stream = (line.strip().split(",") + ["", "", ""])[:4]
            if event == "alloc":
                tmp.write(f"alloc,{addr},{size},{stream or 0}\n")
            elif event == "free":
                tmp.write(f"free,{addr}\n")
    cmd = [binary, "replay", tmp.name, "--platform", "cuda", "--json", "--no-search"]
    if expandable:
        cmd.append("--expandable-segments")
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    finally:
        os.unlink(tmp.name)
    if done.returncode != 0:
        return {"error": done.stderr.strip()[-400:]}
    d = json.loads(done.stdout)
    peak = get(d, "model", "stats", "reserved_bytes", "peak")
    live = get(d, "trace", "peak_live_requested")
    return {"peak_reserved_bytes": peak, "peak_live_bytes": live,
            "fragmentation": 1 - live / peak if peak and live is not None else None}


def launcher_policy(launcher_args):
    """The configuration the launcher makes of ``--launcher-args`` (its own parser), without the trace."""
    from tensor_arena import run as launcher

    ap = launcher._parser()
    policy = launcher._policy(ap.parse_args([*shlex.split(launcher_args), "loop.py"]))
    policy.pop("trace", None)
    return policy


def replay_planned(trace, policy):
    """The planned allocator's whole-run peak reserved, from its trace replayed through the library."""
    if not trace.is_file():
        return None
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as tmp:
        tmp.writelines(complete_lines(trace))
    cmd = [sys.executable, str(HERE / "_replay.py"), tmp.name, json.dumps(policy)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=environment())
    finally:
        os.unlink(tmp.name)
    if done.returncode != 0:
        return {"error": done.stderr.strip()[-400:]}
    return json.loads(done.stdout)


def compare(torch_res, planned_res):
    """Losses, eval losses and digest of every rank: identical or the first difference."""
    if torch_res is None or planned_res is None:
        return False, "a results file is missing"
    for key in ("losses", "eval_losses", "digest"):
        a, b = torch_res.get(key), planned_res.get(key)
        if a != b:
            if isinstance(a, list) and isinstance(b, list):
                i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
                return False, f"{key} differ from step {i} (lengths {len(a)} / {len(b)})"
            return False, f"{key} differ"
    return True, "bit-identical"


def median_step(res):
    times = (res or {}).get("step_times") or []
    return statistics.median(times[1:] or times) if times else None


def run_loop(name, args, out, env):
    _, what, ranks, *_ = LOOPS[name]
    row = {"loop": name, "what": what, "ranks": ranks}
    dirs = {}
    for mode in ("torch", "planned"):
        run_dir = out / "runs" / name / mode
        if run_dir.exists():
            shutil.rmtree(run_dir)
        cmd = command(name, mode == "planned", run_dir, args)
        rc, wall, err = execute(cmd, run_dir, env, args.timeout)
        row[f"{mode}_command"] = shlex.join(cmd)
        row[f"{mode}_wall_s"] = round(wall, 1)
        row[f"{mode}_rc"] = rc
        if rc != 0:
            row[f"{mode}_error"] = err.strip()[-2000:]
        dirs[mode] = run_dir
        print(f"  {name} {mode}: rc {rc}, {wall:.1f} s", file=sys.stderr, flush=True)
    per_rank = []
    for rank in range(ranks):
        t = read_json(dirs["torch"] / f"res-{rank}.json")
        p = read_json(dirs["planned"] / f"res-{rank}.json")
        per_rank.append(compare(t, p))
    row["identical"] = all(ok for ok, _ in per_rank)
    row["comparison"] = "; ".join(f"rank {r}: {why}" for r, (_, why) in enumerate(per_rank)) if ranks > 1 \
        else per_rank[0][1]
    t0 = read_json(dirs["torch"] / "res-0.json")
    p0 = read_json(dirs["planned"] / "res-0.json")
    row["torch_median_step_s"] = median_step(t0)
    row["planned_median_step_s"] = median_step(p0)
    row["step_time_ratio"] = ratio(row["planned_median_step_s"], row["torch_median_step_s"])
    row["stats"] = [read_json(dirs["planned"] / f"stats-{r}.json") for r in range(ranks)]
    s = row["stats"][0] or {}
    row["windows"] = "whole run" if "expandable_model" in s else "per plan (stats before issue 27)"
    row["planned_peak_reserved_bytes"] = s.get("peak_reserved_bytes")
    row["planned_reserved_bytes_at_exit"] = s.get("reserved_bytes")
    row["planned_fragmentation"] = s.get("fragmentation")
    row["caching_peak_reserved_bytes"] = get(s, "caching_model", "peak_reserved_bytes")
    row["caching_fragmentation"] = get(s, "caching_model", "fragmentation")
    row["caching_platform"] = get(s, "caching_model", "platform")
    row["expandable_peak_reserved_bytes"] = get(s, "expandable_model", "peak_reserved_bytes")
    row["expandable_fragmentation"] = get(s, "expandable_model", "fragmentation")
    row["planned_over_caching"] = ratio(row["planned_peak_reserved_bytes"], row["caching_peak_reserved_bytes"])
    row["planned_over_expandable"] = ratio(row["planned_peak_reserved_bytes"], row["expandable_peak_reserved_bytes"])
    for key in ("served_share", "replans", "plans", "misses", "fallback_allocations_max_step",
                "fallback_allocations_last_step", "slab_bytes", "slab_ratio", "steps", "errors",
                "lower_bound_bytes", "lower_bound_ratio", "backing_calls_max_steady_step",
                "device_call_seconds_estimate"):
        row[key] = s.get(key)
    # Device calls that take or give memory (events aside), whole run; the caching model's
    # device allocations over the same run.
    calls = s.get("backing_calls") or {}
    # The planning wait: the longest any rank's training thread waited for a plan (the join at a
    # swap, or a plan made at the step boundary), against the planned run's median step.
    waits = [(st or {}).get("planning_wait_seconds_max") for st in row["stats"]]
    waits = [w for w in waits if isinstance(w, (int, float))]
    row["planning_wait_seconds_max"] = max(waits) if waits else None
    row["planning_wait_over_median_step"] = ratio(row["planning_wait_seconds_max"], row["planned_median_step_s"])
    row["device_calls"] = sum(calls.get(k, 0) for k in (
        "reserve", "release", "reserve_address", "release_address", "map", "unmap")) if calls else None
    row["caching_device_allocations"] = get(s, "caching_model", "device_allocations")
    trace = dirs["planned"] / "trace-0.csv"
    row["trace_bytes"] = trace.stat().st_size if trace.is_file() else None
    row["replayed"] = replay_planned(trace, launcher_policy(args.launcher_args))
    row["trace_caching_model"] = replay(args.binary, trace, expandable=False)
    row["trace_expandable_model"] = replay(args.binary, trace, expandable=True)
    # The replay is faithful when it ends with the run's own per-plan peak (the same decisions).
    row["replay_matches_stats"] = get(row, "replayed", "stats_peak_reserved_bytes") == s.get("peak_reserved_bytes")
    whole = get(row, "replayed", "peak_reserved_bytes")
    row["whole_run_planned_over_caching"] = ratio(whole, get(row, "trace_caching_model", "peak_reserved_bytes"))
    row["whole_run_planned_over_expandable"] = ratio(whole, get(row, "trace_expandable_model", "peak_reserved_bytes"))
    row["per_rank"] = [per_rank_figures(0, per_rank[0][1], s, row["replayed"], row["trace_caching_model"])]
    for r in range(1, ranks):
        tr = dirs["planned"] / f"trace-{r}.csv"
        sr = row["stats"][r] or {}
        row["per_rank"].append(per_rank_figures(
            r, per_rank[r][1], sr, replay_planned(tr, launcher_policy(args.launcher_args)),
            replay(args.binary, tr, expandable=False)))
    unusable = get(row, "replayed", "error")
    if args.keep_traces and trace.is_file() and unusable:
        row["trace_not_kept"] = unusable  # a trace the replay refuses is no test data
    elif args.keep_traces and trace.is_file():
        dest = pathlib.Path(args.traces) / f"{name}.csv.gz"
        dest.parent.mkdir(parents=True, exist_ok=True)
        with gzip.GzipFile(dest, "wb", mtime=0) as gz:
            gz.write("".join(complete_lines(trace)).encode())
        row["kept_trace"] = str(dest)
        row["kept_trace_bytes"] = dest.stat().st_size
    if not args.keep_traces:
        for r in range(ranks):
            (dirs["planned"] / f"trace-{r}.csv").unlink(missing_ok=True)
    return row


def per_rank_figures(rank, comparison, stats, replayed, caching):
    """One rank's row: its comparison, whole-run planned and caching-model peaks, served share."""
    planned = get(replayed or {}, "peak_reserved_bytes")
    cached = get(caching or {}, "peak_reserved_bytes")
    return {"rank": rank, "comparison": comparison, "planned_peak_reserved_bytes": planned,
            "caching_peak_reserved_bytes": cached, "planned_over_caching": ratio(planned, cached),
            "served_share": stats.get("served_share"), "replans": stats.get("replans"),
            "errors": {k: v for k, v in (stats.get("errors") or {}).items() if v}}


def rank_table(rows):
    """Every rank of the multi-rank loops: the whole-run peaks (trace replay) and the served share."""
    lines = ["| loop | rank | losses, params | planned / caching MiB (whole run) | planned / caching | served "
             "| re-plans | errors |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["ranks"] < 2:
            continue
        for p in r.get("per_rank") or []:
            lines.append(
                f"| {r['loop']} | {p['rank']} | {p['comparison']} "
                f"| {mib(p['planned_peak_reserved_bytes'])} / {mib(p['caching_peak_reserved_bytes'])} "
                f"| {num(p['planned_over_caching'])} | {pct(p['served_share'], floor=True)} "
                f"| {num(p['replans'], '{}')} | {p['errors'] or 'none'} |")
    return "\n".join(lines) if len(lines) > 2 else ""


def mib(n):
    return f"{n / MIB:.1f}" if isinstance(n, (int, float)) else "n/a"


def pct(x, floor=False):
    if not isinstance(x, (int, float)):
        return "n/a"
    return f"{math.floor(x * 10000) / 100:.2f}%" if floor else f"{x * 100:.1f}%"


def ms(seconds, fmt="{:.2f}"):
    return fmt.format(seconds * 1000) if isinstance(seconds, (int, float)) else "n/a"


def num(x, fmt="{:.2f}"):
    return fmt.format(x) if isinstance(x, (int, float)) else "n/a"


def geomean(xs):
    xs = [x for x in xs if isinstance(x, (int, float)) and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def steps_with_fallback(replayed):
    """'k of n': the served steps of the replay that needed the fallback, and the served steps."""
    served = [p for p in replayed.get("per_step") or [] if p.get("phase") == "serving"]
    if not served:
        return "n/a"
    return f"{sum(1 for p in served if p.get('fallback_allocations'))} of {len(served)}"


def table(rows):
    head = ("| loop | losses, params | whole run (trace replay): planned / caching / expandable MiB "
            "| planned / caching | planned / expandable "
            "| stats: peak reserved planned / caching / expandable MiB | stats: fragmentation planned / caching / "
            "expandable | served | re-plans | fallback allocations max / last step "
            "| served steps with fallback allocations | step time planned / torch "
            "| live lower bound MiB | planned / lower bound | caching / lower bound "
            "| device calls (steady max) / caching model allocations "
            "| longest planning wait ms / median step ms (wait / step) |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        tc, te, rp = (r.get(k) or {} for k in ("trace_caching_model", "trace_expandable_model", "replayed"))
        ident = "identical" if r["identical"] else f"**differ** ({r['comparison']})"
        if r.get("planned_rc") not in (0, None) or r.get("torch_rc") not in (0, None):
            ident = f"**failed** (torch rc {r.get('torch_rc')}, planned rc {r.get('planned_rc')})"
        lines.append(
            f"| {r['loop']} | {ident} "
            f"| {mib(rp.get('peak_reserved_bytes'))} / {mib(tc.get('peak_reserved_bytes'))} / "
            f"{mib(te.get('peak_reserved_bytes'))} "
            f"| {num(r['whole_run_planned_over_caching'])} | {num(r['whole_run_planned_over_expandable'])} "
            f"| {mib(r['planned_peak_reserved_bytes'])} / {mib(r['caching_peak_reserved_bytes'])} / "
            f"{mib(r['expandable_peak_reserved_bytes'])} "
            f"| {pct(r['planned_fragmentation'])} / {pct(r['caching_fragmentation'])} / "
            f"{pct(r['expandable_fragmentation'])} "
            f"| {pct(r['served_share'], floor=True)} | {num(r['replans'], '{}')} "
            f"| {num(r['fallback_allocations_max_step'], '{}')} / {num(r['fallback_allocations_last_step'], '{}')} "
            f"| {steps_with_fallback(rp)} | {num(r['step_time_ratio'], '{:.3f}')} "
            f"| {mib(r.get('lower_bound_bytes'))} | {num(r.get('lower_bound_ratio'), '{:.3f}')} "
            f"| {num(ratio(tc.get('peak_reserved_bytes'), r.get('lower_bound_bytes')), '{:.3f}')} "
            f"| {num(r.get('device_calls'), '{}')} ({num(r.get('backing_calls_max_steady_step'), '{}')}) / "
            f"{num(r.get('caching_device_allocations'), '{}')} "
            f"| {ms(r.get('planning_wait_seconds_max'))} / {ms(r.get('planned_median_step_s'), '{:.1f}')} "
            f"({num(r.get('planning_wait_over_median_step'), '{:.3f}')}) |"
        )
    g = geomean(r["whole_run_planned_over_caching"] for r in rows)
    ge = geomean(r["whole_run_planned_over_expandable"] for r in rows)
    gs = geomean(r["planned_over_caching"] for r in rows)
    gse = geomean(r["planned_over_expandable"] for r in rows)
    glb = geomean(r.get("lower_bound_ratio") for r in rows)
    waits = [r.get("planning_wait_over_median_step") for r in rows]
    waits = [w for w in waits if isinstance(w, (int, float))]
    worst = max(waits) if waits else None
    windows = sorted({r.get("windows") for r in rows})
    lines.append("")
    lines.append(f"Geometric mean, whole run (trace replay): planned / caching {num(g, '{:.3f}')}, "
                 f"planned / expandable {num(ge, '{:.3f}')}; from the stats ({', '.join(windows)}): "
                 f"planned / caching {num(gs, '{:.3f}')}, planned / expandable {num(gse, '{:.3f}')}; "
                 f"planned / live lower bound {num(glb, '{:.3f}')}; longest planning wait / median step: "
                 f"at most {num(worst, '{:.3f}')}, within 10% on {sum(w <= 0.1 for w in waits)} of {len(waits)} "
                 f"loops.")
    return "\n".join(lines), {"whole_run_planned_over_caching": g, "whole_run_planned_over_expandable": ge,
                              "stats_planned_over_caching": gs, "stats_planned_over_expandable": gse,
                              "planned_over_lower_bound": glb, "planning_wait_over_median_step_max": worst}


def versions():
    import torch

    v = {"python": platform.python_version(), "torch": torch.__version__}
    from importlib import metadata

    for dist_name in ("torchvision", "transformers", "deepspeed", "lightning"):
        try:
            v[dist_name] = metadata.version(dist_name)  # not imported: DeepSpeed probes devices on import
        except metadata.PackageNotFoundError:
            v[dist_name] = None
    return v


def main():
    args = parse()
    out = pathlib.Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = environment()
    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.perf_counter()
    rows = []
    skipped = missing_packages(args.loops, args.install)
    for name, line in skipped.items():
        print(f"{name}: skipped, its package is missing (--install, or: {line})", file=sys.stderr, flush=True)
    for name in args.loops:
        if name in skipped:
            continue
        print(f"{name}:", file=sys.stderr, flush=True)
        rows.append(run_loop(name, args, out, env))
    md, means = table(rows)
    ranks_md = rank_table(rows)
    if ranks_md:
        md += "\n\nPer rank (the loops under torchrun):\n\n" + ranks_md
    wall = time.perf_counter() - t0
    record = {
        "command": shlex.join([sys.executable, *sys.argv]), "started": started.isoformat(timespec="seconds"),
        "wall_s": round(wall, 1), "steps": args.steps, "seed": args.seed, "versions": versions(),
        "launcher_args": args.launcher_args, "geomean": means, "loops": rows, "skipped": skipped,
    }
    (out / "suite.json").write_text(json.dumps(record, indent=1))
    (out / "suite.md").write_text(md + "\n")
    print(md)
    print(f"\n{len(rows)} loops, {args.steps} steps each, {wall:.0f} s; {out / 'suite.json'}", file=sys.stderr)
    failed = [r["loop"] for r in rows if not r["identical"]]
    if failed:
        print(f"losses or parameters differ, or a run failed: {', '.join(failed)}", file=sys.stderr)
    if skipped:
        print(f"skipped, a package missing (--install): {', '.join(skipped)}", file=sys.stderr)
    return 1 if failed or skipped else 0


if __name__ == "__main__":
    sys.exit(main())
