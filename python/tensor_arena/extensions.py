"""Builds and loads the planned allocator's C++ extensions (``csrc/``).

Three extensions, one per allocator slot of torch, each a plain shared
library with C entry points (no pybind11, no ninja), compiled by one
compiler call against the torch (and torch_npu) that is imported, so the
wheel needs neither at build time:

- ``cpu``: ``csrc/cpu_allocator.cpp``, torch's CPU allocator slot
  (``c10::SetCPUAllocator``); links libc10.
- ``cuda``: ``csrc/cuda_allocator.cpp``, a subclass of torch's
  ``CUDAPluggableAllocator`` that answers the whole allocator contract
  (statistics, cacheInfo, snapshot, recordStream, emptyCache, the memory
  fraction, an out-of-memory that raises ``torch.OutOfMemoryError``), plus a
  test binding that drives it without a GPU. Needs the CUDA headers: those of
  torch's ``nvidia-*`` packages (``nvidia/cu13/include`` or
  ``nvidia/cuda_runtime/include``), ``crt/host_defines.h`` from
  ``nvidia-cuda-crt``, triton's ``backends/nvidia/include`` or ``CUDA_HOME``
  (``$TENSOR_ARENA_CUDA_INCLUDE``, ``os.pathsep``-separated, comes first);
  links libtorch_cuda, libc10_cuda, libc10, libtorch_cpu and libcudart.
- ``npu``: ``csrc/npu_allocator.cpp``, the hooks torch_npu's pluggable
  allocator takes through its setters and an alloc that raises
  ``torch.OutOfMemoryError``; links libc10 and libtorch_npu. Ahead of time,
  without torch_npu importable (no CANN), against unpacked wheels:
  ``--torch DIR`` (holds ``torch/include``, ``torch/lib/libc10.so``) and
  ``--torch-npu DIR`` (holds ``torch_npu/include``, ``torch_npu/lib``).

Each build is cached under a name that hashes the sources, the torch build
and the command, so a new torch or a new source rebuilds it and everything
else reuses it; the file is written under a temporary name and renamed, so
processes started together (torchrun) never load a half-written library.
Cache: ``$TENSOR_ARENA_CACHE`` or ``$XDG_CACHE_HOME/tensor_arena`` (default
``~/.cache/tensor_arena``). Compiler: ``$CXX``, else ``c++``.

Command line (prints the built library's path; exit 1 with the compiler's
error)::

    python -m tensor_arena.extensions build cpu|cuda|npu [--torch DIR] [--torch-npu DIR]
"""

import argparse
import ctypes
import hashlib
import os
import pathlib
import shlex
import subprocess
import sys
import tempfile

__all__ = ["KINDS", "ExtensionBuildError", "LibraryTable", "build", "cache_dir", "library_table", "load"]

#: The extensions this module builds.
KINDS = ("cpu", "cuda", "npu")

_CSRC = pathlib.Path(__file__).resolve().parent / "csrc"
# Headers every device extension includes; part of the cache key.
_SHARED_HEADERS = ("library.h", "json_reader.h", "device_stats.h", "phase.h")
_LOADED = {}


class ExtensionBuildError(RuntimeError):
    """An extension could not be compiled (no compiler, missing headers, a compiler error)."""


class LibraryTable(ctypes.Structure):
    """The allocator library's functions handed to the device extensions (csrc/library.h)."""

    _fields_ = [
        ("abi_size", ctypes.c_size_t),
        ("alloc", ctypes.c_void_p),
        ("free", ctypes.c_void_p),
        ("last_error", ctypes.c_void_p),
        ("device_stats_json", ctypes.c_void_p),
        ("reset_peak_stats", ctypes.c_void_p),
        ("reset_accumulated_stats", ctypes.c_void_p),
        ("record_stream", ctypes.c_void_p),
        ("erase_stream", ctypes.c_void_p),
        ("empty_cache", ctypes.c_void_p),
        ("set_memory_fraction", ctypes.c_void_p),
        ("cache_info", ctypes.c_void_p),
        ("snapshot_json", ctypes.c_void_p),
        ("alloc_phase", ctypes.c_void_p),
    ]


def library_table(lib):
    """A :class:`LibraryTable` of ``lib`` (an ``allocator._Library``).

    Raises ``AllocatorError`` naming the first function the library does not
    export (a library older than the extensions).
    """
    from .allocator import AllocatorError

    table = LibraryTable(abi_size=ctypes.sizeof(LibraryTable))
    for name, _ in LibraryTable._fields_[1:]:
        try:
            setattr(table, name, lib.address(name))
        except AttributeError:
            raise AllocatorError(
                f"{lib.path} does not export tensor_arena_{name}: an allocator library older "
                "than the device extensions (rebuild the package)"
            ) from None
    return table


def cache_dir():
    """The folder that holds the compiled extensions."""
    env = os.environ.get("TENSOR_ARENA_CACHE")
    if env:
        return pathlib.Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "tensor_arena"


# ---- recipes: what one compiler call needs ------------------------------------------


class _Recipe:
    def __init__(self, kind, abi, includes, links, identity):
        self.kind = kind
        self.source = _CSRC / f"{kind}_allocator.cpp"
        self.headers = ("phase.h",) if kind == "cpu" else _SHARED_HEADERS
        self.abi = abi
        self.includes = includes
        self.links = links
        self.identity = identity

    def command(self, output):
        cxx = shlex.split(os.environ.get("CXX", "c++"))
        cmd = [*cxx, "-O2", "-std=c++20", "-fPIC", "-shared", f"-D_GLIBCXX_USE_CXX11_ABI={self.abi}"]
        for inc in self.includes:
            cmd += ["-isystem", str(inc)]
        cmd.append(str(self.source))
        cmd += [*self.links, "-o", str(output)]
        return cmd

    def key(self):
        h = hashlib.sha256()
        for path in (self.source, *(_CSRC / n for n in self.headers)):
            try:
                h.update(path.read_bytes())
            except OSError as e:
                raise ExtensionBuildError(
                    f"the extension source {path} is missing from the installed package: {e}"
                ) from None
        h.update("\0".join(self.identity).encode())
        h.update(" ".join(self.command("OUT")).encode())
        return h.hexdigest()[:16]


def _lib_dir_flags(folder, *libs):
    return [f"-L{folder}", f"-Wl,-rpath,{folder}", *libs]


def _torch_recipe_parts(torch):
    from torch.utils import cpp_extension

    abi = int(bool(torch._C._GLIBCXX_USE_CXX11_ABI))
    includes = [pathlib.Path(p) for p in cpp_extension.include_paths()]
    lib_dirs = cpp_extension.library_paths()
    identity = [torch.__version__, os.path.realpath(torch.__file__)]
    return abi, includes, lib_dirs, identity


def _cpu_recipe():
    import torch

    abi, includes, lib_dirs, identity = _torch_recipe_parts(torch)
    links = []
    for d in lib_dirs:
        links += _lib_dir_flags(d)
    # dlsym (csrc/phase.h): in libc from glibc 2.34, in libdl before.
    return _Recipe("cpu", abi, includes, [*links, "-lc10", "-ldl"], identity)


def _site_roots(torch):
    """Folders that may hold torch's ``nvidia`` and ``triton`` packages (torch's own site dir first)."""
    roots = [pathlib.Path(torch.__file__).resolve().parent.parent]
    roots += [pathlib.Path(p) for p in sys.path if p and p.endswith("site-packages")]
    seen, out = set(), []
    for r in roots:
        if r not in seen and r.is_dir():
            seen.add(r)
            out.append(r)
    return out


def _cuda_headers_and_runtime(torch):
    """(include dirs, the folder and file name of libcudart) for the CUDA extension."""
    from torch.utils import cpp_extension

    candidates = [pathlib.Path(p) for p in os.environ.get("TENSOR_ARENA_CUDA_INCLUDE", "").split(os.pathsep) if p]
    for root in _site_roots(torch):
        nv = root / "nvidia"
        if nv.is_dir():
            candidates += sorted(p / "include" for p in nv.iterdir() if (p / "include").is_dir())
        candidates.append(root / "triton" / "backends" / "nvidia" / "include")
    cuda_home = getattr(cpp_extension, "CUDA_HOME", None)
    if cuda_home:
        candidates.append(pathlib.Path(cuda_home) / "include")
    runtime = next((c for c in candidates if (c / "cuda_runtime_api.h").is_file()), None)
    crt = next((c for c in candidates if (c / "crt" / "host_defines.h").is_file()), None)
    if runtime is None or crt is None:
        missing = "cuda_runtime_api.h" if runtime is None else "crt/host_defines.h"
        raise ExtensionBuildError(
            f"the CUDA extension needs the CUDA headers and {missing} was not found in "
            f"{', '.join(map(str, candidates)) or 'no candidate folder'}: install torch's "
            "nvidia-cuda-runtime (and nvidia-cuda-crt, or triton), set CUDA_HOME, or set "
            "TENSOR_ARENA_CUDA_INCLUDE to the folders that hold them"
        )
    includes = [runtime] + ([crt] if crt != runtime else [])
    # libcudart beside the headers (nvidia/cu13/lib) or under CUDA_HOME.
    for folder in (runtime.parent / "lib", runtime.parent / "lib64"):
        found = sorted(folder.glob("libcudart.so*")) if folder.is_dir() else []
        if found:
            return includes, folder, found[0].name
    raise ExtensionBuildError(
        f"the CUDA extension needs libcudart next to the CUDA headers of {runtime}: not found in "
        f"{runtime.parent / 'lib'} nor {runtime.parent / 'lib64'}"
    )


def _cuda_recipe():
    import torch

    if not torch.version.cuda:
        raise ExtensionBuildError(
            f"the CUDA extension needs a CUDA build of torch; torch {torch.__version__} is not one"
        )
    abi, includes, lib_dirs, identity = _torch_recipe_parts(torch)
    cuda_includes, cudart_dir, cudart = _cuda_headers_and_runtime(torch)
    links = []
    for d in lib_dirs:
        links += _lib_dir_flags(d)
    links += ["-ltorch_cuda", "-lc10_cuda", "-lc10", "-ltorch_cpu", "-ldl"]
    links += _lib_dir_flags(cudart_dir, f"-l:{cudart}")
    # Every symbol of the extension must resolve now, not at the first call.
    links.append("-Wl,--no-undefined")
    return _Recipe("cuda", abi, [*includes, *cuda_includes], links, [*identity, torch.version.cuda])


def _abi_of(libc10):
    """The C++ ABI torch's libc10 was built with (its std::string symbols say it)."""
    try:
        data = pathlib.Path(libc10).read_bytes()
    except OSError as e:
        raise ExtensionBuildError(f"cannot read {libc10}: {e}") from None
    return 1 if b"__cxx11" in data else 0


def _npu_recipe(torch_root=None, torch_npu_root=None):
    if torch_root is None or torch_npu_root is None:
        try:
            import torch
            import torch_npu
        except ImportError as e:
            raise ExtensionBuildError(
                f"the NPU extension is built against torch_npu, which cannot be imported here ({e}); "
                "build it against unpacked wheels with --torch DIR --torch-npu DIR"
            ) from None
        files = [getattr(m, "__file__", None) for m in (torch, torch_npu)]
        if None in files:
            raise ExtensionBuildError("the NPU extension needs torch and torch_npu installed as packages")
        torch_root = torch_root or pathlib.Path(files[0]).resolve().parent.parent
        torch_npu_root = torch_npu_root or pathlib.Path(files[1]).resolve().parent.parent
    t = pathlib.Path(torch_root) / "torch"
    n = pathlib.Path(torch_npu_root) / "torch_npu"
    need = {
        "torch headers": t / "include" / "c10" / "core" / "CachingDeviceAllocator.h",
        "torch's libc10": t / "lib" / "libc10.so",
        "torch_npu headers": n / "include" / "torch_npu" / "csrc" / "npu" / "NPUPluggableAllocator.h",
        "torch_npu's libtorch_npu": n / "lib" / "libtorch_npu.so",
    }
    for what, path in need.items():
        if not path.is_file():
            raise ExtensionBuildError(f"the NPU extension needs {what}: {path} does not exist")
    includes = [t / "include", t / "include" / "torch" / "csrc" / "api" / "include", n / "include"]
    acl = n / "include" / "third_party" / "acl" / "inc"
    if acl.is_dir():
        includes.append(acl)
    links = _lib_dir_flags(t / "lib", "-lc10") + _lib_dir_flags(n / "lib", "-ltorch_npu") + ["-ldl"]
    # The extension's own symbols must all resolve against libc10 and
    # libtorch_npu; libtorch_npu's dependencies (CANN, libtorch_cpu) are left
    # to the loader, as they are absent where it is built ahead of time.
    links += ["-Wl,--no-undefined", "-Wl,--allow-shlib-undefined"]
    identity = [str(t.resolve()), str(n.resolve())]
    for marker in (t / "version.py", n / "version.py"):
        if marker.is_file():
            identity.append(marker.read_text(errors="replace"))
    return _Recipe("npu", _abi_of(need["torch's libc10"]), includes, links, identity)


def _recipe(kind, torch_root=None, torch_npu_root=None):
    if kind == "cpu":
        return _cpu_recipe()
    if kind == "cuda":
        return _cuda_recipe()
    if kind == "npu":
        return _npu_recipe(torch_root, torch_npu_root)
    raise ValueError(f"extension kind must be one of {', '.join(KINDS)}, not {kind!r}")


# ---- building and loading -------------------------------------------------------------


def build(kind, torch_root=None, torch_npu_root=None):
    """The compiled extension's path, compiling it first when the cache has none.

    ``torch_root`` / ``torch_npu_root`` (NPU only): folders holding unpacked
    ``torch/`` and ``torch_npu/`` wheels, instead of the imported packages.
    Raises :class:`ExtensionBuildError` with the compiler's command and error.
    """
    recipe = _recipe(kind, torch_root, torch_npu_root)
    folder = cache_dir()
    target = folder / f"{kind}_allocator-{recipe.key()}.so"
    if target.is_file():
        return target
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ExtensionBuildError(f"cannot create the extension cache {folder}: {e} (set TENSOR_ARENA_CACHE)") from None
    fd, tmp = tempfile.mkstemp(prefix=f".{kind}_allocator-", suffix=".so", dir=folder)
    os.close(fd)
    cmd = recipe.command(tmp)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        os.unlink(tmp)
        raise ExtensionBuildError(f"cannot run the C++ compiler {cmd[0]!r}: {e} (install g++ or set CXX)") from None
    if done.returncode != 0:
        os.unlink(tmp)
        raise ExtensionBuildError(
            f"compiling {recipe.source.name} failed (exit {done.returncode}):\n"
            f"{shlex.join(cmd)}\n{(done.stderr or done.stdout)[-4000:]}"
        )
    os.replace(tmp, target)
    return target


_SIGNATURES = {
    "cpu": {
        "tensor_arena_cpu_install": ([ctypes.c_void_p] * 3 + [ctypes.c_int], ctypes.c_int),
        "tensor_arena_cpu_uninstall": ([ctypes.c_int], ctypes.c_int),
        "tensor_arena_cpu_installed": ([], ctypes.c_int),
    },
    "cuda": {
        "tensor_arena_cuda_install": ([ctypes.POINTER(LibraryTable), ctypes.c_char_p, ctypes.c_size_t], ctypes.c_int),
        "tensor_arena_cuda_installed": ([], ctypes.c_int),
    },
    "npu": {
        "tensor_arena_npu_bind": ([ctypes.POINTER(LibraryTable), ctypes.c_char_p, ctypes.c_size_t], ctypes.c_int),
        "tensor_arena_npu_hook": ([ctypes.c_char_p], ctypes.c_uint64),
    },
}


def load(kind):
    """The loaded extension (``ctypes.CDLL``, with ``.path``), built at the first call of the process."""
    if kind not in _LOADED:
        if kind in ("cpu", "cuda"):
            import torch  # noqa: F401  (the extension links torch's libraries, loaded by torch first)
        path = build(kind)
        dll = ctypes.CDLL(str(path))
        for name, (args, res) in _SIGNATURES[kind].items():
            fn = getattr(dll, name)
            fn.argtypes, fn.restype = args, res
        dll.path = path
        _LOADED[kind] = dll
    return _LOADED[kind]


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m tensor_arena.extensions",
        description="Build the planned allocator's C++ extensions ahead of time (they are cached).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build one extension and print its path")
    b.add_argument("kind", choices=KINDS)
    b.add_argument("--torch", dest="torch_root", help="NPU: a folder holding an unpacked torch wheel (torch/include, torch/lib)")
    b.add_argument("--torch-npu", dest="torch_npu_root", help="NPU: a folder holding an unpacked torch_npu wheel")
    args = parser.parse_args(argv)
    if args.kind != "npu" and (args.torch_root or args.torch_npu_root):
        parser.error("--torch and --torch-npu apply to the npu extension only")
    try:
        print(build(args.kind, args.torch_root, args.torch_npu_root))
    except ExtensionBuildError as e:
        print(f"tensor_arena.extensions: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
