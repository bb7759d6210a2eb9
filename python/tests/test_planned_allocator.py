"""The planned allocator (tensor_arena.allocator) with real torch and transformers.

torch's allocator slot and the allocator library are global to a process, so
every scenario runs in a fresh Python subprocess (the example script, the
launcher, or a short script) and the test reads what it printed or wrote.
"""

import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest
import torch

import tensor_arena as ta

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "python" / "examples" / "planned_allocator.py"
SUMMARY = re.compile(
    r"^served from the plan: (?P<p>[0-9.]+)% of (?P<n>\d+) requests after warm-up; "
    r"fallback allocations per step: (?P<f>\d+); slab (?P<s>[0-9.]+) MiB = (?P<r>[0-9.]+) x lower bound$"
)
FRAGMENTATION = re.compile(
    r"^fragmentation over the whole run: (?P<planned>[0-9.]+)% planned .* vs (?P<caching>[0-9.]+)% "
    r"for the caching allocator model of the same run .*$"
)
WHOLE_RUN = re.compile(
    r"^whole run: peak reserved (?P<p>[0-9.]+) MiB planned vs (?P<c>[0-9.]+) MiB caching allocator "
    r"model \((?P<e>[0-9.]+) MiB with expandable segments\), lower bound (?P<lb>[0-9.]+) MiB$"
)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """The subprocesses' environment: one intra-op thread, an extension cache of the test run."""
    e = dict(os.environ)
    e["OMP_NUM_THREADS"] = "1"
    e.setdefault("TENSOR_ARENA_CACHE", str(tmp_path_factory.mktemp("extension-cache")))
    e.pop("TENSOR_ARENA_ALLOCATOR", None)
    return e


def run(args, env, cwd=None, timeout=600):
    done = subprocess.run(
        [sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{args} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def script(code, env, tmp_path, name="script.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(code))
    return run([str(path)], env, cwd=tmp_path)


def example(env, tmp_path, *flags):
    out = tmp_path / "run.json"
    done = run([str(EXAMPLE), "--quiet", "--threads", "1", "--json", str(out), *flags], env)
    return done.stdout.strip().splitlines(), json.loads(out.read_text())


def serving(per_step):
    """The steps served by a plan (stats are read after a step: its phase names the next one)."""
    return [s for prev, s in zip(per_step, per_step[1:]) if prev["phase"] == "serving"]


def deltas(per_step, key):
    prev, out = 0, []
    for s in per_step:
        out.append(s[key] - prev)
        prev = s[key]
    return out


def test_fixed_length_gpt2_is_served_from_the_plan_with_identical_losses(env, tmp_path):
    lines, r = example(env, tmp_path, "--steps", "32", "--seq-len", "64")
    assert r["identical"] is True, "losses or final parameters differ from torch's own allocator"
    assert r["planned"]["losses"] == r["baseline"]["losses"]
    assert len(r["planned"]["losses"]) == 32
    per_step = r["per_step"]
    for s, served, asked in zip(
        per_step, deltas(per_step, "served_from_plan"), deltas(per_step, "requests_after_warmup")
    ):
        s["served_now"], s["asked_now"] = served, asked
    steady = serving(per_step)
    # The policy's warm-up (1 step) and recording (2 steps) leave the rest to the plan.
    assert len(steady) >= 32 - 4, [s["phase"] for s in per_step]
    for s in steady:
        assert s["asked_now"] > 0
        assert s["served_now"] == s["asked_now"], s
        assert s["fallback_allocations_last_step"] == 0, s
    # The slab's region is reserved in the first step the plan serves, its
    # pages mapped as blocks land while the gradients the recorded step
    # carried into it live (a call a block, 8 blocks at most), the rest in
    # a call a run once they are freed (alloc/src/allocator/takeover.rs);
    # no step after it reserves anything.
    assert 1 <= steady[0]["backing_reservations_last_step"] <= 10, steady[0]
    for s in steady[1:]:
        assert s["backing_reservations_last_step"] == 0, s
    assert steady[-1]["backing_reservations"] == steady[0]["backing_reservations"]
    st = r["stats"]
    assert st["served_share"] == 1.0
    assert st["requests_after_warmup"] == sum(s["asked_now"] for s in steady)
    assert sum(st["misses"].values()) - st["misses"]["outside_step"] == 0, st["misses"]
    assert st["replans"] == 0
    assert st["lower_bound"] > 0 and st["slab_bytes"] >= st["lower_bound"]
    assert st["slab_ratio"] <= 1.01, st
    assert st["errors"] == {k: 0 for k in st["errors"]}
    # The run ends with the summary's lines, with the measured values.
    m = SUMMARY.match(lines[-3])
    assert m, lines[-3]
    assert m["p"] == "100.00" and int(m["n"]) == st["requests_after_warmup"] and m["f"] == "0"
    assert abs(float(m["r"]) - st["slab_ratio"]) < 1e-4
    f = FRAGMENTATION.match(lines[-2])
    assert f, lines[-2]
    assert abs(float(f["planned"]) - 100 * st["fragmentation"]) < 0.006
    assert abs(float(f["caching"]) - 100 * st["caching_model"]["fragmentation"]) < 0.006
    w = WHOLE_RUN.match(lines[-1])
    assert w, lines[-1]
    mib = 1 << 20
    assert abs(float(w["p"]) - st["peak_reserved_bytes"] / mib) < 0.006
    assert abs(float(w["c"]) - st["caching_model"]["peak_reserved_bytes"] / mib) < 0.006
    assert abs(float(w["e"]) - st["expandable_model"]["peak_reserved_bytes"] / mib) < 0.006
    # The live lower bound: the stats' own, below every peak.
    assert abs(float(w["lb"]) - st["lower_bound_bytes"] / mib) < 0.006
    assert st["peak_live_bytes"] <= st["lower_bound_bytes"] <= st["peak_reserved_bytes"]
    assert st["peak_reserved_bytes"] >= st["reserved_bytes"]
    assert "bit-identical" in lines[-4]


def test_random_lengths_then_a_longer_step_replans_once_and_hits_again(env, tmp_path):
    import random

    rng = random.Random(7)
    ranged = [rng.randint(32, 64) for _ in range(30)]
    longer = [96] * 6
    lines, r = example(env, tmp_path, "--lengths", ",".join(map(str, ranged + longer)))
    assert r["identical"] is True, "losses or final parameters differ from torch's own allocator"
    per_step = r["per_step"]
    asked = deltas(per_step, "requests_after_warmup")
    served = deltas(per_step, "served_from_plan")
    misses = [sum(s["misses"].values()) - s["misses"]["outside_step"] for s in per_step]
    miss_now = [b - a for a, b in zip([0] + misses, misses)]
    n = len(ranged)
    in_range = [i for i in range(1, n) if per_step[i - 1]["phase"] == "serving"]
    # When the sizes differ between steps the library records more of them (the policy's
    # choice, docs/allocator.md); most of the range must still be served by a plan. Sites
    # placed by each recorded step's own sizes (issue 38) leave no neighbour's headroom: the
    # first step longer than the recorded ones (step 9, length 64) misses 217 requests instead
    # of 75, the rest of the range none, 98.19% of it served (99.4% with the merged placement);
    # its peak is 27.1 MiB instead of 29.0. With a re-plan after two missing steps and offsets
    # by step parity (session 6 of 2026-12-06) 96.1%: a one-off longer step is waited out.
    assert len(in_range) >= n // 2, [s["phase"] for s in per_step]
    share = sum(served[i] for i in in_range) / sum(asked[i] for i in in_range)
    assert share >= 0.95, f"{share:.4f} of the random-length steps served from the plan"
    replans_before = per_step[n - 1]["replans"]
    # The first step longer than any recorded one: served (the loss is there), with misses.
    first = n
    assert miss_now[first] > 0 and per_step[first]["misses"]["size"] > per_step[first - 1]["misses"]["size"]
    assert served[first] < asked[first]
    # One re-plan follows, and the later long steps are served from the new plan.
    assert per_step[-1]["replans"] == replans_before + 1, [s["replans"] for s in per_step[n:]]
    after = [i for i in range(first, len(per_step)) if per_step[i]["replans"] == replans_before + 1]
    after = after[1:]  # the step at whose end the re-plan happened had misses
    assert after, "no step ran after the re-plan"
    for i in after:
        assert miss_now[i] == 0 and served[i] == asked[i] > 0, per_step[i]
    # The larger plan's region is reserved in the first step it serves (the
    # old one went first, or stays and gets one more region); none after.
    assert per_step[after[0]]["backing_reservations_last_step"] <= 1, per_step[after[0]]
    for i in after[1:]:
        assert per_step[i]["backing_reservations_last_step"] == 0, per_step[i]
    assert SUMMARY.match(lines[-3]) and FRAGMENTATION.match(lines[-2]) and WHOLE_RUN.match(lines[-1])


BAD_INPUT = """
import ctypes, json, sys
import tensor_arena as ta
from tensor_arena.allocator import library

lib = library()
c = lib.dll
def stats():
    return lib.json("stats_json")
out = {}
out["unknown_key"] = c.tensor_arena_configure(b'{"backend": "cpu", "no_such_policy": 1}')
out["unknown_key_error"] = lib.text("last_error")
assert c.tensor_arena_configure(json.dumps({"backend": "cpu"}).encode()) == 0
assert c.tensor_arena_step_begin() == 0
out["zero"] = c.tensor_arena_alloc(0, 0, None)
p = c.tensor_arena_alloc(4096, 0, None)
ctypes.memset(p, 0xAB, 4096)
c.tensor_arena_free(ctypes.c_void_p(0x7A0000001000), 0, 0, None)   # never handed out
out["after_unknown"] = stats()["errors"]
c.tensor_arena_free(ctypes.c_void_p(p + 64), 0, 0, None)           # inside a live block, not its start
out["after_interior"] = stats()["errors"]
out["live_after_interior"] = stats()["live_blocks"]
c.tensor_arena_free(p, 4096, 0, None)
c.tensor_arena_free(p, 4096, 0, None)                              # double free
out["after_double"] = stats()["errors"]
out["huge"] = c.tensor_arena_alloc(1 << 62, 0, None)               # larger than any device
out["last_error"] = lib.text("last_error")
q = c.tensor_arena_alloc(1 << 20, 0, None)                          # still serving
ctypes.memset(q, 0x5A, 1 << 20)
c.tensor_arena_free(q, 0, 0, None)
assert c.tensor_arena_step_end() == 0
out["stats"] = stats()
out["reset"] = c.tensor_arena_reset()
print(json.dumps(out))
"""


def test_bad_input_is_counted_and_never_crashes(env, tmp_path):
    done = script(BAD_INPUT, env, tmp_path)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["zero"] is None and out["huge"] is None
    assert out["last_error"], "no message for the refused requests"
    errors = out["stats"]["errors"]
    assert errors["zero_size"] == 1
    assert out["after_unknown"]["unknown_free"] == 1
    # A pointer inside a live block is refused (counted as unknown or double free) and
    # leaves the block alive; the real free and a second one follow.
    bad_frees = lambda e: e["unknown_free"] + e["double_free"]  # noqa: E731
    assert bad_frees(out["after_interior"]) == 2
    assert out["live_after_interior"] == 1
    assert out["after_double"]["double_free"] == out["after_interior"]["double_free"] + 1
    assert bad_frees(errors) == 3
    assert errors["too_large"] + errors["out_of_memory"] == 1
    assert out["stats"]["live_blocks"] == 0
    assert out["reset"] == 0
    assert out["unknown_key"] == -1 and "no_such_policy" in out["unknown_key_error"]


CPU_RULES = """
import json, torch
import tensor_arena as ta

alloc = ta.PlannedAllocator("cpu")
before = torch.ones(8)                      # torch's own allocator: not the library's
alloc.install()
assert alloc.installed
out = {}
with alloc.step():
    n0 = alloc.stats()["requests"]
    e = torch.empty(0)                      # size 0: no library call, a null pointer
    out["zero_ptr"] = e.data_ptr()
    out["zero_requests"] = alloc.stats()["requests"] - n0
    xs = [torch.empty(n, dtype=torch.uint8) for n in (1, 3, 100, 4097, 1 << 20)]
    out["aligned"] = [x.data_ptr() % 64 for x in xs]
    out["requests"] = alloc.stats()["requests"] - n0
    del xs, e
    try:
        torch.empty(1 << 62, dtype=torch.uint8)
        out["oom"] = None
    except torch.OutOfMemoryError as err:
        out["oom"] = str(err).splitlines()[0]
out["zero_errors"] = alloc.stats()["errors"]["zero_size"]
del before                                  # freed by torch's own deleter
out["unknown_free"] = alloc.stats()["errors"]["unknown_free"]
out["live"] = alloc.stats()["live_blocks"]
kept = torch.ones(1000)
alloc.uninstall()
out["installed_after"] = alloc.installed
n1 = alloc.stats()["requests"]
torch.ones(1000)
out["requests_after_uninstall"] = alloc.stats()["requests"] - n1
del kept                                    # still freed through the library
out["live_end"] = alloc.stats()["live_blocks"]
try:
    ta.PlannedAllocator("cpu")
    out["second"] = None
except ta.AllocatorError as err:
    out["second"] = str(err)
try:
    ta.PlannedAllocator("gpu")
except ValueError as err:
    out["bad_device"] = str(err)
print(json.dumps(out))
"""


def test_cpu_allocator_rules(env, tmp_path):
    out = json.loads(script(CPU_RULES, env, tmp_path).stdout.strip().splitlines()[-1])
    assert out["zero_ptr"] == 0 and out["zero_requests"] == 0 and out["zero_errors"] == 0
    assert out["requests"] == 5
    assert out["aligned"] == [0] * 5
    assert out["oom"] is not None and "could not allocate" in out["oom"], out["oom"]
    assert out["unknown_free"] == 0
    assert out["live"] == 0
    assert out["installed_after"] is False
    assert out["requests_after_uninstall"] == 0
    assert out["live_end"] == 0
    assert "exists in this process already" in out["second"]
    assert "gpu" in out["bad_device"]


def test_extension_is_built_at_first_use_and_cached(env, tmp_path):
    e = dict(env, TENSOR_ARENA_CACHE=str(tmp_path / "cache"))
    code = "import torch, tensor_arena.extensions as x; print(x.build('cpu'))"
    first = run(["-c", code], e).stdout.strip()
    built = list((tmp_path / "cache").glob("cpu_allocator-*.so"))
    assert [str(p) for p in built] == [first]
    mtime = built[0].stat().st_mtime_ns
    assert run(["-c", code], e).stdout.strip() == first
    assert built[0].stat().st_mtime_ns == mtime


SNAPSHOT = """
import json, sys, torch
import tensor_arena as ta

alloc = ta.PlannedAllocator("cpu").install()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.GELU(), torch.nn.Linear(512, 128))
opt = torch.optim.AdamW(model.parameters())
x = torch.randn(64, 128)
for _ in range(6):
    with alloc.step():
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
with alloc.step():
    h = model[0](x)                      # one planned block alive in the snapshot
    alloc.dump_snapshot(sys.argv[1])
    print(json.dumps(alloc.stats()))
"""


def test_snapshot_is_read_by_replay_and_memory_viz(env, tmp_path):
    import pickle

    from torch.cuda import _memory_viz

    path = tmp_path / "planned.pickle"
    (tmp_path / "s.py").write_text(textwrap.dedent(SNAPSHOT))
    stats = json.loads(run([str(tmp_path / "s.py"), str(path)], env).stdout.strip().splitlines()[-1])
    assert stats["phase"] == "serving" and stats["served_from_plan"] > 0
    snap = pickle.loads(path.read_bytes())
    assert set(snap) >= {"segments", "device_traces"}
    blocks = [b for seg in snap["segments"] for b in seg["blocks"]]
    active = [b for b in blocks if b["state"] == "active_allocated"]
    assert len(active) == stats["live_blocks"] > 0
    for seg in snap["segments"]:
        assert sum(b["size"] for b in seg["blocks"]) <= seg["total_size"]
        assert all(seg["address"] <= b["address"] < seg["address"] + seg["total_size"] for b in seg["blocks"])
    # The slab is one segment, holding the planned block alive at the snapshot.
    assert any(seg["total_size"] >= stats["slab_bytes"] for seg in snap["segments"])
    d = ta.replay(snap)
    assert d["trace"]["allocations"] == stats["live_blocks"]
    assert d["trace"]["peak_live_requested"] == sum(b["requested_size"] for b in active)
    assert ta.replay(str(path))["trace"] == dict(d["trace"], name="planned.pickle")
    assert "total_reserved" in _memory_viz.segsum(snap)
    assert "<script" in _memory_viz.segment_plot(snap)


UNMODIFIED = """
import sys, torch
from transformers import GPT2Config, GPT2LMHeadModel, logging

logging.set_verbosity_error()
torch.manual_seed(0)
cfg = GPT2Config(vocab_size=512, n_positions=64, n_embd=64, n_layer=2, n_head=2,
                 bos_token_id=511, eos_token_id=511)
model = GPT2LMHeadModel(cfg)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(0, 512, (2, 48))
for step in range(int(sys.argv[1])):
    opt.zero_grad()
    loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    loss.backward()
    opt.step()
    print(loss.item().hex())
"""


def test_launcher_runs_an_unmodified_script(env, tmp_path):
    train = tmp_path / "train.py"
    train.write_text(textwrap.dedent(UNMODIFIED))
    steps = 12
    plain = run([str(train), str(steps)], env, cwd=tmp_path).stdout.split()
    stats = tmp_path / "stats-{rank}.json"
    e = dict(env, TENSOR_ARENA_ALLOCATOR="cpu")
    done = run(["-m", "tensor_arena.run", "--stats", str(stats), "--report", str(train), str(steps)],
               e, cwd=tmp_path)
    assert done.stdout.split() == plain, "losses differ from the run with torch's own allocator"
    assert "planned allocator installed for cpu" in done.stderr
    assert "served from the plan:" in done.stderr
    s = json.loads((tmp_path / "stats-0.json").read_text())
    # Steps begun: one up to each optimizer.step(), and the one left open at exit.
    assert s["steps"] == steps + 1
    assert s["phase"] == "serving"
    assert s["requests_after_warmup"] > 0 and s["served_from_plan"] > 0
    assert s["backing_reservations_last_step"] == 0
    assert s["errors"] == {k: 0 for k in s["errors"]}
    # The loop is periodic: blocks alive across a boundary (the gradients until the
    # next zero_grad(), the loss until it is reassigned) must not make it re-plan.
    assert s["served_share"] >= 0.99
    assert s["replans"] <= 1, f"{s['replans']} re-plans of a periodic loop; misses {s['misses']}"


def test_checked_mode_keeps_the_losses(env, tmp_path):
    e = dict(env, TENSOR_ARENA_CHECKED="1")
    lines, r = example(e, tmp_path, "--steps", "8")
    assert r["identical"] is True, "checked mode changed the losses"
    st = r["stats"]
    assert st["checked"] is True
    assert st["served_share"] == 1.0 and st["served_from_plan"] > 0
    assert st["errors"]["guard_violations"] == 0


def test_launcher_runs_a_module(env, tmp_path):
    (tmp_path / "trainmod.py").write_text(textwrap.dedent(UNMODIFIED))
    e = dict(env, PYTHONPATH=os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")]))
    done = run(["-m", "tensor_arena.run", "--device", "cpu", "--warmup-steps", "1",
                "-m", "trainmod", "4"], e, cwd=tmp_path)
    assert len(done.stdout.split()) == 4


def _device_run(env, tmp_path, device):
    lines, r = example(env, tmp_path, "--device", device, "--steps", "30")
    assert r["identical"] is True
    st = r["stats"]
    assert st["served_share"] == 1.0 and st["fallback_allocations_max_step"] == 0
    assert st["slab_ratio"] <= 1.01
    assert SUMMARY.match(lines[-3]) and WHOLE_RUN.match(lines[-1])


def test_cuda_pluggable_allocator_runs_the_same_loop(env, tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here")
    _device_run(env, tmp_path, "cuda")


def test_npu_pluggable_allocator_runs_the_same_loop(env, tmp_path):
    try:
        import torch_npu  # noqa: F401
    except ImportError:
        pytest.skip("torch_npu is not installed here")
    if not torch.npu.is_available():
        pytest.skip("no NPU here")
    _device_run(env, tmp_path, "npu")


WIRING = """
import ctypes, json, sys, types
import torch

calls = []


class FakeHooks:  # the test double of the pluggable allocator's setters, named
    def __getattr__(self, name):
        return lambda address: calls.append((name, address))


class FakePluggable:  # the test double, named: records what install() hands the runtime
    def __init__(self, path, alloc_fn_name, free_fn_name):
        lib = ctypes.CDLL(path)  # as torch and torch_npu do: the names must resolve in so_path
        getattr(lib, alloc_fn_name), getattr(lib, free_fn_name)
        calls.append(("pluggable", path, alloc_fn_name, free_fn_name))

    def allocator(self):
        return FakeHooks()


def change_current_allocator(a):
    calls.append(("change_current_allocator", type(a).__name__))


device = sys.argv[1]
if device == "cuda":
    torch.cuda.is_available = lambda: True
    torch.cuda.memory.CUDAPluggableAllocator = FakePluggable
    torch.cuda.memory.change_current_allocator = change_current_allocator
else:
    fake = types.ModuleType("torch_npu")
    fake._C = types.SimpleNamespace()
    fake.npu = types.SimpleNamespace(memory=types.SimpleNamespace(
        NPUPluggableAllocator=FakePluggable, change_current_allocator=change_current_allocator))
    sys.modules["torch_npu"] = fake
    torch.npu = types.SimpleNamespace(is_available=lambda: True)

import tensor_arena as ta
from tensor_arena import _native

alloc = ta.PlannedAllocator(device)
alloc.install()
lib = ta.allocator.library()
names = ("set_memory_fraction", "empty_cache", "record_stream", "reset_peak_stats")
print(json.dumps({"calls": calls, "native": _native.__file__, "installed": alloc.installed,
                  "library": ta.allocator.library_path(), "extension": alloc.extension,
                  "addresses": {n: lib.address(n) for n in names}}))
"""


@pytest.mark.parametrize("device", ["cuda", "npu"])
def test_device_install_without_an_extension_hands_the_library_to_the_pluggable_allocator(
    env, tmp_path, device
):
    # Named test doubles stand in for the runtimes (no GPU, no torch_npu here), and no
    # compiler (CXX=/bin/false): the path taken where no device extension can be built.
    # The extensions' own path is tested in test_extensions.py; the device tests above
    # run the real thing where a device exists.
    (tmp_path / "w.py").write_text(textwrap.dedent(WIRING))
    done = run([str(tmp_path / "w.py"), device], dict(env, CXX="/bin/false"))
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert "could not be built" in done.stderr
    assert out["extension"] is None
    # so_path: the package's native module, unless TENSOR_ARENA_ALLOC_LIB names another.
    assert out["library"] == env.get("TENSOR_ARENA_ALLOC_LIB", out["native"])
    a = out["addresses"]
    setters = [["set_memory_fraction_fn", a["set_memory_fraction"]], ["set_reset_fn", a["empty_cache"]]]
    if device == "cuda":
        setters.append(["set_record_stream_fn", a["record_stream"]])
    else:
        setters.append(["set_reset_peak_status_fn", a["reset_peak_stats"]])
    assert out["calls"] == [
        ["pluggable", out["library"], "tensor_arena_alloc", "tensor_arena_free"],
        *setters,
        ["change_current_allocator", "FakePluggable"],
    ]
    assert out["installed"] is True
