#!/usr/bin/env bash
# Everything the GPU checks need, in one call on a lent GPU machine that has
# torch but no cargo and no network: the tensor-arena wheel and the
# cuda_vmm_check example binary are built elsewhere and carried with a copy
# of the repository.
#
#   bash BUNDLE/repo/python/gpu_check/lease_run.sh BUNDLE OUT_DIR [SECONDS]
#
# BUNDLE holds wheel/*.whl (maturin build --release -m python/Cargo.toml),
# bin/cuda_vmm_check (cargo build --release -p tensor-arena-alloc --example
# cuda_vmm_check) and repo/ (the repository at the commit the two were built
# from). Runs, in this order, each under its own timeout and all within
# SECONDS (default 330):
#   1. bin/cuda_vmm_check          -> OUT_DIR/vmm.json    (the CUDA backing's mapped ranges)
#   2. gpu_check/device_calls.py   -> OUT_DIR/device_calls.json (per-call costs)
#   3. gpu_check/run.sh            -> OUT_DIR/kit/summary.{json,md}, gpt2.json, gpu.txt
# and logs everything to OUT_DIR/run.log. At most 7 files land in OUT_DIR.
set -u
bundle="$(cd "${1:?usage: lease_run.sh BUNDLE OUT_DIR [SECONDS]}" && pwd)"
out="${2:?usage: lease_run.sh BUNDLE OUT_DIR [SECONDS]}"
total="${3:-330}"
start=$(date +%s)
left() { echo $((total - ($(date +%s) - start))); }
mkdir -p "$out"
exec > >(tee "$out/run.log") 2>&1
export PYTHONUNBUFFERED=1
echo "== lease_run $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.mem,temperature.gpu --format=csv
python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
# The compiler the extension is built with (on 2026-12-04 the extension built
# there held libstdc++'s own locale code; see docs/verified.md).
echo "c++: $(command -v c++) -> $(readlink -f "$(command -v c++)"); CXX=${CXX:-unset}"; c++ --version | head -1

site=/tmp/tensor-arena-site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$bundle"/wheel/*.whl \
    || { echo "lease_run: the wheel did not install"; exit 1; }
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
# The directories torch loads libcudart and libcuda from, for the Rust binary.
libdirs=$(python3 - <<'EOF'
import os, torch
torch.zeros(1, device="cuda")
dirs = []
for line in open("/proc/self/maps"):
    p = line.split()[-1]
    if ("libcudart.so" in p or "libcuda.so" in p) and os.path.dirname(p) not in dirs:
        dirs.append(os.path.dirname(p))
print(":".join(dirs))
EOF
)
echo "lease_run: CUDA libraries torch loaded from: $libdirs"
export LD_LIBRARY_PATH="$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

echo "== 1. cuda_vmm_check ($(left) s left)"
timeout 60 "$bundle/bin/cuda_vmm_check" "$out/vmm.json"
echo "cuda_vmm_check exit $?"

echo "== 2. device_calls ($(left) s left)"
timeout 100 python3 "$bundle/repo/python/gpu_check/device_calls.py" "$out/device_calls.json"
echo "device_calls exit $?"

kit_s=$(($(left) - 15))
echo "== 3. gpu_check kit ($(left) s left; kit given $kit_s s)"
if [ "$kit_s" -gt 60 ]; then
    export TENSOR_ARENA_CACHE=/tmp/tensor-arena-cache
    timeout "$kit_s" bash "$bundle/repo/python/gpu_check/run.sh" "$out/kit" \
        --budget $((kit_s - 90)) --max-timeout 150 \
        --only build --only gpt2 --only stats_loop --only oom --only record_stream \
        --only compare --only cudnn_benchmark --only pytest
    echo "kit exit $?"
    for so in "$TENSOR_ARENA_CACHE"/cuda_allocator-*.so; do
        [ -f "$so" ] && echo "$so: $(nm -C --defined-only "$so" 2>/dev/null | grep -c 'std::(anonymous namespace)\|_M_insert<') libstdc++-internal symbols defined (0 expected)"
    done
else
    echo "kit skipped: too little time left"
fi
echo "== lease_run done after $(( $(date +%s) - start )) s"
