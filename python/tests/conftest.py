import os
import pathlib
import shutil
import sys

import pytest
import torch

import tensor_arena as ta

REPO = pathlib.Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"


def load_script(path, name):
    """A bench's ``__main__.py`` at `path`, imported as module `name` (not run as a script)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def repo():
    return REPO


@pytest.fixture
def data():
    return DATA


@pytest.fixture
def binary():
    """The Rust `tensor-arena` binary: $TENSOR_ARENA_BIN, else target/release of the checkout.

    .ci/run sets TENSOR_ARENA_BIN after `cargo test --release` built it; then a missing
    binary fails the test instead of skipping it.
    """
    env = os.environ.get("TENSOR_ARENA_BIN")
    if env:
        assert pathlib.Path(env).is_file(), f"TENSOR_ARENA_BIN={env} does not exist"
        return env
    path = REPO / "target" / "release" / "tensor-arena"
    if not path.is_file():
        pytest.skip("no Rust binary: run `cargo build --release` or set TENSOR_ARENA_BIN")
    return str(path)


@pytest.fixture
def console_script():
    # Installed beside the interpreter (a virtual environment's bin/), or on PATH.
    beside = pathlib.Path(sys.executable).parent / "tensor-arena"
    path = str(beside) if beside.is_file() else shutil.which("tensor-arena")
    assert path is not None, "the tensor-arena console script is not on PATH"
    return path


def two_phase_planner():
    p = ta.Planner()
    fwd, bwd = p.phase("forward"), p.phase("backward")
    w = p.persistent("w", (64, 32), torch.float32)
    h = p.span("h", (128, 32), torch.float32, fwd, bwd)
    g = p.span("g", (128, 64), torch.float32, bwd)
    a = p.span("a", (128, 64), torch.float32, fwd)
    m = p.step("m", (128, 64), torch.uint8)
    return p, dict(fwd=fwd, bwd=bwd, w=w, h=h, g=g, a=a, m=m)


@pytest.fixture
def planned():
    p, b = two_phase_planner()
    return p.plan(), b
