"""The device extensions (tensor_arena.extensions) without a GPU or an NPU.

What runs here: the builds (cpu, cuda against the installed CUDA build of
torch, npu against the torch-npu wheel's headers when
$TENSOR_ARENA_NPU_HEADERS names them), the CUDA extension's
CUDAPluggableAllocator subclass driven in-process through its test binding
with the library on host pages (backend "cpu"), the subclass installed in
torch's CUDA allocator slot (torch allows the swap before CUDA is
initialized, which without a GPU it never is) and read through torch's own
bindings, and the Python-level answers used when no extension can be built
(CXX=/bin/false). Nothing here touches a GPU: every scenario sets the
library's backend to "cpu". Each scenario runs in a fresh subprocess (the
library and torch's allocator slot are global to a process).
"""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    e = dict(os.environ)
    e["OMP_NUM_THREADS"] = "1"
    e.setdefault("TENSOR_ARENA_CACHE", str(tmp_path_factory.mktemp("extension-cache")))
    e.pop("TENSOR_ARENA_ALLOCATOR", None)
    e.pop("CXX", None)
    return e


def run(args, env, check=True):
    done = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=600)
    if check:
        assert done.returncode == 0, f"{args} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def script(code, env, tmp_path):
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(code))
    done = run([str(path)], env)
    return json.loads(done.stdout.strip().splitlines()[-1]), done


# ---- building ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["cpu", "cuda"])
def test_build_prints_the_cached_library(kind, env, tmp_path):
    e = dict(env, TENSOR_ARENA_CACHE=str(tmp_path / "cache"))
    first = run(["-m", "tensor_arena.extensions", "build", kind], e).stdout.strip()
    built = sorted((tmp_path / "cache").glob(f"{kind}_allocator-*.so"))
    assert [str(p) for p in built] == [first]
    mtime = built[0].stat().st_mtime_ns
    assert run(["-m", "tensor_arena.extensions", "build", kind], e).stdout.strip() == first
    assert built[0].stat().st_mtime_ns == mtime


def test_build_failure_exits_non_zero_with_the_compilers_error(env, tmp_path):
    e = dict(env, TENSOR_ARENA_CACHE=str(tmp_path / "cache"), CXX="c++ -include no_such_header_here.h")
    done = run(["-m", "tensor_arena.extensions", "build", "cuda"], e, check=False)
    assert done.returncode == 1
    assert done.stdout == ""
    assert "compiling cuda_allocator.cpp failed" in done.stderr
    assert "no_such_header_here.h" in done.stderr
    e["CXX"] = str(tmp_path / "no-compiler")
    done = run(["-m", "tensor_arena.extensions", "build", "cpu"], e, check=False)
    assert done.returncode == 1 and "cannot run the C++ compiler" in done.stderr
    assert not list((tmp_path / "cache").glob("*.so")), "a failed build left a library in the cache"


def test_npu_build_without_torch_npu_names_the_flags(env, tmp_path):
    pytest.importorskip("torch")
    try:
        import torch_npu  # noqa: F401

        pytest.skip("torch_npu is importable here")
    except ImportError:
        pass
    done = run(["-m", "tensor_arena.extensions", "build", "npu"], env, check=False)
    assert done.returncode == 1 and "--torch DIR --torch-npu DIR" in done.stderr


def npu_headers():
    """$TENSOR_ARENA_NPU_HEADERS: a folder holding the unpacked torch 2.14 and torch-npu 2.14.0
    wheels' parts (.ci/npu-headers fetches them). CI sets it, and there it must exist."""
    folder = os.environ.get("TENSOR_ARENA_NPU_HEADERS")
    if not folder:
        if os.environ.get("CI"):
            pytest.fail("CI must set TENSOR_ARENA_NPU_HEADERS (.ci/npu-headers)")
        pytest.skip("TENSOR_ARENA_NPU_HEADERS is not set (.ci/npu-headers fetches the wheels' headers)")
    return folder


def test_npu_extension_compiles_and_links_against_the_torch_npu_wheel(env, tmp_path):
    folder = npu_headers()
    e = dict(env, TENSOR_ARENA_CACHE=str(tmp_path / "cache"))
    args = ["-m", "tensor_arena.extensions", "build", "npu", "--torch", folder, "--torch-npu", folder]
    path = pathlib.Path(run(args, e).stdout.strip())
    assert path.is_file() and path.name.startswith("npu_allocator-")
    # The hooks and the alloc pair torch_npu looks up by name are exported.
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(path)], capture_output=True, text=True).stdout
    for name in ("tensor_arena_npu_alloc", "tensor_arena_npu_free", "tensor_arena_npu_bind", "tensor_arena_npu_hook"):
        assert f" T {name}\n" in symbols, name
    needed = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True).stdout
    assert "[libtorch_npu.so]" in needed and "[libc10.so]" in needed


# ---- the CUDA subclass through its test binding --------------------------------------

PRELUDE = """
import ctypes, json, sys, torch
import tensor_arena as ta
from tensor_arena import allocator, extensions

lib = allocator.library()
"""

BINDING = PRELUDE + """
assert lib.dll.tensor_arena_configure(json.dumps({"backend": "cpu", "device": 0}).encode()) == 0
table = extensions.library_table(lib)
ext = ctypes.CDLL(str(extensions.build("cuda")))
err = ctypes.create_string_buffer(4096)
c = ctypes
ext.tensor_arena_cuda_test_open.argtypes = [c.POINTER(extensions.LibraryTable), c.c_char_p, c.c_size_t]
ext.tensor_arena_cuda_test_malloc.argtypes = [c.c_size_t, c.c_int, c.c_void_p, c.POINTER(c.c_void_p), c.c_char_p, c.c_size_t]
ext.tensor_arena_cuda_test_free.argtypes = [c.c_void_p, c.c_char_p, c.c_size_t]
ext.tensor_arena_cuda_test_device_stats_json.argtypes = [c.c_int, c.c_char_p, c.c_size_t]
ext.tensor_arena_cuda_test_device_stats_json.restype = c.c_size_t
ext.tensor_arena_cuda_test_snapshot_json.argtypes = [c.c_char_p, c.c_size_t]
ext.tensor_arena_cuda_test_snapshot_json.restype = c.c_size_t
ext.tensor_arena_cuda_test_cache_info.argtypes = [c.c_int, c.POINTER(c.c_size_t), c.c_char_p, c.c_size_t]
ext.tensor_arena_cuda_test_record_stream.argtypes = [c.c_void_p, c.c_void_p, c.c_char_p, c.c_size_t]
ext.tensor_arena_cuda_test_set_memory_fraction.argtypes = [c.c_double, c.c_int, c.c_char_p, c.c_size_t]
ext.tensor_arena_cuda_test_get_memory_fraction.argtypes = [c.c_int]
ext.tensor_arena_cuda_test_get_memory_fraction.restype = c.c_double
for name in ("reset_peak_stats", "reset_accumulated_stats"):
    getattr(ext, f"tensor_arena_cuda_test_{name}").argtypes = [c.c_int, c.c_char_p, c.c_size_t]
ext.tensor_arena_cuda_test_empty_cache.argtypes = [c.c_char_p, c.c_size_t]
ext.tensor_arena_cuda_test_begin_allocate_to_pool.argtypes = [c.c_char_p, c.c_size_t]

def text(fn, *args):
    n = fn(*args, None, 0)
    buf = ctypes.create_string_buffer(n + 1)
    fn(*args, buf, n + 1)
    return buf.value.decode()

def subclass_stats():
    return json.loads(text(ext.tensor_arena_cuda_test_device_stats_json, 0))

def library_stats():
    return lib.json("device_stats_json")

def malloc(size):
    out = c.c_void_p()
    rc = ext.tensor_arena_cuda_test_malloc(size, 0, None, c.byref(out), err, len(err))
    return rc, out.value, err.value.decode()

out = {}
assert ext.tensor_arena_cuda_test_open(c.byref(table), err, len(err)) == 0, err.value
out["stats_before"] = subclass_stats()
rc, a, _ = malloc(4096)
rc2, b, _ = malloc(1 << 20)
out["malloc_rc"] = [rc, rc2]
out["ptrs"] = [a, b]
out["stats_two_live"] = subclass_stats()
out["library_two_live"] = library_stats()
out["snapshot"] = json.loads(text(ext.tensor_arena_cuda_test_snapshot_json))
out["library_snapshot"] = lib.json("snapshot_json")["segments"]
largest = c.c_size_t(0)
out["cache_info_rc"] = ext.tensor_arena_cuda_test_cache_info(0, c.byref(largest), err, len(err))
out["cache_info"] = largest.value
out["library_cache_info"] = lib.dll.tensor_arena_cache_info()
out["record_stream_rc"] = ext.tensor_arena_cuda_test_record_stream(b, 0x1234, err, len(err))
out["free_rc"] = [ext.tensor_arena_cuda_test_free(a, err, len(err)), ext.tensor_arena_cuda_test_free(b, err, len(err))]
out["stats_freed"] = subclass_stats()
out["reset_peak_rc"] = ext.tensor_arena_cuda_test_reset_peak_stats(0, err, len(err))
out["stats_peak_reset"] = subclass_stats()
out["reset_accumulated_rc"] = ext.tensor_arena_cuda_test_reset_accumulated_stats(0, err, len(err))
out["stats_accumulated_reset"] = subclass_stats()
out["library_after_resets"] = library_stats()
zero_errors = lib.json("stats_json")["errors"]["zero_size"]
rc, z, _ = malloc(0)
out["zero"] = [rc, z, lib.json("stats_json")["errors"]["zero_size"] - zero_errors]
rc, p, message = malloc(1 << 60)
out["oom"] = [rc, p, message, lib.text("last_error")]
out["empty_cache_rc"] = ext.tensor_arena_cuda_test_empty_cache(err, len(err))
out["stats_emptied"] = subclass_stats()
out["fraction_default"] = ext.tensor_arena_cuda_test_get_memory_fraction(0)
out["fraction_rc"] = ext.tensor_arena_cuda_test_set_memory_fraction(0.5, 0, err, len(err))
out["fraction"] = ext.tensor_arena_cuda_test_get_memory_fraction(0)
bad = ext.tensor_arena_cuda_test_set_memory_fraction(1.5, 0, err, len(err))
out["fraction_bad"] = [bad, err.value.decode(), ext.tensor_arena_cuda_test_get_memory_fraction(0)]
bad = ext.tensor_arena_cuda_test_begin_allocate_to_pool(err, len(err))
out["graph"] = [bad, err.value.decode()]
print(json.dumps(out))
"""

POOLS = ("all", "small_pool", "large_pool")
ARRAYS = (
    "allocation",
    "segment",
    "active",
    "inactive_split",
    "allocated_bytes",
    "reserved_bytes",
    "active_bytes",
    "inactive_split_bytes",
    "requested_bytes",
)


def same_fields(subclass, library):
    """Every field of torch's DeviceStats as the subclass returned it equals the library's JSON."""
    for name in ARRAYS:
        for pool in POOLS:
            for f in ("current", "peak", "allocated", "freed"):
                assert subclass[name][pool][f] == library[name][pool][f], (name, pool, f)
    for name in ("num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free"):
        assert subclass[name] == library[name], name
    for name in ("oversize_allocations", "oversize_segments"):
        assert subclass[name] == {f: library[name][f] for f in ("current", "peak", "allocated", "freed")}, name


@pytest.fixture(scope="module")
def binding(env, tmp_path_factory):
    out, _ = script(BINDING, env, tmp_path_factory.mktemp("binding"))
    return out


def test_subclass_stats_are_the_librarys(binding):
    assert binding["malloc_rc"] == [0, 0] and all(binding["ptrs"])
    same_fields(binding["stats_two_live"], binding["library_two_live"])
    live = binding["stats_two_live"]
    before = binding["stats_before"]
    assert live["allocation"]["all"]["current"] - before["allocation"]["all"]["current"] == 2
    assert live["allocated_bytes"]["all"]["current"] - before["allocated_bytes"]["all"]["current"] >= 4096 + (1 << 20)
    assert live["requested_bytes"]["all"]["current"] - before["requested_bytes"]["all"]["current"] == 4096 + (1 << 20)
    assert live["reserved_bytes"]["all"]["current"] >= live["allocated_bytes"]["all"]["current"]
    freed = binding["stats_freed"]
    assert freed["allocation"]["all"]["current"] == before["allocation"]["all"]["current"]
    assert freed["allocation"]["all"]["freed"] - before["allocation"]["all"]["freed"] == 2
    assert freed["allocated_bytes"]["all"]["peak"] >= live["allocated_bytes"]["all"]["current"]


def test_subclass_resets_peak_and_accumulated_stats(binding):
    assert binding["reset_peak_rc"] == 0 and binding["reset_accumulated_rc"] == 0
    peak = binding["stats_peak_reset"]
    for name in ARRAYS:
        assert peak[name]["all"]["peak"] == peak[name]["all"]["current"], name
    acc = binding["stats_accumulated_reset"]
    for name in ARRAYS:
        assert acc[name]["all"]["allocated"] == 0 and acc[name]["all"]["freed"] == 0, name
    same_fields(acc, binding["library_after_resets"])


def test_subclass_snapshot_has_the_librarys_segments(binding):
    ours = binding["snapshot"]
    theirs = binding["library_snapshot"]
    assert len(ours) == len(theirs) > 0
    for s, t in zip(ours, theirs):
        assert s["address"] == t["address"] and s["total_size"] == t["total_size"]
        assert s["allocated_size"] == t["allocated_size"]
        assert [b[0] for b in s["blocks"]] == [b["size"] for b in t["blocks"]]
    assert sum(b[2] for s in ours for b in s["blocks"]) >= 2, "the two live blocks are allocated"


def test_subclass_cache_info_record_stream_and_empty_cache(binding):
    assert binding["cache_info_rc"] == 0
    assert binding["cache_info"] == binding["library_cache_info"]
    assert binding["record_stream_rc"] == 0
    assert binding["free_rc"] == [0, 0]
    assert binding["empty_cache_rc"] == 0
    emptied = binding["stats_emptied"]["reserved_bytes"]["all"]["current"]
    assert emptied <= binding["stats_freed"]["reserved_bytes"]["all"]["current"]


def test_subclass_zero_bytes_and_out_of_memory(binding):
    rc, ptr, new_errors = binding["zero"]
    assert rc == 0 and ptr is None and new_errors == 0
    rc, ptr, message, last_error = binding["oom"]
    assert rc == -2, "not a c10::OutOfMemoryError"
    assert ptr is None
    assert "tensor-arena planned CUDA allocator: could not allocate 1152921504606846976 bytes" in message
    assert last_error and last_error in message


def test_subclass_memory_fraction_and_graph_capture(binding):
    assert binding["fraction_default"] == 1.0
    assert binding["fraction_rc"] == 0 and binding["fraction"] == 0.5
    rc, message, kept = binding["fraction_bad"]
    assert rc == -1 and "set_per_process_memory_fraction(1.5, 0)" in message and kept == 0.5
    rc, message = binding["graph"]
    assert rc == -1 and "tensor-arena planned CUDA allocator: CUDA graph capture" in message


# ---- installed in torch's CUDA slot, read through torch's own bindings -----------------

INSTALLED = PRELUDE + """
import warnings
torch.cuda.is_available = lambda: True      # the install path only; no CUDA call follows
# The stats functions return {} until CUDA is initialized, which needs a GPU.
torch.cuda.memory.is_initialized = lambda: True
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    alloc = ta.PlannedAllocator("cuda:0", backend="cpu").install()
out = {"extension": alloc.extension is not None, "installed": alloc.installed,
       "warnings": [str(w.message) for w in caught]}
a = lib.dll.tensor_arena_alloc(3000, 0, None)
out["torch_stats"] = torch._C._cuda_memoryStats(0)
out["library_stats"] = lib.json("device_stats_json")
out["max_allocated"] = torch.cuda.max_memory_allocated(0)
out["allocated"] = torch.cuda.memory_allocated(0)
out["summary"] = torch.cuda.memory_summary(0)
lib.dll.tensor_arena_free(a, 0, 0, None)
torch.cuda.reset_peak_memory_stats(0)
out["peak_after_reset"] = torch.cuda.max_memory_allocated(0)
out["snapshot"] = len(torch.cuda.memory._snapshot()["segments"])
out["library_segments"] = len(lib.json("snapshot_json")["segments"])
try:
    torch._C._cuda_beginAllocateToPool(0, (1, 0))
    out["graph"] = None
except RuntimeError as e:
    out["graph"] = str(e)
print(json.dumps(out))
"""


def test_installed_subclass_answers_torchs_memory_functions(env, tmp_path):
    out, _ = script(INSTALLED, env, tmp_path)
    check_installed(out, extension=True)


def test_without_a_compiler_python_answers_and_a_warning(env, tmp_path):
    out, _ = script(INSTALLED, dict(env, CXX="/bin/false"), tmp_path)
    check_installed(out, extension=False)
    (warning,) = [w for w in out["warnings"] if "could not be built" in w]
    assert "torch.OutOfMemoryError" in warning and "Install a C++ compiler" in warning


def check_installed(out, extension):
    assert out["extension"] is extension
    assert out["installed"] is True
    same_fields(out["torch_stats"], out["library_stats"])
    assert out["allocated"] == out["library_stats"]["allocated_bytes"]["all"]["current"] > 0
    assert out["max_allocated"] >= out["allocated"]
    assert "Allocated memory" in out["summary"] and "Non-releasable memory" in out["summary"]
    assert out["peak_after_reset"] < out["max_allocated"]
    assert out["snapshot"] == out["library_segments"]
    assert out["graph"] is not None and "planned" in out["graph"] and "graph capture" in out["graph"]
