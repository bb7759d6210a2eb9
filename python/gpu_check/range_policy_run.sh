#!/usr/bin/env bash
# Prepared 2026-12-04, not run (no GPU loan was left): the range policy (mapped ranges through
# Usage, from a bundle made as lease_run.sh describes (BUNDLE = .gpu in the
# repository root, carried): bash .gpu/repo/python/gpu_check/range_policy_run.sh "$OUT"
# the CUDA driver's VMM) serving GPT-2 and a changing-length GPT-2, and the
# kit's oom / gpt2 / compare / record_stream scenarios on the current wheel.
set -u
out="$1"
mkdir -p "$out"
exec > >(tee "$out/run.log") 2>&1
export PYTHONUNBUFFERED=1
start=$(date +%s)
nvidia-smi -L
site=/tmp/tensor-arena-site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .gpu/wheel/*.whl || { echo "wheel did not install"; exit 1; }
export PYTHONPATH="$site"
export TENSOR_ARENA_CACHE=/tmp/tensor-arena-cache
cd .gpu/repo
python3 -m tensor_arena.extensions build cuda 2>&1 | tail -2
echo "== GPT-2, fixed length, range policy on cuda ($(( $(date +%s) - start )) s)"
timeout 90 python3 python/examples/planned_allocator.py --device cuda --steps 30 --quiet --json "$out/gpt2_fixed.json"
echo "exit $?"
echo "== GPT-2, lengths 32..96 ($(( $(date +%s) - start )) s)"
timeout 90 python3 python/examples/planned_allocator.py --device cuda --steps 30 --seq-range 32 96 --quiet --json "$out/gpt2_changing.json"
echo "exit $?"
python3 - "$out" <<'PY'
import json, sys, pathlib
for name in ("gpt2_fixed", "gpt2_changing"):
    p = pathlib.Path(sys.argv[1]) / f"{name}.json"
    if not p.is_file():
        print(name, "no json"); continue
    j = json.loads(p.read_text())
    s = j.get("stats") or {}
    keys = ("served_share", "replans", "peak_reserved_bytes", "lower_bound_bytes", "lower_bound_ratio",
            "backing_calls", "backing_calls_max_steady_step", "map_granularity", "device_call_seconds_estimate")
    print(name, {k: s.get(k) for k in keys}, "caching", (s.get("caching_model") or {}).get("peak_reserved_bytes"),
          "allocs", (s.get("caching_model") or {}).get("device_allocations"))
PY
left=$(( 300 - ($(date +%s) - start) ))
echo "== kit: oom, record_stream, compare ($left s left)"
if [ "$left" -gt 70 ]; then
  timeout $((left - 10)) bash python/gpu_check/run.sh "$out/kit" --budget $((left - 40)) --max-timeout 100 \
      --only oom --only record_stream --only compare
  echo "kit exit $?"
fi
echo "== done after $(( $(date +%s) - start )) s"
