"""The planned allocator on a real NVIDIA GPU: one driver, one fresh process per scenario.

    python python/gpu_check/check.py OUT_DIR            # every scenario, then OUT_DIR/summary.{json,md}
    python python/gpu_check/check.py OUT_DIR --only oom # one scenario

Run by python/gpu_check/run.sh. Each scenario runs in its own process
(torch's CUDA allocator can be chosen once per process) under a timeout, and
the whole run stops starting scenarios after --budget seconds (default 450),
so it ends within 8 minutes; a scenario not started is reported as such.
--max-timeout caps each scenario's own timeout (for a short lease), and
summary.json / summary.md are rewritten after every scenario, so a run killed
from outside keeps what finished. The scenarios run in the order --only gives
them (default: the order below).
Without a CUDA device it exits 2 before running anything.

Scenarios (the planned allocator's library on host pages is never used
here: the backend is "cuda"):

- build: ``python -m tensor_arena.extensions build cuda``;
- pytest: the CUDA tests of python/tests (``-k cuda``);
- gpt2: python/examples/planned_allocator.py --device cuda (bit-identical
  losses against torch's own allocator, share served from the plan);
- stats_loop: a training loop that calls memory_summary(),
  max_memory_allocated(), memory_allocated() every step and
  reset_peak_memory_stats() once, compared with the library's figures;
- cudnn_benchmark: torch.backends.cudnn.benchmark=True on a convnet (cuDNN
  asks cacheInfo for its workspace);
- record_stream: a side stream writes a freed block after a long kernel while
  the host allocates again; with the hook the new tensor keeps its values, and
  a control run without the hook (torch's plain pluggable allocator over the
  same library) shows whether the bytes were handed out again;
- oom: an allocation larger than the device must raise torch.OutOfMemoryError,
  and the next allocation must work;
- compare: the same transformer loop under torch's own allocator and under the
  planned one: step time (median of the steady steps) and fragmentation
  (1 - peak allocated / peak reserved) side by side.
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
SCENARIOS = ("build", "pytest", "gpt2", "stats_loop", "cudnn_benchmark", "record_stream", "oom", "compare")
TIMEOUTS = {"build": 240, "pytest": 300, "gpt2": 180, "compare": 180}


def _torch():
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("gpu_check: torch sees no CUDA device")
    return torch


def _planned(policy=None):
    import tensor_arena as ta

    return ta.PlannedAllocator("cuda", **(policy or {})).install()


def _transformer(torch, width=512, layers=4):
    layer = torch.nn.TransformerEncoderLayer(width, 8, 4 * width, batch_first=True, dropout=0.0)
    return torch.nn.Sequential(torch.nn.TransformerEncoder(layer, layers), torch.nn.Linear(width, width)).cuda()


# ---- scenarios run in their own process -----------------------------------------


def scenario_stats_loop():
    torch = _torch()
    alloc = _planned()
    torch.manual_seed(0)
    model = _transformer(torch, 256, 2)
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(8, 64, 256, device="cuda")
    rows = []
    for step in range(12):
        with alloc.step():
            model(x).square().mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        summary = torch.cuda.memory_summary()
        lib = alloc._lib.json("device_stats_json")
        rows.append({
            "step": step,
            "max_memory_allocated": torch.cuda.max_memory_allocated(),
            "memory_allocated": torch.cuda.memory_allocated(),
            "memory_reserved": torch.cuda.memory_reserved(),
            "library_allocated_current": lib["allocated_bytes"]["all"]["current"],
            "library_allocated_peak": lib["allocated_bytes"]["all"]["peak"],
            "summary_has_table": "Allocated memory" in summary,
        })
        if step == 6:
            torch.cuda.reset_peak_memory_stats()
            rows[-1]["peak_after_reset"] = torch.cuda.max_memory_allocated()
    ok = all(
        r["summary_has_table"]
        and r["memory_allocated"] == r["library_allocated_current"]
        and r["max_memory_allocated"] == r["library_allocated_peak"]
        and r["max_memory_allocated"] >= r["memory_allocated"]
        for r in rows
    ) and rows[6]["peak_after_reset"] <= rows[6]["max_memory_allocated"]
    return {"ok": ok, "steps": rows, "summary_last": summary, "planned": alloc.summary()}


def scenario_cudnn_benchmark():
    torch = _torch()
    torch.backends.cudnn.benchmark = True
    alloc = _planned()
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10),
    ).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(32, 3, 64, 64, device="cuda")
    y = torch.randint(0, 10, (32,), device="cuda")
    losses = []
    for _ in range(8):
        with alloc.step():
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return {"ok": all(l == l for l in losses), "losses": losses, "planned": alloc.summary()}


def _record_stream_round(torch, n, hook):
    side = torch.cuda.Stream()
    main = torch.cuda.current_stream()
    buf = torch.zeros(n, device="cuda")
    side.wait_stream(main)
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # a long kernel: the write below runs well after the host moved on
        buf.fill_(1.0)
    if hook:
        buf.record_stream(side)
    addr = buf.data_ptr()
    del buf  # freed on the host while the side stream still has to write it
    fresh = torch.full((n,), 2.0, device="cuda")  # allocated again on the main stream
    reused = fresh.data_ptr() == addr
    torch.cuda.synchronize()
    corrupted = bool((fresh != 2.0).any().item())
    return reused, corrupted


def scenario_record_stream(hook=True):
    torch = _torch()
    if hook:
        alloc = _planned()
    else:
        # The control: torch's plain pluggable allocator over the same library, no hooks.
        import tensor_arena as ta

        alloc = ta.PlannedAllocator("cuda")
        pluggable = torch.cuda.memory.CUDAPluggableAllocator(alloc.library_path, "tensor_arena_alloc", "tensor_arena_free")
        torch.cuda.memory.change_current_allocator(pluggable)
    rounds = []
    for _ in range(6):  # warm-up, recording, then steps served by the plan
        with alloc.step():
            rounds.append(_record_stream_round(torch, 1 << 20, hook))
    return {
        "ok": (not any(c for _, c in rounds)) if hook else True,
        "hook": hook,
        "rounds": [{"reused": r, "corrupted": c} for r, c in rounds],
    }


def scenario_oom():
    torch = _torch()
    alloc = _planned()
    total = torch.cuda.get_device_properties(0).total_memory
    out = {"total_memory": total}
    try:
        torch.empty(2 * total, dtype=torch.uint8, device="cuda")
        out["raised"] = None
    except torch.OutOfMemoryError as e:
        out["raised"] = "torch.OutOfMemoryError"
        out["message"] = str(e).splitlines()[0]
    except Exception as e:  # noqa: BLE001 - reported, and the scenario fails
        out["raised"] = type(e).__name__
        out["message"] = str(e).splitlines()[0]
    after = torch.ones(1024, device="cuda")
    out["after"] = float(after.sum().item())
    out["num_ooms"] = torch.cuda.memory_stats().get("num_ooms")
    out["ok"] = out["raised"] == "torch.OutOfMemoryError" and out["after"] == 1024.0
    out["planned"] = alloc.summary()
    return out


def scenario_compare(which):
    torch = _torch()
    alloc = _planned() if which == "planned" else None
    torch.manual_seed(0)
    model = _transformer(torch)
    opt = torch.optim.AdamW(model.parameters())
    times = []
    for step in range(24):
        seq = 128 if step % 3 else 96  # two shapes, as a padded data loader gives
        x = torch.randn(16, seq, 512, device="cuda")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        if alloc is not None:
            alloc.begin_step()
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if alloc is not None:
            alloc.end_step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        del x
    steady = times[8:]
    out = {"allocator": which, "step_ms_median": 1000 * statistics.median(steady),
           "step_ms": [round(1000 * t, 3) for t in times]}
    if alloc is None:
        peak_alloc, peak_res = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
        out.update(peak_allocated=peak_alloc, peak_reserved=peak_res, fragmentation=1 - peak_alloc / peak_res)
    else:
        s = alloc.stats()
        out.update(peak_allocated=s["peak_live_bytes"], peak_reserved=s["peak_reserved_bytes"],
                   fragmentation=s["fragmentation"], served_share=s["served_share"],
                   caching_model_fragmentation=s["caching_model"]["fragmentation"], summary=alloc.summary(s))
    out["ok"] = True
    return out


def in_process(name):
    if name == "stats_loop":
        return scenario_stats_loop()
    if name == "cudnn_benchmark":
        return scenario_cudnn_benchmark()
    if name == "record_stream":
        return scenario_record_stream(hook=True)
    if name == "record_stream_control":
        return scenario_record_stream(hook=False)
    if name == "oom":
        return scenario_oom()
    if name in ("compare_torch", "compare_planned"):
        return scenario_compare(name.split("_")[1])
    raise SystemExit(f"unknown scenario {name}")


# ---- the driver ------------------------------------------------------------------


MAX_TIMEOUT = None  # --max-timeout


def _run(cmd, timeout, env=None):
    if MAX_TIMEOUT is not None:
        timeout = min(timeout, MAX_TIMEOUT)
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)
        rc, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = "timeout", e.stdout or "", e.stderr or ""
        out = out.decode() if isinstance(out, bytes) else out
        err = err.decode() if isinstance(err, bytes) else err
    return {"rc": rc, "seconds": round(time.perf_counter() - t0, 1), "stdout": out, "stderr_tail": err[-3000:]}


def _child(name, timeout):
    r = _run([sys.executable, str(HERE / "check.py"), "--child", name], timeout)
    lines = r.pop("stdout").strip().splitlines()
    try:
        r["result"] = json.loads(lines[-1])
        r["ok"] = r["rc"] == 0 and r["result"].get("ok") is True
    except (IndexError, ValueError):
        r["ok"] = False
    return r


def run_scenario(name, out_dir):
    r = _scenario(name, out_dir)
    if "stdout" in r:
        r["stdout_tail"] = r.pop("stdout")[-3000:]
    return r


def _scenario(name, out_dir):
    py = sys.executable
    if name == "build":
        r = _run([py, "-m", "tensor_arena.extensions", "build", "cuda"], TIMEOUTS["build"])
        r["ok"] = r["rc"] == 0
        return r
    if name == "pytest":
        r = _run([py, "-m", "pytest", "-q", "-rs", "python/tests", "-k", "cuda"], TIMEOUTS["pytest"])
        r["ok"] = r["rc"] == 0
        return r
    if name == "gpt2":
        path = out_dir / "gpt2.json"
        r = _run([py, "python/examples/planned_allocator.py", "--device", "cuda", "--steps", "30", "--quiet",
                  "--json", str(path)], TIMEOUTS["gpt2"])
        if path.is_file():
            j = json.loads(path.read_text())
            r["identical"] = j.get("identical")
            r["stats"] = {k: j["stats"][k] for k in ("served_share", "fragmentation", "slab_ratio", "replans")}
            r["stats"]["caching_model_fragmentation"] = j["stats"]["caching_model"]["fragmentation"]
        r["ok"] = r["rc"] == 0 and r.get("identical") is True
        return r
    if name == "record_stream":
        hooked = _child("record_stream", 120)
        hooked["control_without_hook"] = _child("record_stream_control", 120)
        return hooked
    if name == "compare":
        a, b = _child("compare_torch", TIMEOUTS["compare"] // 2), _child("compare_planned", TIMEOUTS["compare"] // 2)
        return {"ok": a["ok"] and b["ok"], "torch": a, "planned": b}
    return _child(name, 120)


def _markdown(results, total):
    lines = ["# GPU check of the planned allocator", "", f"total {total:.0f} s", "",
             "| scenario | ok | seconds | notes |", "|---|---|---|---|"]
    for name, r in results.items():
        if r is None:
            lines.append(f"| {name} | not run (time budget) | | |")
            continue
        note = ""
        if name == "gpt2":
            note = f"identical={r.get('identical')} stats={r.get('stats')}"
        elif name == "record_stream":
            ctl = r.get("control_without_hook", {}).get("result", {})
            note = f"hooked={r.get('result', {}).get('rounds')} control={ctl.get('rounds')}"
        elif name == "compare":
            t, p = r["torch"].get("result", {}), r["planned"].get("result", {})
            note = (f"torch: {t.get('step_ms_median', float('nan')):.2f} ms/step, fragmentation "
                    f"{100 * t.get('fragmentation', float('nan')):.2f}%; planned: "
                    f"{p.get('step_ms_median', float('nan')):.2f} ms/step, fragmentation "
                    f"{100 * p.get('fragmentation', float('nan')):.2f}%")
        elif name == "oom":
            note = str(r.get("result", {}).get("raised"))
        seconds = r.get("seconds", "")
        lines.append(f"| {name} | {'yes' if r.get('ok') else 'NO'} | {seconds} | {note} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", help="folder for summary.json and summary.md")
    ap.add_argument("--only", choices=SCENARIOS, action="append")
    ap.add_argument("--budget", type=float, default=450.0, help="seconds after which no scenario is started")
    ap.add_argument("--max-timeout", type=float, help="cap on each scenario's timeout, seconds")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    global MAX_TIMEOUT
    MAX_TIMEOUT = args.max_timeout
    if args.child:
        print(json.dumps(in_process(args.child)))
        return 0
    if not args.out:
        ap.error("OUT_DIR is required")
    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                           capture_output=True, text=True)
    if probe.stdout.strip() != "True":
        print(f"gpu_check: no CUDA device found (torch.cuda.is_available() -> {probe.stdout.strip() or probe.stderr.strip()})",
              file=sys.stderr)
        return 2
    start = time.perf_counter()
    names = args.only or SCENARIOS
    results = {name: None for name in names}

    def write():
        total = time.perf_counter() - start
        (out_dir / "summary.json").write_text(json.dumps({"total_seconds": total, "results": results}, indent=1))
        (out_dir / "summary.md").write_text(_markdown(results, total))

    for name in names:
        if time.perf_counter() - start > args.budget:
            continue
        results[name] = run_scenario(name, out_dir)
        print(f"{name}: {'ok' if results[name].get('ok') else 'FAILED'} "
              f"({time.perf_counter() - start:.0f} s)", flush=True)
        if not results[name].get("ok"):
            print(f"  {name} detail (tail): {json.dumps(results[name])[-2000:]}", flush=True)
        write()
    write()
    print((out_dir / "summary.md").read_text())
    return 0 if all(r is not None and r.get("ok") for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
