"""The launcher's policy flags: parsing, `--policy`, `{rank}`, and the trace they turn on.

The parsing tests call the launcher's own parser (no torch run); the trace test
runs a small unmodified script under ``python -m tensor_arena.run`` in a
subprocess and reads the CSV the library wrote.
"""

import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

from tensor_arena import run as launcher

REPO = pathlib.Path(__file__).resolve().parents[2]
CONFIG_RS = REPO / "alloc" / "src" / "config.rs"
# Keys set by other options than a flag of their own: the device (--device), the
# trace (--trace), and the runtime libraries to load (--policy only).
# map_granularity: a replay's key (`tensor-arena replay --planned --map-granularity`);
# a live run maps in its backing's own unit.
NOT_FLAGS = {"backend", "device", "trace", "cuda_runtime_lib", "npu_runtime_lib", "map_granularity"}


def policy(argv):
    ap = launcher._parser()
    ours, rest = launcher._split(ap, [*argv, "train.py", "--lr", "3"])
    assert rest == ["--lr", "3"], "the script's own arguments were read as ours"
    return launcher._policy(ap.parse_args(ours))


def config_keys():
    """The field names of alloc/src/config.rs `Config`, in order."""
    text = CONFIG_RS.read_text()
    body = re.search(r"pub struct Config \{(.*?)\n\}", text, re.S)
    assert body, f"no `pub struct Config` in {CONFIG_RS}"
    return re.findall(r"^\s*pub (\w+):", body.group(1), re.M)


def test_every_configuration_key_has_a_flag():
    keys = config_keys()
    assert "warmup_steps" in keys and "trace" in keys
    flags = {k for k, _, _ in launcher._POLICY_FLAGS}
    missing = [k for k in keys if k not in flags and k not in NOT_FLAGS]
    assert not missing, f"Config keys without a launcher flag (add a row to _POLICY_FLAGS): {missing}"
    unknown = sorted(flags - set(keys))
    assert not unknown, f"launcher flags for keys Config does not have: {unknown}"


def test_flags_become_policy_keys():
    got = policy([
        "--warmup-steps", "2", "--record-steps", "3", "--record-steps-changing", "7",
        "--replan-miss-steps", "4", "--recent-steps", "5", "--no-exact-before-plan",
        "--checked", "--platform", "npu", "--no-log-errors",
    ])
    assert got == {
        "warmup_steps": 2, "record_steps": 3, "record_steps_changing": 7, "replan_miss_steps": 4,
        "recent_steps": 5, "exact_before_plan": False, "checked": True, "platform": "npu",
        "log_errors": False,
    }


def test_no_flags_no_keys():
    # Absent flags leave the library's defaults alone.
    assert policy([]) == {}


def test_policy_json_passes_any_key_and_flags_win():
    got = policy(["--policy", '{"record_steps": 9, "future_key": [1, 2]}', "--record-steps", "3"])
    assert got == {"record_steps": 3, "future_key": [1, 2]}
    assert policy(["--record-steps", "3", "--policy", '{"record_steps": 9}'])["record_steps"] == 3


@pytest.mark.parametrize("bad", ["{not json", "[1, 2]", "3"])
def test_policy_must_be_a_json_object(bad, capsys):
    with pytest.raises(SystemExit) as e:
        policy(["--policy", bad])
    assert e.value.code == 2
    assert "--policy" in capsys.readouterr().err


def test_trace_path_takes_the_rank(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    assert policy(["--trace", "t-{rank}.csv"]) == {"trace": "t-3.csv"}
    # The same for a trace given through --policy; --trace wins over it.
    assert policy(["--policy", '{"trace": "p-{rank}.csv"}'])["trace"] == "p-3.csv"
    assert policy(["--policy", '{"trace": "p.csv"}', "--trace", "t.csv"])["trace"] == "t.csv"
    monkeypatch.delenv("RANK")
    assert policy(["--trace", "t-{rank}.csv"])["trace"] == "t-0.csv"


def test_bad_int_is_refused(capsys):
    with pytest.raises(SystemExit):
        policy(["--record-steps", "two"])
    assert "--record-steps" in capsys.readouterr().err


TRAIN = """
import sys, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(16, 32)
for step in range(int(sys.argv[1])):
    opt.zero_grad(set_to_none=True)
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    print(loss.item().hex())
"""


@pytest.fixture
def env(tmp_path_factory):
    e = dict(os.environ)
    e["OMP_NUM_THREADS"] = "1"
    e.setdefault("TENSOR_ARENA_CACHE", str(tmp_path_factory.mktemp("extension-cache")))
    e.pop("TENSOR_ARENA_ALLOCATOR", None)
    return e


def launch(flags, env, tmp_path, steps):
    train = tmp_path / "train.py"
    train.write_text(textwrap.dedent(TRAIN))
    return subprocess.run(
        [sys.executable, "-m", "tensor_arena.run", "--device", "cpu", *flags, str(train), str(steps)],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )


def test_trace_flag_writes_the_events_with_step_markers(env, tmp_path):
    steps = 6
    done = launch(["--trace", str(tmp_path / "trace-{rank}.csv"), "--record-steps", "2",
                   "--no-exact-before-plan", "--stats", str(tmp_path / "stats.json")],
                  dict(env, RANK="1"), tmp_path, steps)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.split()) == steps
    lines = (tmp_path / "trace-1.csv").read_text().splitlines()
    assert lines[0] == "event,addr,size,stream"
    events = [line.split(",")[0] for line in lines[1:]]
    # A step ends after each optimizer.step(); the step left open at exit is not flushed
    # with a step_end (the library flushes at every step end).
    assert events.count("step_end") == steps
    assert events.count("step_begin") in (steps, steps + 1)
    first = events.index("step_begin")
    assert events[first:].index("step_end") > 0
    sizes = [int(line.split(",")[2]) for line in lines[1:] if line.startswith("alloc,")]
    assert sizes and all(s > 0 for s in sizes)
    # Allocations inside steps, each step's between its markers.
    between = events[first + 1 : first + events[first:].index("step_end")]
    assert "alloc" in between and "free" in between
    s = json.loads((tmp_path / "stats.json").read_text())
    assert s["steps"] == steps + 1


def test_policy_keys_reach_the_library(env, tmp_path):
    # The library refuses an unknown key and names it: --policy passes keys through as they are.
    done = launch(["--policy", '{"no_such_key": 1}'], env, tmp_path, 1)
    assert done.returncode != 0
    assert "no_such_key" in done.stderr
    done = launch(["--record-steps", "0"], env, tmp_path, 1)
    assert done.returncode != 0
    assert "record_steps must be at least 1" in done.stderr
