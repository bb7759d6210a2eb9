"""The generated loops (python/benches/generated_loops): specs from (seed, index) alone, the trace's
figures, and the runner on three loops of a few steps each, under torch's allocator and the planned one.

The 100-loop distribution is a benchmark (docs/generated_loops.md), not a test.
"""

import gzip
import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
GEN = REPO / "python" / "benches" / "generated_loops"
sys.path.insert(0, str(GEN))

import _spec  # noqa: E402
from _trace import analyse  # noqa: E402
from conftest import load_script  # noqa: E402


def test_a_spec_is_made_again_from_its_seed_and_index_alone():
    # In another interpreter with another hash seed: the same spec (the rng is seeded by a string).
    code = f"import json, sys; sys.path.insert(0, {str(GEN)!r}); import _spec; print(json.dumps(_spec.make_spec(1, 7)))"
    env = dict(os.environ, PYTHONHASHSEED="12345")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == _spec.make_spec(1, 7)
    assert _spec.make_spec(2, 7) != _spec.make_spec(1, 7)


def test_a_hundred_loops_are_distinct_and_cover_every_family_schedule_and_dynamic_size():
    specs = [_spec.make_spec(1, i) for i in range(100)]
    keys = {json.dumps({k: v for k, v in s.items() if k != "index"}, sort_keys=True) for s in specs}
    assert len(keys) == 100
    assert {s["family"] for s in specs} == set(_spec.FAMILIES)
    assert {s["shape"]["kind"] for s in specs} == set(_spec.SCHEDULES)
    assert {s["dynamic"] for s in specs} == set(_spec.DYNAMIC)
    assert {s["kept"] for s in specs} == set(_spec.KEPT)
    assert {layer["type"] for s in specs for layer in s["layers"]} == {"linear", "conv", "attention", "norm"}
    assert any(s["eval"] for s in specs) and any(s["accumulation"] > 1 for s in specs)
    assert all(20 <= s["steps"] <= 200 for s in specs)
    for s in specs:
        (b_lo, b_hi), (n_lo, n_hi) = s["shape"]["batch"], s["shape"]["length"]
        assert 1 <= b_lo <= b_hi and 1 <= n_lo <= n_hi, s
        if s["shape"]["kind"] in ("random", "growing"):
            assert n_lo < n_hi, f"loop {s['index']}: a changing schedule with one length"


def test_the_trace_figures_follow_the_segment_lines_and_the_new_live_peaks():
    lines = ["event,addr,size,stream\n",
             "step_begin,0,0,0\n", "segment_alloc,1,4096,0\n", "alloc,10,1000,0\n", "alloc,11,24,0\n",
             "free,11,24,0\n", "step_end,0,0,0\n",
             # A step that sets a new live peak (1024 + 2048 bytes) with 3x its live peak reserved.
             "step_begin,0,0,0\n", "segment_alloc,2,5120,0\n", "alloc,12,2048,0\n", "free,12,2048,0\n",
             "segment_free,2,5120,0\n", "step_end,0,0,0\n",
             "step_begin,0,0,0\n", "alloc,0,64,0\n", "alloc,13,512,0\n", "step_end,0,0,0\n"]
    f = analyse(lines)
    assert f["trace_steps"] == 3
    assert f["trace_peak_reserved_bytes"] == 4096 + 5120
    assert f["peak_reserved_step"] == 1
    assert f["trace_peak_live_bytes"] == 1024 + 2048  # each request rounded up to 512 bytes
    assert f["new_peak_steps"] == 2  # the third step's live peak (1536) sets none
    assert f["new_peak_step_worst"] == 1
    assert f["new_peak_step_ratio_max"] == pytest.approx(9216 / 3072)


def _runner():
    """The runner's module (``__main__.py``), imported by path."""
    return load_script(GEN / "__main__.py", "generated_loops_runner")


def test_the_distribution_is_split_by_the_size_of_the_live_lower_bound():
    runner = _runner()
    mib = 2**20
    assert runner.bound_class(None) is None and runner.bound_class(0) is None
    assert runner.bound_class(mib - 1) == "0-1 MiB"
    assert runner.bound_class(mib) == "1-2 MiB"  # a lower edge belongs to its class
    assert runner.bound_class(8 * mib - 1) == "2-8 MiB"
    assert runner.bound_class(8 * mib) == "8 MiB and over"
    rows = [
        {"lower_bound_bytes": 512 * 1024, "planned_over_lower_bound": 1.2, "served_share": 0.9,
         "new_peak_step_ratio_max": 1.3},
        {"lower_bound_bytes": 700 * 1024, "planned_over_lower_bound": 1.1, "served_share": 0.8,
         "new_peak_step_ratio_max": 1.1},
        {"lower_bound_bytes": 64 * mib, "planned_over_lower_bound": 1.01, "served_share": 1.0,
         "new_peak_step_ratio_max": 1.0},
        {"lower_bound_bytes": None, "planned_over_lower_bound": None},  # a failed run: in no class
    ]
    got = runner.by_bound(rows)
    assert list(got) == ["0-1 MiB", "8 MiB and over"]  # in class order, empty classes left out
    small = got["0-1 MiB"]
    assert small["loops"] == 2
    assert small["planned_over_lower_bound_median"] == pytest.approx(1.15)
    assert small["planned_over_lower_bound_p90"] == pytest.approx(1.19)  # linear between the two ranks
    assert small["served_share_median"] == pytest.approx(0.85)
    assert small["new_peak_step_ratio_max_p90"] == pytest.approx(1.28)
    assert got["8 MiB and over"]["loops"] == 1


def test_runner_runs_three_loops_both_ways_and_writes_the_summary(tmp_path):
    env = dict(os.environ)
    env.pop("TENSOR_ARENA_ALLOCATOR", None)
    out, traces = tmp_path / "out", tmp_path / "traces"
    # A convolution loop with `nonzero`, a mixed stack with a boolean mask and accumulation, an MLP
    # with padding masks and eval passes of another batch: a few steps each, past the first plan (the
    # masks change the shapes every step: two steps recorded, not the six of a changing loop's default).
    done = subprocess.run(
        [sys.executable, str(GEN), "--seed", "1", "--only", "1,3,12", "--steps", "8", "--out", str(out),
         "--keep-traces", "--traces", str(traces), "--jobs", "3",
         "--launcher-args", "--record-steps 2 --record-steps-changing 2"],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr
    record = json.loads((out / "summary.json").read_text())
    assert record["seed"] == 1 and record["steps"] == 8 and record["complete"] is True
    rows = record["loops"]
    assert [r["index"] for r in rows] == [1, 3, 12]
    for r in rows:
        assert r["status"] == "ok", (r["comparison"], r.get("planned_error"), r.get("torch_error"))
        assert r["identical"] is True and r["comparison"] == "bit-identical"
        assert r["spec"] == {**_spec.make_spec(1, r["index"]), "steps": 8}
        assert "--record-steps-changing 2" in r["planned_command"]
        assert r["plans"] >= 1, "no plan made: nothing served, nothing measured"
        # The planned run holds at least what was live at once, the live lower bound.
        assert r["lower_bound_bytes"] > 0
        assert r["planned_over_lower_bound"] >= 1.0
        assert r["planned_over_caching"] > 0 and r["planned_over_expandable"] > 0
        assert 0.0 <= r["served_share"] <= 1.0
        assert r["replans"] >= 0 and r["device_calls"] > 0
        assert r["trace_steps"] == 8
        assert r["trace_matches_stats"] is True  # the segment lines' peak is the stats' peak
        assert r["trace_peak_live_bytes"] == r["lower_bound_bytes"]
        lines = gzip.decompress((traces / f"{r['name']}.csv.gz").read_bytes()).decode().splitlines()
        assert lines[0] == "event,addr,size,stream"
        # Cut after the last step_end, or after the step boundary's segment
        # lines that follow it (flushed with the next step_begin).
        last = max(i for i, line in enumerate(lines) if line.startswith("step_end"))
        assert all(line.startswith("segment_") for line in lines[last + 1 :]), lines[last + 1 :]
    d = record["distribution"]
    assert d["loops"] == 3 and d["identical_share"] == 1.0 and d["status"] == {"ok": 3}
    for key in ("planned_over_lower_bound", "planned_over_caching", "planned_over_expandable"):
        x = d[key]
        assert x["n"] == 3 and x["min"] <= x["median"] <= x["p90"] <= x["max"]
        assert x["geomean"] is not None
    for key in ("served_share", "replans", "device_calls", "device_calls_max_steady_step",
                "planning_wait_seconds_max"):
        assert d[key]["n"] == 3, key
    assert sum(g["loops"] for g in d["by_bound"].values()) == 3
    md = (out / "summary.md").read_text()
    assert "| live lower bound | loops |" in md
    table = [line for line in md.splitlines() if line.startswith("| 1 |") or line.startswith("| loop |")]
    assert len(table) == 2 and table[0].count("|") == table[1].count("|"), "a column without its header"


def test_a_run_that_crashes_is_recorded_and_fails_the_process_unless_allowed(tmp_path):
    env = dict(os.environ)
    env.pop("TENSOR_ARENA_ALLOCATOR", None)
    # A configuration key the library refuses: the planned run exits with an error at start.
    cmd = [sys.executable, str(GEN), "--seed", "1", "--only", "4", "--steps", "2", "--out", str(tmp_path),
           "--launcher-args", "--policy '{\"no_such_key\": 1}'"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stderr
    (row,) = json.loads((tmp_path / "summary.json").read_text())["loops"]
    assert row["status"] == "crash" and row["torch_rc"] == 0 and row["planned_rc"] != 0
    assert "no_such_key" in row["planned_error"]
    assert row["identical"] is False
    again = subprocess.run([*cmd, "--allow-failures", "--resummarize"], env=env, capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 0, again.stderr
    d = json.loads((tmp_path / "summary.json").read_text())["distribution"]
    assert d["status"] == {"crash": 1} and d["identical_share"] == 0.0
    assert d["targets"]["bit_identical"]["met"] is False
