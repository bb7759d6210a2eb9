"""The GPU suite's CPU form (python/gpu_check/suite.py --device cpu --tiny): it cannot rot.

What is asserted (issue 40, item 5):

- the whole suite runs on the CPU: every loop under the three allocators
  (caching, expandable_segments, planned via ``python -m tensor_arena.run
  --device cpu``), each run exiting 0;
- the table: suite.json has every loop, every run's figures and the planned
  run's keys (served share, re-plans, steady-step device calls, the cost
  model's estimate from its trace); suite.md has a row per loop with as many
  cells as the header;
- the losses (and GPT-2's eval losses) are bit-identical across the three runs
  of every loop;
- the contract's CPU checks pass (out of memory raises torch.OutOfMemoryError
  and the next allocation works; the snapshot holds a live tensor) and the
  CUDA-only ones say n/a; the capacity says n/a;
- ``--device cuda`` without CUDA exits 2 with a message, before running anything;
- the capacity bisection and the loss comparison, as functions;
- the GPU side of the report (device columns, the capacity search, the targets) on fabricated runs,
  and the loops' device-memory reading on a stand-in ``torch.cuda`` and ``pynvml``.

Timing: the suite starts 18 loop processes, 6 trace replays and the contract
(torch and transformers imported in each); ``--jobs 2`` runs a loop's three
runs two at a time.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python" / "gpu_check"))

import suite  # noqa: E402

pytest.importorskip("transformers")


def _env():
    env = dict(os.environ)
    env.pop("TENSOR_ARENA_ALLOCATOR", None)
    return env


def test_cpu_tiny_suite_fills_the_table_with_bit_identical_losses(tmp_path):
    out = tmp_path / "suite"
    done = subprocess.run(
        [sys.executable, str(REPO / "python" / "gpu_check" / "suite.py"), str(out), "--device", "cpu", "--tiny",
         "--jobs", "2", "--budget", "600"],
        env=_env(), capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((out / "suite.json").read_text())
    assert record["skipped"] == []
    assert set(record["loops"]) == set(suite.LOOPS)
    for name, row in record["loops"].items():
        for allocator in suite.ALLOCATORS:
            run = row["runs"][allocator]
            assert run["rc"] == 0, (name, allocator, run.get("error"))
            f = run["figures"]
            assert f["steps_done"] == 12 and f["oom"] is None
            assert f["median_step_s"] > 0
            assert f["device_bytes"] is None and f["device_source"] == "n/a (CPU)"
        assert row["identical"] is True, (name, row["comparison"])
        p = row["runs"]["planned"]["figures"]
        for key in ("served_share", "replans", "backing_calls_max_steady_step", "steady_steps_with_backing_calls",
                    "serving_steps", "serving_steps_with_calls"):
            assert isinstance(p[key], (int, float)), (name, key, p[key])
        assert p["serving_steps"] > 0, name  # 12 steps reach the plan, even recording 6 changing steps
        est = row["cost_estimate"]
        assert "error" not in est, est
        assert "not a measurement" in est["estimate"]
        assert est["by_kind"]["warmup"]["steps"] == 1
    gpt2 = record["loops"]["gpt2_eval"]["runs"]["caching"]
    assert gpt2["figures"]["model"].startswith("GPT-2 tiny")
    checks = record["contract"]["result"]["checks"]
    assert checks["oom"]["ok"] is True, checks["oom"]
    assert checks["snapshot"]["ok"] is True, checks["snapshot"]
    for name in ("memory_summary", "memory_fraction", "graph_capture", "record_stream"):
        assert checks[name]["ok"] is None, (name, checks[name])
    assert record["capacity"]["na"].startswith("n/a on the CPU")
    md = (out / "suite.md").read_text().splitlines()
    head = next(i for i, line in enumerate(md) if line.startswith("| loop |"))
    cells = md[head].count("|")
    rows = md[head + 2: head + 2 + len(suite.LOOPS)]
    assert [r.split("|")[1].strip() for r in rows] == list(suite.LOOPS)
    assert all(r.count("|") == cells for r in rows), "a row without as many cells as the header"
    assert all("| identical |" in r for r in rows)
    assert any(line.startswith("| losses bit-identical | met") for line in md)


def test_cuda_asked_without_cuda_exits_2(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here")
    done = subprocess.run(
        [sys.executable, str(REPO / "python" / "gpu_check" / "suite.py"), str(tmp_path / "o"), "--device", "cuda"],
        env=_env(), capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 2
    assert "no CUDA device" in done.stderr
    assert not (tmp_path / "o" / "suite.json").exists()


def test_bisection_finds_the_smallest_fraction_that_trains():
    calls = []

    def trains(f):
        calls.append(f)
        return f >= 0.3

    passed, failed, log = suite.bisect_fraction(trains, 0.1, 0.5, 4)
    assert len(calls) == 4 and [f for f, _ in log] == calls
    assert failed < 0.3 <= passed <= 0.3 + 0.4 / 16
    # No answer (no budget left): the search stops there.
    passed, failed, log = suite.bisect_fraction(lambda f: None, 0.1, 0.5, 4)
    assert passed is None and failed == 0.1 and len(log) == 1
    # Nothing trains: no fraction is claimed.
    passed, failed, _ = suite.bisect_fraction(lambda f: False, 0.1, 0.5, 3)
    assert passed is None and failed > 0.4


def test_losses_compared_bit_for_bit():
    same = {"losses": [(1.5).hex(), (1.25).hex()], "eval_losses": [(2.0).hex()]}
    assert suite.compare_losses({a: dict(same) for a in suite.ALLOCATORS})[0] is True
    off = dict(same, losses=[(1.5).hex(), (1.25 + 2**-40).hex()])
    ok, why = suite.compare_losses({"caching": same, "expandable": same, "planned": off})
    assert ok is False and "planned: losses differ" in why and "step 1" in why
    ok, why = suite.compare_losses({"caching": same, "expandable": dict(same, eval_losses=[]), "planned": same})
    assert ok is False and "eval_losses" in why
    ok, why = suite.compare_losses({"caching": same, "expandable": None, "planned": same})
    assert ok is None and "expandable" in why


def test_device_report_from_fabricated_runs(tmp_path, monkeypatch):
    """The GPU side of the report (device columns, capacity search, targets) on made-up runs: no GPU here,
    so each run's result is fabricated (the caching allocator needs 10% of an 80 GiB device, expandable
    segments 9%, the planned allocator 7%), the rest is the suite's own code."""
    gib = 2**30
    need = {"caching": 0.10, "expandable": 0.09, "planned": 0.07}
    peak = {"caching": 8 * gib, "expandable": 7 * gib, "planned": 6 * gib}
    tries = []

    def fake(self, loop, allocator, run_dir, fraction=None, steps=None):
        tries.append((loop, allocator, fraction))
        oom = None if fraction is None or fraction >= need[allocator] else {"step": 3, "message": "CUDA out of memory"}
        n = 30 if oom is None else 3
        result = {"torch": "fake", "gpu": "fabricated", "steps_done": n, "oom": oom, "losses": ["0x1.0p+0"] * n,
                  "eval_losses": [], "max_memory_reserved": peak[allocator], "max_memory_allocated": 5 * gib,
                  "median_step_s": 0.101 if allocator == "planned" else 0.1, "planned": allocator == "planned",
                  "device_memory": {"source": "fabricated", "peak_over_baseline_bytes": peak[allocator],
                                    "total_bytes": 80 * gib}}
        if allocator == "planned":
            result["planned_stats"] = {"served_share": 0.99, "replans": 1, "backing_calls_max_steady_step": 0,
                                       "steady_steps_with_backing_calls": 0}
        return {"rc": 0, "wall_s": 1.0, "command": "fabricated", "figures": suite.figures(result, None)}, result

    monkeypatch.setattr(suite.Suite, "run_loop_once", fake)
    args = suite.parse([str(tmp_path / "o"), "--device", "cuda", "--only", "article,capacity", "--budget", "300"])
    record = suite.Suite(args).run()
    row = record["loops"]["article"]
    assert row["identical"] is True
    assert row["planned_over_caching_device"] == 0.75 and row["planned_over_expandable_device"] == 6 / 7
    cap = record["capacity"]
    # The bracket comes from the runs: 0.95 x the live peak .. 1.1 x the largest device peak.
    assert cap["lo"] == pytest.approx(0.95 * 5 / 80) and cap["hi"] == pytest.approx(1.1 * 8 / 80)
    width = (cap["hi"] - cap["lo"]) / 2**3
    for a in suite.ALLOCATORS:
        c = cap["allocators"][a]
        assert len(c["log"]) == 3 and c["needs_tested"]
        assert c["failed"] < need[a] <= c["passed"] <= need[a] + width
    assert cap["planned_over_caching"] == pytest.approx(0.7, abs=0.1)
    assert sum(1 for loop, _, f in tries if f is not None) == 9
    md = (tmp_path / "o" / "suite.md").read_text()
    assert "| article | ok / ok / ok | identical | 8,192 / 7,168 / 6,144 |" in md
    assert "| geomean planned / caching device memory <= 0.85 | met: 0.750 |" in md
    assert "| planned device memory <= caching and <= expandable, every loop | met |" in md
    assert f"| capacity: planned fraction <= 0.75x caching's | met: {cap['planned_over_caching']:.3f} |" in md
    assert "| median step time <= 1.02x caching, every loop | met |" in md
    assert "| planned | " in md and "trained" in md and "OOM" in md


def test_device_memory_reads_the_driver_against_the_baseline(monkeypatch):
    """The loops' device-memory figure on a stand-in torch.cuda (no GPU here): without pynvml it is
    mem_get_info's used bytes over the baseline read before the first allocation, its peak sampled."""
    import types

    import suite_loops

    used = {"bytes": 3 << 30}  # the context and whatever else the device held before the run
    cuda = types.SimpleNamespace(
        init=lambda: None,
        get_device_properties=lambda i: types.SimpleNamespace(total_memory=80 << 30, uuid=""),
        mem_get_info=lambda: ((80 << 30) - used["bytes"], 80 << 30),
    )
    fake = types.SimpleNamespace(cuda=cuda)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # "not installed": import raises ImportError
    mem = suite_loops.DeviceMemory(fake, "cuda")
    assert mem.source.startswith("mem_get_info") and mem.baseline == 3 << 30
    used["bytes"] += 7 << 30
    mem.sample()
    used["bytes"] -= 5 << 30  # freed again: the peak stays
    mem.sample()
    f = mem.figures()
    assert f["peak_over_baseline_bytes"] == 7 << 30 and f["total_bytes"] == 80 << 30
    assert "pynvml" in f["nvml_error"]  # why NVML was not used
    assert suite_loops.DeviceMemory(fake, "cpu").figures() == {"source": "n/a (CPU)"}


def test_device_memory_prefers_nvml_for_this_process(monkeypatch):
    import types

    import suite_loops

    mine = {"bytes": 1 << 30}
    nvml = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda i: "h0",
        nvmlDeviceGetHandleByUUID=lambda u: "h-uuid",
        nvmlDeviceGetComputeRunningProcesses=lambda h: [
            types.SimpleNamespace(pid=os.getpid() + 1, usedGpuMemory=50 << 30),  # another process: not ours
            types.SimpleNamespace(pid=os.getpid(), usedGpuMemory=mine["bytes"])],
    )
    cuda = types.SimpleNamespace(
        init=lambda: None,
        get_device_properties=lambda i: types.SimpleNamespace(total_memory=80 << 30, uuid=""),
        mem_get_info=lambda: (1, 80 << 30),
    )
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    mem = suite_loops.DeviceMemory(types.SimpleNamespace(cuda=cuda), "cuda")
    assert mem.source.startswith("NVML") and mem.baseline == 1 << 30
    mine["bytes"] = 4 << 30
    nvml.nvmlDeviceGetComputeRunningProcesses = lambda h: [types.SimpleNamespace(pid=os.getpid(),
                                                                                 usedGpuMemory=4 << 30)]
    mem.sample()
    assert mem.figures()["peak_over_baseline_bytes"] == 3 << 30
