#!/usr/bin/env python3
"""An independent reading of the public snapshots here, with Python's own
pickle module: the figures tests/public_snapshots.rs holds the doctor to.

For each file: per device, the segments of the state (count, reserved
bytes, allocated bytes and blocks, requested bytes, free bytes, largest
free block), the trace's entries by action, the reserved bytes the
segment entries imply (start = reserved at the end minus their sum; peak =
start plus the highest running sum) and the out-of-memory entries.

Run from the repository root: python3 tests/data/snapshots/expected.py
(it rewrites tests/data/snapshots/expected.json).
"""

import collections
import gzip
import json
import os
import pickle

HERE = os.path.dirname(os.path.abspath(__file__))
GROWS = ("segment_alloc", "segment_map")
SHRINKS = ("segment_free", "segment_unmap")


def read(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        return pickle.load(f)


def device(snapshot, d):
    segments = [s for s in snapshot.get("segments", []) if s["device"] == d]
    blocks = [b for s in segments for b in s["blocks"]]
    live = [b for b in blocks if b["state"].startswith("active")]
    free = [b for b in blocks if not b["state"].startswith("active")]
    traces = snapshot.get("device_traces", [])
    trace = traces[d] if d < len(traces) else []
    actions = collections.Counter(e["action"] for e in trace)
    reserved = sum(s["total_size"] for s in segments)
    out = {
        "device": d,
        "segments": len(segments),
        "reserved": reserved,
        "allocated": sum(b["size"] for b in live),
        "allocated_blocks": len(live),
        # torch 2.0 blocks keep the request under history; free blocks
        # have a requested_size of 0.
        "requested": sum(b.get("requested_size") or b["size"] for b in live),
        "free": sum(b["size"] for b in free),
        "largest_free_block": max((b["size"] for b in free), default=0),
        "actions": dict(sorted(actions.items())),
        "ooms": actions.get("oom", 0),
    }
    running, peak = 0, 0
    segment_entries = [e for e in trace if e["action"] in GROWS + SHRINKS]
    for e in segment_entries:
        running += e["size"] if e["action"] in GROWS else -e["size"]
        peak = max(peak, running)
    if segment_entries:
        out["recorded_initial_reserved"] = reserved - running
        out["recorded_peak_reserved"] = reserved - running + peak
    return out


def main():
    result = {}
    for name in sorted(os.listdir(HERE)):
        if not name.endswith((".pickle", ".pickle.gz")):
            continue
        snapshot = read(os.path.join(HERE, name))
        devices = {s["device"] for s in snapshot.get("segments", [])}
        devices |= set(range(len(snapshot.get("device_traces", []))))
        result[name] = {
            "allocator_settings": snapshot.get("allocator_settings", {}).get(
                "PYTORCH_CUDA_ALLOC_CONF"
            ),
            "devices": [device(snapshot, d) for d in sorted(devices)],
        }
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
        f.write("\n")
    print("wrote expected.json for", ", ".join(sorted(result)))


if __name__ == "__main__":
    main()
