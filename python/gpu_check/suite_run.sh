#!/usr/bin/env bash
# The GPU suite (suite.py) on a lent GPU machine that has torch but no cargo and no network, in one
# call: the package is built here and carried.
#
#   bash python/gpu_check/suite_run.sh bundle              # here (cargo, pip): target/gpu-bundle/
#   bash python/gpu_check/suite_run.sh run OUT [SECONDS]   # there: everything under OUT, within SECONDS
#
# bundle: pip-installs this checkout's python/ (the Rust core compiled, release) into
#   target/gpu-bundle/pylib and writes target/gpu-bundle/COMMIT (the commit, and "dirty" when the
#   tree had changes). target/ is ignored by git, so the run tool carries it: carry
#   ["target/gpu-bundle"] (about 8 MiB).
# run: prints the machine and the versions, builds the CUDA extension against the torch there
#   (python -m tensor_arena.extensions build cuda), then runs
#   python/gpu_check/suite.py OUT/suite --device cuda --budget B with B what is left of SECONDS
#   (default 460) less 15 s; suite.json and suite.md are rewritten after every run, so a kill from
#   outside keeps what finished. Logs to OUT/run.log. Exits 2 without a GPU.
#
# The run tool's call (python/gpu_check/README.md):
#   command: bash python/gpu_check/suite_run.sh run "$OUT" 460
#   carry:   ["target/gpu-bundle"]
#   timeout_s: 480
set -u
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
bundle="$repo/target/gpu-bundle"
py="${PYTHON:-python3}"

case "${1:-}" in
bundle)
    rm -rf "$bundle"
    mkdir -p "$bundle"
    "$py" -m pip install -q --no-deps --target "$bundle/pylib" "$repo/python" || { echo "suite_run: the package did not build" >&2; exit 1; }
    { git -C "$repo" rev-parse HEAD; [ -n "$(git -C "$repo" status --porcelain)" ] && echo dirty; } > "$bundle/COMMIT"
    du -sh "$bundle"
    echo "bundle ready: $bundle (commit $(head -1 "$bundle/COMMIT"))"
    ;;
run)
    out="${2:?usage: suite_run.sh run OUT [SECONDS]}"
    total="${3:-460}"
    start=$(date +%s)
    left() { echo $((total - ($(date +%s) - start))); }
    mkdir -p "$out"
    exec > >(tee "$out/run.log") 2>&1
    export PYTHONUNBUFFERED=1
    echo "== suite_run $(date -u +%FT%TZ) on $(hostname); bundle $(tr '\n' ' ' < "$bundle/COMMIT" 2>/dev/null || echo missing); tree $(git -C "$repo" rev-parse HEAD 2>/dev/null || echo '(no git)')"
    if ! nvidia-smi -L; then
        echo "suite_run: no NVIDIA GPU (nvidia-smi -L failed or is missing)"
        exit 2
    fi
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.mem,temperature.gpu --format=csv
    [ -d "$bundle/pylib/tensor_arena" ] || { echo "suite_run: $bundle/pylib is missing: run 'suite_run.sh bundle' here and carry target/gpu-bundle"; exit 1; }
    export PYTHONPATH="$bundle/pylib${PYTHONPATH:+:$PYTHONPATH}"
    export TENSOR_ARENA_CACHE=/tmp/tensor-arena-cache
    "$py" - <<'EOF'
import importlib, sys
import torch
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "available", torch.cuda.is_available())
for name in ("transformers", "torchvision", "pynvml", "tensor_arena"):
    try:
        m = importlib.import_module(name)
        print(f"{name}: {getattr(m, '__version__', '?')} ({getattr(m, '__file__', '?')})")
    except Exception as e:  # noqa: BLE001
        print(f"{name}: not importable ({type(e).__name__}: {e})")
EOF
    echo "c++: $(command -v c++ || echo none)"
    echo "== extension ($(left) s left)"
    timeout 120 "$py" -m tensor_arena.extensions build cuda 2>&1 | tail -3
    budget=$(( $(left) - 15 ))
    echo "== suite, budget $budget s"
    cd "$repo"
    timeout $((budget + 10)) "$py" python/gpu_check/suite.py "$out/suite" --device cuda --budget "$budget"
    echo "suite exit $?"
    echo "== suite_run done after $(( $(date +%s) - start )) s"
    ;;
*)
    echo "usage: suite_run.sh bundle | suite_run.sh run OUT [SECONDS]" >&2
    exit 64
    ;;
esac
