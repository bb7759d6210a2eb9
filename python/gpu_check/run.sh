#!/usr/bin/env bash
# The GPU check kit of the planned allocator: builds (or loads from the cache)
# the CUDA extension and runs every scenario of check.py, writing
# summary.json and summary.md under OUT_DIR. Needs an NVIDIA GPU, a CUDA
# build of torch, and the tensor-arena package (installed, or built here from
# python/ when cargo and maturin exist). Exits 2 without a GPU.
#
#   python/gpu_check/run.sh OUT_DIR [CHECK_ARGS...]   # e.g. run.sh "$OUT" --budget 200
#
# CHECK_ARGS go to check.py (--only NAME, --budget S, --max-timeout S).
#
# Environment: PYTHON (default python3); TENSOR_ARENA_CACHE (the extension
# cache, default under OUT_DIR so a fresh machine builds it once).
set -euo pipefail
out="${1:?usage: python/gpu_check/run.sh OUT_DIR [CHECK_ARGS...]}"
shift
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
py="${PYTHON:-python3}"
mkdir -p "$out"
export TENSOR_ARENA_CACHE="${TENSOR_ARENA_CACHE:-$out/extension-cache}"

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu_check: no NVIDIA GPU found (nvidia-smi -L failed or is missing)" >&2
    exit 2
fi
nvidia-smi -L | tee "$out/gpu.txt"
if ! "$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_check: torch ($("$py" -c 'import torch; print(torch.__version__)' 2>&1)) sees no CUDA device" >&2
    exit 2
fi
if ! (cd / && "$py" -c "import tensor_arena") >/dev/null 2>&1; then
    if command -v cargo >/dev/null 2>&1; then
        echo "gpu_check: installing the tensor-arena package from $repo/python"
        "$py" -m pip install -q "$repo/python"
    else
        echo "gpu_check: tensor_arena is not installed and there is no cargo to build it (pip install ./python first)" >&2
        exit 2
    fi
fi
cd "$repo"
exec "$py" "$here/check.py" "$out" "$@"
