"""``tensor_arena.replay(trace, planned=True)`` against live runs of the planned
allocator: the example GPT-2 loop trained with the allocator's ``trace`` option,
at a fixed and at a changing sequence length, then the trace alone replayed
through the allocator's policy by the doctor. The prediction must match the run:
served share within 0.5 percentage points, whole-run peak reserved within 2%
(the run's own figure: its trace's ``segment_alloc`` / ``segment_free`` lines),
the same number of re-plans.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

import tensor_arena as ta

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "python" / "examples" / "planned_allocator.py"
SMALL = ["--layers", "1", "--embd", "64", "--heads", "2", "--vocab", "512", "--batch", "2"]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    e = dict(os.environ)
    e["OMP_NUM_THREADS"] = "1"
    e.setdefault("TENSOR_ARENA_CACHE", str(tmp_path_factory.mktemp("extension-cache")))
    e.pop("TENSOR_ARENA_ALLOCATOR", None)
    return e


def live_run(env, tmp_path, *flags):
    """Runs the example under the planned allocator with its trace on; returns
    its final stats and the trace's path."""
    trace = tmp_path / "trace.csv"
    out = tmp_path / "run.json"
    policy = json.dumps({"trace": str(trace)})
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--role", "planned", "--quiet", "--threads", "1",
         "--json", str(out), "--policy", policy, *SMALL, *flags],
        env=env, capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    return json.loads(out.read_text())["stats"], trace


def segment_peak(path):
    """The run's whole-run peak reserved, from the trace file alone."""
    now = peak = 0
    with open(path) as f:
        next(f)
        for line in f:
            event, _, size, _ = line.strip().split(",")
            if event == "segment_alloc":
                now += int(size)
                peak = max(peak, now)
            elif event == "segment_free":
                now -= int(size)
    return peak


def check(stats, trace):
    d = ta.replay(trace, planned=True, platform="cuda", search=False)
    p = d["planned"]
    live_peak = segment_peak(trace)
    assert live_peak > 0
    assert abs(100 * p["served_share"] - 100 * stats["served_share"]) <= 0.5, (p, stats)
    assert abs(p["peak_reserved_bytes"] - live_peak) <= 0.02 * live_peak, (p, live_peak)
    assert p["replans"] == stats["replans"], (p, stats)
    assert p["steps"] == stats["steps"]
    # The run's own peak (restarted at its plan) lies inside the whole run.
    assert stats["peak_reserved_bytes"] <= p["peak_reserved_bytes"]
    assert p["recorded_peak_reserved_bytes"] == live_peak
    assert "planned allocator (predicted)" in ta.report(trace, planned=True, search=False)
    return p


def test_a_fixed_length_run_is_predicted_from_its_trace(env, tmp_path):
    stats, trace = live_run(env, tmp_path, "--steps", "12", "--seq-len", "32")
    p = check(stats, trace)
    assert p["served_share"] == 1.0 and p["replans"] == 0


def test_a_changing_length_run_is_predicted_from_its_trace(env, tmp_path):
    stats, trace = live_run(env, tmp_path, "--steps", "16", "--seq-range", "16", "64")
    check(stats, trace)


LOOP = """
import sys, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(int(sys.argv[1])):
    x = torch.randn(32, 64)
    loss = model(x).square().mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"{loss.item():.6f}")
"""


def test_the_launchers_trace_is_read_by_the_doctor(env, tmp_path):
    train = tmp_path / "train.py"
    train.write_text(LOOP)
    stats = tmp_path / "stats.json"
    e = dict(env, TENSOR_ARENA_ALLOCATOR="cpu")
    done = subprocess.run(
        [sys.executable, "-m", "tensor_arena.run", "--trace", str(tmp_path / "t-{rank}.csv"),
         "--stats", str(stats), str(train), "10"],
        env=e, cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr
    trace = tmp_path / "t-0.csv"
    s = json.loads(stats.read_text())
    p = ta.replay(trace, planned=True, platform="cuda", search=False)["planned"]
    # The launcher leaves its last step open (after the last optimizer.step()):
    # the file ends inside it, which the doctor reads as a step begun.
    assert p["steps"] == s["steps"]
    assert abs(p["served_share"] - s["served_share"]) <= 0.005
    assert p["replans"] == s["replans"]
    assert p["peak_reserved_bytes"] == segment_peak(trace)


SUITE = REPO / "python" / "benches" / "allocator_suite"


@pytest.mark.parametrize("loop,steps", [("masked_shapes", 20), ("gpt2_accum_eval", 12)])
def test_loops_of_the_allocator_suite_are_predicted_from_their_traces(env, tmp_path, loop, steps):
    """Two loops of the allocator suite (data-dependent shapes; gradient
    accumulation with an eval pass) under the launcher, then their traces
    alone through the doctor: the prediction is the run."""
    stats = tmp_path / "stats.json"
    trace = tmp_path / "trace.csv"
    e = dict(env, TENSOR_ARENA_ALLOCATOR="cpu")
    done = subprocess.run(
        [sys.executable, "-m", "tensor_arena.run", "--trace", str(trace), "--stats", str(stats),
         str(SUITE / f"{loop}.py"), "--steps", str(steps), "--out", str(tmp_path / "res.json")],
        env=e, cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr
    s = json.loads(stats.read_text())
    p = ta.replay(trace, planned=True, platform="cuda", search=False)["planned"]
    assert p["steps"] == s["steps"]
    assert abs(p["served_share"] - s["served_share"]) <= 0.005, (p, s)
    assert p["replans"] == s["replans"]
    # The whole-run peak: the run's own stats, its trace's segment lines and
    # the prediction agree.
    assert s["peak_reserved_bytes"] == segment_peak(trace)
    assert abs(p["peak_reserved_bytes"] - s["peak_reserved_bytes"]) <= 0.02 * s["peak_reserved_bytes"]
