"""The planned allocator beside threads and forks, and in scripts without an optimizer (issue 42).

Every scenario runs through the launcher (``python -m tensor_arena.run``) in a
fresh subprocess with a bounded timeout: a hang fails the test instead of
blocking the suite.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    e = dict(os.environ)
    e["OMP_NUM_THREADS"] = "1"
    e.setdefault("TENSOR_ARENA_CACHE", str(tmp_path_factory.mktemp("extension-cache")))
    e["TENSOR_ARENA_ALLOCATOR"] = "cpu"
    return e


def launch(code, env, tmp_path, *flags, timeout=300, plain=False):
    """Runs ``code`` under the launcher (or plainly); its stdout and the stats JSON."""
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(code))
    stats = tmp_path / "stats.json"
    if plain:
        args = [sys.executable, str(path)]
    else:
        args = [sys.executable, "-m", "tensor_arena.run", "--stats", str(stats), *flags, str(path)]
    done = subprocess.run(args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout, (None if plain else json.loads(stats.read_text()))


DATALOADER_BESIDE_A_THREAD = """
import threading, torch
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(0)

class Data(Dataset):
    def __len__(self):
        return 64
    def __getitem__(self, i):
        return torch.full((32,), float(i) / 64)

@torch.jit.script
def churn(x: torch.Tensor, n: int) -> torch.Tensor:
    for _ in range(n):
        x = (x * 1.0001 + 1.0).relu()
    return x

stop = threading.Event()
def background():
    # A TorchScript loop releases the GIL: this thread is inside the
    # allocator whenever a worker is forked.
    x = torch.ones(256)   # (no draw from the global generator: the losses stay reproducible)
    while not stop.is_set():
        x = churn(x, 200)

t = threading.Thread(target=background, daemon=True)
t.start()
model = torch.nn.Linear(32, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(EPOCHS):
    loader = DataLoader(Data(), batch_size=8, num_workers=2, multiprocessing_context="fork", timeout=60)
    for batch in loader:
        loss = model(batch).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    print(f"epoch {epoch} {loss.item():.6f}")
stop.set()
t.join()
"""


def test_dataloader_workers_forked_every_epoch_beside_an_allocating_thread(env, tmp_path):
    code = DATALOADER_BESIDE_A_THREAD.replace("EPOCHS", "8")
    plain, _ = launch(code, env, tmp_path, plain=True, timeout=300)
    out, s = launch(code, env, tmp_path, timeout=300)
    assert out.split("\n")[:8] == plain.split("\n")[:8], "losses differ from torch's own allocator"
    assert len(out.strip().splitlines()) == 8, out
    assert s["errors"] == {k: 0 for k in s["errors"]}, s["errors"]
    assert s["fork"]["child"] is False
    assert s["threads"]["other_thread_requests"] > 0


FORKED_INSIDE_A_STEP = """
import os, torch
model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(8)])
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(32, 64)
for step in range(6):
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    # Forked inside the step the launcher opened after opt.step(), maybe
    # while the plan is being made on the planner's thread.
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            y = model(x).pow(2).mean()
            y.backward()
            opt.step()  # ends the child's step through the launcher's hook
            opt.zero_grad(set_to_none=True)
            import tensor_arena.allocator as ta
            s = ta._INSTANCE.stats()
            code = 0 if s["fork"]["child"] and s["errors"]["step_order"] == 0 else 3
        except BaseException as e:
            print("child failed:", repr(e), flush=True)
            code = 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    print(f"step {step} {loss.item():.6f}")
"""


def test_a_child_forked_inside_a_step_ends_its_step(env, tmp_path):
    out, s = launch(FORKED_INSIDE_A_STEP, env, tmp_path, "--background-plan-requests", "1", timeout=300)
    assert len(out.strip().splitlines()) == 6, out
    assert s["errors"] == {k: 0 for k in s["errors"]}, s["errors"]
    assert s["phase"] == "serving"


BACKGROUND_THREAD = """
import threading, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(64, 128)
stop = threading.Event()
def background():
    # Plain Python torch ops on another thread: allocations beside training.
    while not stop.is_set():
        a = torch.randn(32, 32)
        b = (a @ a).sum()
        del a, b
t = threading.Thread(target=background, daemon=True)
t.start()
for step in range(STEPS):
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"{loss.item():.8f}")
stop.set()
t.join()
"""


def test_a_background_allocating_thread_leaves_the_plan_alone(env, tmp_path):
    code = BACKGROUND_THREAD.replace("STEPS", "30")
    alone = code.replace("t.start()", "pass").replace("t.join()", "pass")
    plain, _ = launch(alone, env, tmp_path, plain=True)
    _, base = launch(alone, env, tmp_path, "--checked")
    out, s = launch(code, env, tmp_path, "--checked")
    assert out == plain, "losses differ from torch's own allocator"
    assert s["threads"]["other_thread_requests"] > 0
    assert s["served_share"] >= 0.99, s
    assert s["replans"] == base["replans"], (s["replans"], base["replans"])
    assert s["errors"] == {k: 0 for k in s["errors"]}, s["errors"]
    # The thread's blocks cost the plan nothing beyond themselves: while the
    # plan serves, peak reserved over peak live as without the thread (the
    # 1.10x target of issue 42 is the loop's own: see docs/allocator.md,
    # "Threads").
    plan, plan_alone = s["current_plan"], base["current_plan"]
    ratio = plan["peak_reserved_bytes"] / plan["peak_live_bytes"]
    ratio_alone = plan_alone["peak_reserved_bytes"] / plan_alone["peak_live_bytes"]
    assert ratio <= ratio_alone * 1.02, (ratio, ratio_alone)
    # The whole run's peak is the warm-up step's, before any plan (since the
    # take-over no longer holds anything twice): there the thread's blocks,
    # made at moments its scheduling picks, can take one more of the range's
    # warm-up chunks (an eighth of what is mapped, at least 128 KiB: docs/
    # allocator.md, "One mapped range"), never more. Measured 1.05x to 1.12x
    # against 1.03x alone (2026-12-06); one CI run took 1,544,192 bytes
    # against 1,396,736 alone, 147,456 more: over 128 KiB, within an eighth.
    chunk = max(128 << 10, base["peak_reserved_bytes"] // 8)
    assert s["peak_reserved_bytes"] <= base["peak_reserved_bytes"] + chunk + 4096, (
        s["peak_reserved_bytes"], base["peak_reserved_bytes"], chunk)


MANY_REQUESTS_NO_STEP_END = """
import os, torch
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
x = torch.randn(64)
for i in range(20_000):           # the books' and torch's own warm-up
    y = x + 1
import tensor_arena.allocator as ta
start = rss()
for i in range(N):
    y = x + 1                      # one request, freed at the next
print(json.dumps({"grown": rss() - start, "books": ta._INSTANCE.stats()["book_bytes"]}))
""".replace("import os, torch", "import json, os, torch")


def test_a_million_requests_without_a_step_end_keep_the_books_bounded(env, tmp_path):
    out, s = launch(MANY_REQUESTS_NO_STEP_END.replace("N)", "1_000_000)"), env, tmp_path, timeout=600)
    figures = json.loads(out.strip().splitlines()[-1])
    assert s["steps_cut"] == 1, s
    assert figures["books"] <= 1 << 20, figures
    assert s["book_bytes"] <= 1 << 20, s


BY_HAND = """
import torch
torch.manual_seed(0)
model = torch.nn.LSTM(32, 64, num_layers=2)
head = torch.nn.Linear(64, 32)
params = list(model.parameters()) + list(head.parameters())
lr = 0.1
hidden = None
for i in range(STEPS):
    x = torch.randn(20, 8, 32)
    if hidden is not None:
        hidden = tuple(h.detach() for h in hidden)     # truncated backpropagation
    out, hidden = model(x, hidden)
    loss = head(out).pow(2).mean()
    for p in params:
        p.grad = None
    loss.backward()
    with torch.no_grad():
        for p in params:
            p.data.add_(p.grad, alpha=-lr)
    print(f"{loss.item():.8f}")
"""


def test_a_script_that_updates_its_parameters_by_hand_is_planned(env, tmp_path):
    code = BY_HAND.replace("STEPS", "40")
    plain, _ = launch(code, env, tmp_path, plain=True)
    out, s = launch(code, env, tmp_path)
    assert out == plain, "losses differ from torch's own allocator"
    assert s["phase"] == "serving", s
    assert s["served_share"] >= 0.99, s
    assert s["steps"] >= 38, "a step per backward"


RESET_WITH_LIVE = """
import torch, tensor_arena as ta
alloc = ta.PlannedAllocator("cpu", mapped_range=MAPPED).install()
x = torch.ones(1 << 20)
try:
    alloc.reset()
    print("reset went through")
except ta.AllocatorError as e:
    print("refused:", e)
print(float(x.sum()))          # the live tensor's bytes are intact
del x
print("reset", alloc.reset())
"""


def test_reset_with_live_blocks_refuses_and_frees_nothing(env, tmp_path):
    for mapped in ("True", "False"):
        out, _ = launch(RESET_WITH_LIVE.replace("MAPPED", mapped), env, tmp_path, plain=True)
        lines = out.strip().splitlines()
        assert lines[0].startswith("refused: ") and "still live" in lines[0], out
        assert lines[1] == str(float(1 << 20)), out
        assert lines[2] == "reset 0", out
