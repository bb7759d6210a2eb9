"""Builds and loads the CPU allocator extension (csrc/cpu_allocator.cpp) at first use.

The extension is compiled against the torch that is imported, so the wheel
needs no torch at build time. It is a plain shared library with a C entry
point (no pybind11, no ninja): one compiler call with torch's include and
library paths and its C++ ABI flag, cached under a name that hashes the
source, the torch build and the command, so a new torch or a new source
rebuilds it and everything else reuses it. The file is written under a
temporary name and renamed, so that processes started together (torchrun)
never load a half-written library.

Cache: ``$TENSOR_ARENA_CACHE`` or ``$XDG_CACHE_HOME/tensor_arena`` (default
``~/.cache/tensor_arena``). Compiler: ``$CXX``, else ``c++``.
"""

import ctypes
import hashlib
import os
import pathlib
import shlex
import subprocess
import sys
import tempfile

_SOURCE = pathlib.Path(__file__).resolve().parent / "csrc" / "cpu_allocator.cpp"
_LOADED = None


class ExtensionBuildError(RuntimeError):
    """The CPU allocator extension could not be compiled against the installed torch."""


def cache_dir():
    """The folder that holds the compiled extension."""
    env = os.environ.get("TENSOR_ARENA_CACHE")
    if env:
        return pathlib.Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "tensor_arena"


def _command(torch, output):
    from torch.utils import cpp_extension

    cxx = shlex.split(os.environ.get("CXX", "c++"))
    abi = int(bool(torch._C._GLIBCXX_USE_CXX11_ABI))
    cmd = [*cxx, "-O2", "-std=c++20", "-fPIC", "-shared", f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]
    for inc in cpp_extension.include_paths():
        cmd += ["-isystem", inc]
    cmd.append(str(_SOURCE))
    for lib in cpp_extension.library_paths():
        cmd += [f"-L{lib}", f"-Wl,-rpath,{lib}"]
    cmd += ["-lc10", "-o", str(output)]
    return cmd


def _key(torch, source):
    h = hashlib.sha256()
    h.update(source)
    h.update(torch.__version__.encode())
    h.update(os.path.realpath(torch.__file__).encode())
    h.update(" ".join(_command(torch, "OUT")).encode())
    return h.hexdigest()[:16]


def library_path():
    """The compiled extension's path, building it first when the cache has none."""
    import torch

    try:
        source = _SOURCE.read_bytes()
    except OSError as e:
        raise ExtensionBuildError(
            f"the extension source {_SOURCE} is missing from the installed package: {e}"
        ) from None
    folder = cache_dir()
    target = folder / f"cpu_allocator-{_key(torch, source)}.so"
    if target.is_file():
        return target
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ExtensionBuildError(
            f"cannot create the extension cache {folder}: {e} (set TENSOR_ARENA_CACHE)"
        ) from None
    fd, tmp = tempfile.mkstemp(prefix=".cpu_allocator-", suffix=".so", dir=folder)
    os.close(fd)
    cmd = _command(torch, tmp)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        os.unlink(tmp)
        raise ExtensionBuildError(
            f"cannot run the C++ compiler {cmd[0]!r}: {e} (install g++ or set CXX)"
        ) from None
    if done.returncode != 0:
        os.unlink(tmp)
        raise ExtensionBuildError(
            f"compiling {_SOURCE.name} against torch {torch.__version__} failed "
            f"(exit {done.returncode}):\n{shlex.join(cmd)}\n{done.stderr[-4000:]}"
        )
    os.replace(tmp, target)
    return target


def load():
    """The loaded extension (ctypes.CDLL), built at the first call of the process."""
    global _LOADED
    if _LOADED is None:
        path = library_path()
        lib = ctypes.CDLL(str(path))
        lib.tensor_arena_cpu_install.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int]
        lib.tensor_arena_cpu_install.restype = ctypes.c_int
        lib.tensor_arena_cpu_uninstall.argtypes = [ctypes.c_int]
        lib.tensor_arena_cpu_uninstall.restype = ctypes.c_int
        lib.tensor_arena_cpu_installed.argtypes = []
        lib.tensor_arena_cpu_installed.restype = ctypes.c_int
        _LOADED = lib
    return _LOADED


if __name__ == "__main__":  # python -m tensor_arena._cpu_extension: build, print the path
    print(library_path())
    sys.exit(0)
