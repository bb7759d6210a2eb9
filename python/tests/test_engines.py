"""Step boundaries where an engine wraps the optimizer (tensor_arena.engines).

Each test runs a small unmodified script under ``python -m tensor_arena.run``
in a subprocess and counts the steps the library saw. The engines are stand-ins
written here with the call shapes of the real ones (no DeepSpeed install): an
engine whose ``step()`` steps the torch optimizer once per parameter sub-group
and skips it on an overflow, and a package laid out as DeepSpeed's
(``deepspeed.runtime.engine.DeepSpeedEngine`` with
``is_gradient_accumulation_boundary``), which the launcher knows by name.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

ENGINE = """
import torch


class Engine:
    '''Steps the wrapped optimizer once per sub-group; an overflow skips the step.'''

    def __init__(self, model, optimizer, sub_groups, accumulation=1):
        self.model, self.optimizer, self.sub_groups = model, optimizer, sub_groups
        self.accumulation, self.micro_steps = accumulation, 0

    def is_gradient_accumulation_boundary(self):
        return (self.micro_steps + 1) % self.accumulation == 0

    def step(self, overflow=False):
        if self.is_gradient_accumulation_boundary() and not overflow:
            for _ in range(self.sub_groups):
                self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        self.micro_steps += 1
"""

TRAIN = """
import sys
import torch
from {module} import {cls} as Engine

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
engine = Engine(model, torch.optim.SGD(model.parameters(), lr=1e-3), sub_groups=3,
                accumulation=int(sys.argv[2]))
for i in range(int(sys.argv[1])):
    loss = model(torch.randn(16, 32)).pow(2).mean()
    loss.backward()
    engine.step(overflow=(i == 2))
"""


@pytest.fixture
def env(tmp_path_factory):
    e = dict(os.environ)
    e["OMP_NUM_THREADS"] = "1"
    e.setdefault("TENSOR_ARENA_CACHE", str(tmp_path_factory.mktemp("extension-cache")))
    e.pop("TENSOR_ARENA_ALLOCATOR", None)
    return e


def steps_seen(tmp_path, env, flags, module, cls, micro_steps, accumulation=1):
    (tmp_path / "train.py").write_text(textwrap.dedent(TRAIN.format(module=module, cls=cls)))
    stats = tmp_path / "stats.json"
    done = subprocess.run(
        [sys.executable, "-m", "tensor_arena.run", "--device", "cpu", "--stats", str(stats), *flags,
         str(tmp_path / "train.py"), str(micro_steps), str(accumulation)],
        env=dict(env, PYTHONPATH=str(tmp_path)), cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    # The step left open at exit counts too.
    return json.loads(stats.read_text())["steps"] - 1


def test_optimizer_hook_alone_miscounts_an_engine_step(env, tmp_path):
    (tmp_path / "engine.py").write_text(textwrap.dedent(ENGINE))
    # 3 sub-groups a step, one step skipped: the optimizer hook ends 3 * (6 - 1) steps.
    assert steps_seen(tmp_path, env, [], "engine", "Engine", 6) == 15


def test_step_at_ends_a_step_after_each_engine_step(env, tmp_path):
    (tmp_path / "engine.py").write_text(textwrap.dedent(ENGINE))
    # Every call ends a step, the skipped one too (it is a training step).
    assert steps_seen(tmp_path, env, ["--step-at", "engine:Engine.step"], "engine", "Engine", 6) == 6


def test_deepspeed_engine_is_known_by_name(env, tmp_path):
    pkg = tmp_path / "deepspeed" / "runtime"
    pkg.mkdir(parents=True)
    (tmp_path / "deepspeed" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "engine.py").write_text(textwrap.dedent(ENGINE).replace("class Engine", "class DeepSpeedEngine"))
    # 8 micro-batches, a step at every second (the accumulation boundary): 4 steps.
    assert steps_seen(tmp_path, env, [], "deepspeed.runtime.engine", "DeepSpeedEngine", 8, 2) == 4


def test_step_at_is_checked(env, tmp_path):
    (tmp_path / "train.py").write_text("")
    done = subprocess.run(
        [sys.executable, "-m", "tensor_arena.run", "--device", "cpu", "--step-at", "no_colon",
         str(tmp_path / "train.py")], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode != 0
    assert "MODULE:QUALNAME" in done.stderr
