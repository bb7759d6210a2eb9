"""The allocator suite's runner on its cheapest loop: both runs, the comparison, the figures, the trace.

A few steps only (the suite itself is a benchmark: python/benches/allocator_suite).
"""

import gzip
import json
import os
import pathlib
import subprocess
import sys

from conftest import load_script

REPO = pathlib.Path(__file__).resolve().parents[2]
SUITE = REPO / "python" / "benches" / "allocator_suite"


def test_runner_compares_both_runs_and_keeps_the_trace(tmp_path):
    env = dict(os.environ)
    env.pop("TENSOR_ARENA_ALLOCATOR", None)
    out, traces = tmp_path / "out", tmp_path / "traces"
    done = subprocess.run(
        [sys.executable, str(SUITE), "--loops", "masked_shapes", "--steps", "8", "--out", str(out),
         "--keep-traces", "--traces", str(traces), "--launcher-args", "--record-steps 2"],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr
    record = json.loads((out / "suite.json").read_text())
    (row,) = record["loops"]
    assert row["loop"] == "masked_shapes"
    assert row["torch_rc"] == 0 and row["planned_rc"] == 0
    assert row["identical"] is True, row["comparison"]
    assert "--record-steps 2" in row["planned_command"]
    assert row["steps"] == 9  # 8 optimizer steps and the step left open at exit
    assert row["replayed"]["steps"] == 8
    # The replay made the run's own decisions: it ends with the run's per-plan peak.
    assert row["replay_matches_stats"] is True
    assert row["replayed"]["peak_reserved_bytes"] >= row["replayed"]["stats_peak_reserved_bytes"]
    # The planning wait: the stats' longest wait, against the planned run's median step.
    wait = row["planning_wait_seconds_max"]
    assert wait == row["stats"][0]["planning_wait_seconds_max"]
    assert row["planning_wait_over_median_step"] == wait / row["planned_median_step_s"]
    assert record["geomean"]["planning_wait_over_median_step_max"] == row["planning_wait_over_median_step"]
    head, rule, line = (out / "suite.md").read_text().splitlines()[:3]
    assert line.startswith("| masked_shapes | identical |")
    assert head.count("|") == rule.count("|") == line.count("|"), "a column without its header"
    lines = gzip.decompress((traces / "masked_shapes.csv.gz").read_bytes()).decode().splitlines()
    assert lines[0] == "event,addr,size,stream"
    assert lines[-1].startswith("step_end")
    assert sum(1 for line in lines if line.startswith("step_end")) == 8


def _runner():
    return load_script(SUITE / "__main__.py", "allocator_suite_main")


def test_table_carries_the_planning_wait_against_the_median_step():
    """The table's last column and the closing line, from the rows' JSON (no run needed)."""
    suite = _runner()
    row = {"loop": "toy", "identical": True, "comparison": "bit-identical", "ranks": 2,
           "whole_run_planned_over_caching": 0.9, "whole_run_planned_over_expandable": 0.9,
           "planned_peak_reserved_bytes": 1 << 20, "caching_peak_reserved_bytes": 2 << 20,
           "expandable_peak_reserved_bytes": 2 << 20, "planned_fragmentation": 0.1,
           "caching_fragmentation": 0.2, "expandable_fragmentation": 0.2, "served_share": 1.0,
           "replans": 0, "fallback_allocations_max_step": 0, "fallback_allocations_last_step": 0,
           "step_time_ratio": 1.0, "planned_over_caching": 0.5, "planned_over_expandable": 0.5,
           "planned_median_step_s": 0.020, "planning_wait_seconds_max": 0.0025,
           "planning_wait_over_median_step": 0.125, "windows": "whole run"}
    late = dict(row, loop="late", planning_wait_seconds_max=None, planning_wait_over_median_step=None)
    md, means = suite.table([row, dict(row, loop="quick", planning_wait_seconds_max=0.0005,
                                       planning_wait_over_median_step=0.025), late])
    head, rule, toy, quick, absent = md.splitlines()[:5]
    assert head.count("|") == rule.count("|") == toy.count("|") == absent.count("|")
    assert head.rstrip(" |").endswith("longest planning wait ms / median step ms (wait / step)")
    assert toy.endswith("| 2.50 / 20.0 (0.125) |"), toy
    assert quick.endswith("| 0.50 / 20.0 (0.025) |"), quick
    assert absent.endswith("| n/a / 20.0 (n/a) |"), absent
    assert means["planning_wait_over_median_step_max"] == 0.125
    assert "at most 0.125, within 10% on 1 of 2 loops" in md
