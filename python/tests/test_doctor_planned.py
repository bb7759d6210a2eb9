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
