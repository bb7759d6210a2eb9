"""The example trains (loss falls), allocates nothing in steady steps, and --naive computes the same numbers."""

import pathlib
import re
import subprocess
import sys

import pytest

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "mask_and_train.py"


def run(*args, steps=60):
    out = subprocess.run([sys.executable, str(EXAMPLE), "--steps", str(steps), "--log-every", "20", *args],
                         check=True, capture_output=True, text=True)
    return out.stdout


def losses(text):
    return [float(m) for m in re.findall(r"^step +\d+ +loss ([0-9.]+)", text, re.M)]


@pytest.fixture(scope="module")
def arena_run():
    return run()


def test_the_arena_loop_trains_without_allocating(arena_run):
    out = arena_run
    first, _, last = losses(out)
    assert last < first
    assert "allocations over the last 5 steps (torch.profiler, CPU allocator): 0" in out
    assert "every one a view inside the slab" in out
    assert "slab allocations: 1" in out


def test_naive_runs_the_same_numbers_with_allocations(arena_run):
    arena, naive = arena_run, run("--naive")
    assert losses(arena) == losses(naive)
    n = int(re.search(r"allocations over the last 5 steps \(torch.profiler, CPU allocator\): (\d+)", naive).group(1))
    assert n >= 5 * 16  # every temporary of every profiled step


def test_checked_mode_runs_clean():
    out = run("--checked", steps=10)
    assert losses(out) == losses(run(steps=10))
