"""The allocator suite's runner on its cheapest loop: both runs, the comparison, the figures, the trace.

A few steps only (the suite itself is a benchmark: python/benches/allocator_suite).
"""

import gzip
import json
import os
import pathlib
import subprocess
import sys

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
    head, rule, line = (out / "suite.md").read_text().splitlines()[:3]
    assert line.startswith("| masked_shapes | identical |")
    assert head.count("|") == rule.count("|") == line.count("|"), "a column without its header"
    lines = gzip.decompress((traces / "masked_shapes.csv.gz").read_bytes()).decode().splitlines()
    assert lines[0] == "event,addr,size,stream"
    assert lines[-1].startswith("step_end")
    assert sum(1 for line in lines if line.startswith("step_end")) == 8
