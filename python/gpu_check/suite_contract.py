"""The planned allocator's contract with torch, checked on the device (one process).

::

    python suite_contract.py --device cuda|cpu --out PATH

Installs ``tensor_arena.PlannedAllocator(device)`` (mapped ranges: the
library's default) and checks, each on its own so one failure does not hide
the next:

- ``oom``: an allocation larger than the device raises
  ``torch.OutOfMemoryError`` and the next allocation works (CPU: a request of
  2^50 bytes, which the library refuses);
- ``snapshot``: ``torch.cuda.memory._snapshot()`` has segments holding a live
  tensor (CPU: the library's own ``alloc.snapshot()``);
- ``memory_summary``: ``torch.cuda.memory_summary()`` prints the table;
- ``memory_fraction``: under ``set_per_process_memory_fraction(0.01)`` a
  request of 2% of the device raises ``torch.OutOfMemoryError``, and after
  ``set_per_process_memory_fraction(1.0)`` the same request works;
- ``graph_capture``: ``torch.cuda.graph`` is refused with an error that names
  the planned allocator, and the next allocation works;
- ``record_stream``: a side stream writes a block after a long kernel while
  the host frees it and allocates again, over steps served by the plan (in
  the mapped range): with ``record_stream`` the new tensor keeps its values.

A check that needs CUDA is ``None`` (n/a) on the CPU. Writes
``{"checks": {name: {"ok": bool|None, "detail": ...}}}`` to PATH.
"""

import argparse
import json
import sys
import traceback


def check_oom(torch, alloc, device):
    big = (1 << 50) if device == "cpu" else 2 * torch.cuda.get_device_properties(0).total_memory
    out = {}
    try:
        torch.empty(big, dtype=torch.uint8, device=device)
        out["raised"] = None
    except torch.OutOfMemoryError as e:
        out["raised"] = "torch.OutOfMemoryError"
        out["message"] = str(e).splitlines()[0][:300]
    except Exception as e:  # noqa: BLE001 - reported: the check fails
        out["raised"] = type(e).__name__
        out["message"] = str(e).splitlines()[0][:300]
    after = torch.ones(1024, device=device)
    out["after_sum"] = float(after.sum().item())
    if device == "cuda":
        out["num_ooms"] = torch.cuda.memory_stats().get("num_ooms")
    return out["raised"] == "torch.OutOfMemoryError" and out["after_sum"] == 1024.0, out


def check_snapshot(torch, alloc, device):
    x = torch.ones(1 << 20, device=device)
    snap = torch.cuda.memory._snapshot() if device == "cuda" else alloc.snapshot()
    segments = snap.get("segments") or []
    ptr = x.data_ptr()
    holds = any(s.get("address", 0) <= ptr < s.get("address", 0) + s.get("total_size", 0) for s in segments)
    detail = {"segments": len(segments), "traces": len(snap.get("device_traces") or []), "holds_live_tensor": holds}
    del x
    return bool(segments) and holds, detail


def check_memory_summary(torch, alloc, device):
    if device != "cuda":
        return None, "n/a on the CPU (torch.cuda.memory_summary)"
    x = torch.ones(1 << 20, device=device)
    text = torch.cuda.memory_summary()
    del x
    return "Allocated memory" in text, text.splitlines()[:6]


def check_memory_fraction(torch, alloc, device):
    if device != "cuda":
        return None, "n/a on the CPU (set_per_process_memory_fraction is CUDA's)"
    total = torch.cuda.get_device_properties(0).total_memory
    n = int(0.02 * total)
    out = {"request_bytes": n}
    torch.cuda.set_per_process_memory_fraction(0.01)
    try:
        torch.empty(n, dtype=torch.uint8, device=device)
        out["under_0.01"] = "allocated"
    except torch.OutOfMemoryError as e:
        out["under_0.01"] = "torch.OutOfMemoryError: " + str(e).splitlines()[0][:200]
    except Exception as e:  # noqa: BLE001
        out["under_0.01"] = f"{type(e).__name__}: {e}"[:300]
    torch.cuda.set_per_process_memory_fraction(1.0)
    try:
        y = torch.empty(n, dtype=torch.uint8, device=device)
        out["under_1.0"] = "allocated"
        del y
    except Exception as e:  # noqa: BLE001
        out["under_1.0"] = f"{type(e).__name__}: {e}"[:300]
    ok = out["under_0.01"].startswith("torch.OutOfMemoryError") and out["under_1.0"] == "allocated"
    return ok, out


def check_graph_capture(torch, alloc, device):
    if device != "cuda":
        return None, "n/a on the CPU (CUDA graphs)"
    x = torch.ones(16, device=device)
    g = torch.cuda.CUDAGraph()
    out = {}
    stream = torch.cuda.current_stream()
    try:
        with torch.cuda.graph(g):
            y = x * 2  # noqa: F841
        out["refused"] = False
    except Exception as e:  # noqa: BLE001 - the refusal is the expected outcome
        out["refused"] = True
        out["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    finally:
        # torch.cuda.graph enters its side stream before capture_begin, and a refusal there
        # leaves it current: the checks after this one run on the stream they started on.
        torch.cuda.set_stream(stream)
    torch.cuda.synchronize()
    out["after_sum"] = float(torch.ones(1024, device=device).sum().item())
    names = any(w in out.get("error", "").lower() for w in ("planned", "tensor-arena", "tensor_arena"))
    return out["refused"] and names and out["after_sum"] == 1024.0, out


def check_record_stream(torch, alloc, device):
    if device != "cuda":
        return None, "n/a on the CPU (streams)"
    n = 1 << 20
    rounds = []
    for _ in range(8):  # warm-up, recording, then steps served by the plan
        with alloc.step():
            side, main = torch.cuda.Stream(), torch.cuda.current_stream()
            buf = torch.zeros(n, device=device)
            side.wait_stream(main)
            with torch.cuda.stream(side):
                torch.cuda._sleep(200_000_000)  # the write below runs well after the host moved on
                buf.fill_(1.0)
            buf.record_stream(side)
            addr = buf.data_ptr()
            del buf
            fresh = torch.full((n,), 2.0, device=device)
            reused = fresh.data_ptr() == addr
            torch.cuda.synchronize()
            rounds.append({"reused": reused, "corrupted": bool((fresh != 2.0).any().item()),
                           "phase": alloc.stats()["phase"]})
            del fresh
    s = alloc.stats()
    return not any(r["corrupted"] for r in rounds), {"rounds": rounds, "map_granularity": s.get("map_granularity"),
                                                     "served_share": s.get("served_share")}


# The out-of-memory checks last: the last GPU run (2026-12-04) crashed in the extension there, and a
# crash ends the process; the file names the check it ended in.
CHECKS = ("snapshot", "memory_summary", "graph_capture", "record_stream", "memory_fraction", "oom")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("suite_contract: --device cuda but torch sees no CUDA device", file=sys.stderr)
        return 2
    import tensor_arena as ta

    alloc = ta.PlannedAllocator(args.device).install()
    checks = {}

    def write():  # after every check: a crash keeps what finished
        with open(args.out, "w") as f:
            json.dump({"device": args.device, "checks": checks, "extension": str(getattr(alloc, "extension", None))}, f)

    for name in CHECKS:
        checks[name] = {"ok": False, "detail": "started; the process ended inside this check (a crash?)"}
        write()
        try:
            ok, detail = globals()[f"check_{name}"](torch, alloc, args.device)
        except Exception as e:  # noqa: BLE001 - a check that raises fails; the next one still runs
            ok, detail = False, {"exception": f"{type(e).__name__}: {e}"[:500],
                                 "traceback": traceback.format_exc()[-1500:]}
        checks[name] = {"ok": ok, "detail": detail}
        write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
