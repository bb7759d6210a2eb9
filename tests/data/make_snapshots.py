#!/usr/bin/env python3
"""Writes the small memory-snapshot pickles the tests read.

They have the layout of the dict that torch.cuda.memory._snapshot() and
torch_npu.npu.memory._snapshot() return and _dump_snapshot() pickles:
{"segments": [...], "device_traces": [[entry, ...], ...]}, trace entries
with "action", "addr" ("device_free" for "oom"), "size", "stream",
"frames" (and "time_us" in newer versions). No torch is needed: the
entries are written by hand to follow one scenario whose outcome the
tests check (see tests/replay.rs).

Run from the repository root: python3 tests/data/make_snapshots.py
"""

import gzip
import os
import pickle

MIB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))

FRAME = [{"filename": "train.py", "line": 42, "name": "forward"}]


def entry(action, addr, size, stream=0, t=0):
    key = "device_free" if action == "oom" else "addr"
    return {
        "action": action,
        key: addr,
        "size": size,
        "stream": stream,
        "frames": FRAME,
        "time_us": t,
    }


def block(address, size, requested, state):
    return {
        "address": address,
        "size": size,
        "requested_size": requested,
        "state": state,
        "frames": FRAME,
    }


def segment(address, total, blocks, stream=0, large=True, device=0):
    allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    return {
        "device": device,
        "address": address,
        "total_size": total,
        "allocated_size": allocated,
        "active_size": allocated,
        "requested_size": sum(b["requested_size"] for b in blocks),
        "stream": stream,
        "segment_type": "large" if large else "small",
        "is_expandable": False,
        "frames": FRAME,
        "blocks": blocks,
    }


def small_snapshot():
    """The 'hole' scenario on device 0, recorded after start-up.

    Before recording: a small segment S0 (2 MiB) holds W (1000 B, freed
    during the recording) and P (4000 B, still allocated at the end).
    Recorded: a 20 MiB segment; a, b, c of 6 MiB; b freed; W freed; d of
    7 MiB does not fit b's hole, so a second 20 MiB segment; an OOM entry;
    a small segment for e (100 B) on a second stream.
    """
    s0, s1, s2, s3 = 0x7F0000000000, 0x7F0001000000, 0x7F0003000000, 0x7F0005000000
    six, seven = 6 * MIB, 7 * MIB
    blk6, blk7 = 6291968, 7340544  # rounded block sizes (+32, to 512)
    other_stream = 0x5555
    trace = [
        entry("segment_alloc", s1, 20 * MIB, t=1),
        entry("alloc", s1, six, t=2),
        entry("alloc", s1 + blk6, six, t=3),
        entry("alloc", s1 + 2 * blk6, six, t=4),
        entry("free_requested", s1 + blk6, six, t=5),
        entry("free_completed", s1 + blk6, six, t=5),
        entry("free_requested", s0, 1000, t=6),
        entry("free_completed", s0, 1000, t=6),
        entry("segment_alloc", s2, 20 * MIB, t=7),
        entry("alloc", s2, seven, t=8),
        entry("oom", 123 * MIB, 30 * MIB, t=9),
        entry("snapshot", 0, 3 * blk6, t=10),
        entry("segment_alloc", s3, 2 * MIB, stream=other_stream, t=11),
        entry("alloc", s3, 100, stream=other_stream, t=12),
    ]
    segments = [
        segment(s0, 2 * MIB, [
            block(s0, 1536, 0, "inactive"),
            block(s0 + 1536, 4096, 4000, "active_allocated"),
            block(s0 + 5632, 2 * MIB - 5632, 0, "inactive"),
        ], large=False),
        segment(s1, 20 * MIB, [
            block(s1, blk6, six, "active_allocated"),
            block(s1 + blk6, blk6, 0, "inactive"),
            block(s1 + 2 * blk6, blk6, six, "active_allocated"),
            block(s1 + 3 * blk6, 20 * MIB - 3 * blk6, 0, "inactive"),
        ]),
        segment(s2, 20 * MIB, [
            block(s2, blk7, seven, "active_allocated"),
            block(s2 + blk7, 20 * MIB - blk7, 0, "inactive"),
        ]),
        segment(s3, 2 * MIB, [
            block(s3, 512, 100, "active_allocated"),
            block(s3 + 512, 2 * MIB - 512, 0, "inactive"),
        ], stream=other_stream, large=False),
    ]
    return {"segments": segments, "device_traces": [trace]}


def two_devices():
    """Device 0 makes 2 allocations, device 1 makes 3 (the default pick)."""
    d0 = [entry("alloc", 0x1000, 100), entry("alloc", 0x2000, 200)]
    d1 = [
        entry("alloc", 0x9000, 3 * MIB),
        entry("alloc", 0xA000, 5 * MIB),
        entry("free_completed", 0x9000, 3 * MIB),
        entry("alloc", 0x9000, 1 * MIB),
    ]
    return {"segments": [], "device_traces": [d0, d1]}


def three_devices_oom():
    """Three devices as a multi-GPU run leaves them: device 0 makes the
    most allocations, device 1 runs out of memory (its oom entry reports
    2 MiB free on the device), device 2 has segments but an empty trace.
    allocator_settings names PYTORCH_CUDA_ALLOC_CONF, as torch >= 2.1
    writes it."""
    d0 = [entry("alloc", 0x1000 + 0x1000 * k, 4096) for k in range(5)]
    base = 0x7F0000000000
    d1 = [
        entry("segment_alloc", base, 20 * MIB),
        entry("alloc", base, 8 * MIB),
        entry("alloc", base + 8 * MIB, 8 * MIB),
        entry("oom", 2 * MIB, 30 * MIB),
    ]
    blocks1 = [
        block(base, 8 * MIB, 8 * MIB, "active_allocated"),
        block(base + 8 * MIB, 8 * MIB, 8 * MIB, "active_allocated"),
        block(base + 16 * MIB, 4 * MIB, 0, "inactive"),
    ]
    blocks2 = [
        block(0x7E0000000000, 2 * MIB, 2 * MIB, "active_allocated"),
        block(0x7E0000000000 + 2 * MIB, 18 * MIB, 0, "inactive"),
    ]
    segments = [
        segment(0x10000, 2 * MIB, [block(0x10000, 5 * 4096, 5 * 4096, "inactive")], large=False),
        segment(base, 20 * MIB, blocks1, device=1),
        segment(0x7E0000000000, 20 * MIB, blocks2, device=2),
    ]
    settings = {
        "PYTORCH_CUDA_ALLOC_CONF": "",
        "max_split_size": -1,
        "garbage_collection_threshold": 0.0,
        "expandable_segments": False,
    }
    return {
        "segments": segments,
        "device_traces": [d0, d1, []],
        "allocator_settings": settings,
    }


def sites_snapshot():
    """An out-of-memory snapshot as torch_npu writes it with
    OOM_SNAPSHOT_ENABLE=1, with stack frames shared the way torch shares
    them (one list per distinct traceback, one dict per distinct frame).

    One 20 MiB segment: a (6 MiB, from model.py), b (6 MiB, from
    data.py), c (6 MiB, from model.py); b is freed, then a 7 MiB request
    (from train.py) fails: the oom entry reports 2 MiB free on the device.
    """
    s1 = 0x7F0001000000
    six = 6 * MIB
    blk6 = 6291968
    lib = {"filename": "/usr/lib/python3.11/site-packages/torch/nn/modules/module.py",
           "line": 1511, "name": "_call_impl"}
    model = {"filename": "model.py", "line": 12, "name": "forward"}
    data = {"filename": "data.py", "line": 30, "name": "collate"}
    train = {"filename": "train.py", "line": 88, "name": "step"}
    at_model = [lib, model, train]  # innermost first
    at_data = [data, train]
    at_train = [train]

    def e(action, addr, size, frames):
        key = "device_free" if action == "oom" else "addr"
        return {"action": action, key: addr, "size": size, "stream": 0,
                "frames": frames, "time_us": 0}

    trace = [
        e("segment_alloc", s1, 20 * MIB, at_model),
        e("alloc", s1, six, at_model),
        e("alloc", s1 + blk6, six, at_data),
        e("alloc", s1 + 2 * blk6, six, at_model),
        e("free_requested", s1 + blk6, six, at_data),
        e("free_completed", s1 + blk6, six, at_data),
        e("oom", 2 * MIB, 7340544, at_train),
    ]
    blocks = [
        block(s1, blk6, six, "active_allocated"),
        block(s1 + blk6, blk6, 0, "inactive"),
        block(s1 + 2 * blk6, blk6, six, "active_allocated"),
        block(s1 + 3 * blk6, 20 * MIB - 3 * blk6, 0, "inactive"),
    ]
    for b, frames in zip(blocks, [at_model, [], at_model, []]):
        b["frames"] = frames
    return {"segments": [segment(s1, 20 * MIB, blocks)], "device_traces": [trace]}


def main():
    files = {
        # Python's default protocol (4 in 3.11), as _dump_snapshot writes.
        "snapshot_small.pickle": (small_snapshot(), pickle.DEFAULT_PROTOCOL),
        # An old protocol, to check the reader does not depend on one.
        "snapshot_two_devices.pickle": (two_devices(), 2),
        "not_a_snapshot.pickle": ([1, 2, 3], pickle.DEFAULT_PROTOCOL),
        "snapshot_three_devices_oom.pickle": (three_devices_oom(), pickle.DEFAULT_PROTOCOL),
    }
    for name, (obj, protocol) in files.items():
        with open(os.path.join(HERE, name), "wb") as f:
            pickle.dump(obj, f, protocol=protocol)
        print("wrote", name)
    # gzip-compressed, as people ship snapshots; mtime 0 keeps it stable.
    name = "oom_snapshot_sites.pickle.gz"
    raw = pickle.dumps(sites_snapshot(), protocol=pickle.DEFAULT_PROTOCOL)
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(gzip.compress(raw, mtime=0))
    print("wrote", name)


if __name__ == "__main__":
    main()
