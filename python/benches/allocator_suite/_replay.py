"""Replays a trace of the planned allocator through the same library and measures its whole-run peak.

    python _replay.py TRACE.csv [POLICY_JSON]

Every ``alloc`` / ``free`` / ``step_begin`` / ``step_end`` / ``phase`` of the trace goes
through the library's C ABI (CPU backend, ``POLICY_JSON`` as the
configuration: give the traced run's policy), in order; the policy sees
the same sizes in the same order, so it makes the same decisions. After every
``alloc`` the stats' ``reserved_bytes`` is read: the largest is the run's
peak reserved over the whole run (warm-up, recording, every re-plan), which
the stats JSON of the library before issue 27 does not give (its
``peak_reserved_bytes`` covers the current plan's steady steps). Prints one
JSON object, with ``per_step``: each step's phase (the one it ran in), peak
reserved and, for a served step, its fallback allocations. A free's size comes from its ``alloc`` (traces before issue 27
write 0).
"""

import ctypes
import json
import sys

from tensor_arena.allocator import library

CPU_DEVICE = 0  # what the CPU extension passes


def main():
    path = sys.argv[1]
    policy = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    lib = library()
    dll = lib.dll
    config = json.dumps({"backend": "cpu", "log_errors": False, **policy})
    lib.check(dll.tensor_arena_configure(config.encode()), f"configure {config}")
    size_of, ptr_of = {}, {}
    peak = reserved = 0
    peak_at = None
    allocs = steps = 0
    per_step = []  # after each step_end: the step's peak reserved, the phase it ran in, its fallback allocations
    step_peak = 0
    phase = None
    alloc, free = dll.tensor_arena_alloc, dll.tensor_arena_free
    with open(path) as f:
        next(f)
        for line in f:
            event, addr, size = line.split(",")[:3]
            if event == "alloc":
                if addr in ptr_of:
                    raise SystemExit(f"replay: {path}: id {addr} allocated again before its free: "
                                     "not one process's events (a forked child wrote to the trace?)")
                n = int(size)
                p = alloc(n, CPU_DEVICE, None)
                if not p:
                    raise SystemExit(f"replay: alloc of {n} bytes failed: {lib.text('last_error')}")
                ptr_of[addr], size_of[addr] = p, n
                allocs += 1
                reserved = lib.json("stats_json")["reserved_bytes"]
                step_peak = max(step_peak, reserved)
                if reserved > peak:
                    peak, peak_at = reserved, (steps, allocs)
            elif event == "free":
                p = ptr_of.pop(addr, None)
                if p is not None:
                    free(ctypes.c_void_p(p), size_of.pop(addr), CPU_DEVICE, None)
            elif event == "step_begin":
                phase = lib.json("stats_json")["phase"]
                step_peak = lib.json("stats_json")["reserved_bytes"]
                lib.check(dll.tensor_arena_step_begin(), "step_begin")
            elif event == "phase":
                # The phase of the requests that follow (0 train, 1 eval), as the run's
                # extension read it: replayed as a mark.
                lib.check(dll.tensor_arena_set_phase(int(size)), f"set_phase {size}")
            elif event == "event":
                raise SystemExit(f"replay: {path}: a second header line: more than one process wrote the trace")
            elif event == "step_end":
                lib.check(dll.tensor_arena_step_end(), "step_end")
                steps += 1
                st = lib.json("stats_json")
                fallback = st.get("fallback_allocations_last_step") if phase == "serving" else None
                per_step.append({"phase": phase, "peak_reserved_bytes": step_peak, "fallback_allocations": fallback})
    stats = lib.json("stats_json")
    print(json.dumps({
        "peak_reserved_bytes": peak, "peak_at_step": peak_at[0] if peak_at else None, "allocs": allocs,
        "steps": steps, "replans": stats.get("replans"), "served_share": stats.get("served_share"),
        "stats_peak_reserved_bytes": stats.get("peak_reserved_bytes"),
        "served_steps_with_fallback": sum(1 for p in per_step if p["fallback_allocations"]),
        "per_step": per_step,
    }))


if __name__ == "__main__":
    main()
