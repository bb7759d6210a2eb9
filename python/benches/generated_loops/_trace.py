"""Whole-run and per-step figures read from a planned run's trace (``event,addr,size,stream``).

The running sum of the ``segment_alloc`` / ``segment_free`` sizes is what the
run held from its device (its maximum: the whole-run peak reserved, as
``trace::reserved_from_segments`` computes it); the running sum of the live
requests, each rounded up to 512 bytes as the library's live lower bound
rounds them, is what the program held. Per step (``step_begin`` ..
``step_end``): the most of each. A step *sets a new live peak* when its live
peak is above every earlier step's; the issue's target is that such a step
reserves at most 1.10x its own live peak. ``peak_reserved_step`` is the step
(0: the warm-up) in which the whole-run peak reserved was first reached.
"""

ROUND = 512


def analyse(lines):
    """Figures of the trace's lines (header first, cut after the last ``step_end``)."""
    reserved = peak_reserved = live = peak_live = 0
    peak_reserved_step = None
    size_of = {}
    steps = []  # (live peak, reserved peak) of each step, in order
    step_live = step_reserved = 0
    for line in lines[1:]:
        event, addr, size = line.split(",", 3)[:3]
        if event == "alloc":
            if addr == "0":
                continue  # answered NULL
            n = -(-int(size) // ROUND) * ROUND
            size_of[addr] = n
            live += n
            if live > step_live:
                step_live = live
            if live > peak_live:
                peak_live = live
        elif event == "free":
            live -= size_of.pop(addr, 0)
        elif event == "segment_alloc":
            reserved += int(size)
            if reserved > step_reserved:
                step_reserved = reserved
            if reserved > peak_reserved:
                peak_reserved, peak_reserved_step = reserved, len(steps)
        elif event == "segment_free":
            reserved -= int(size)
        elif event == "step_begin":
            step_live, step_reserved = live, reserved
        elif event == "step_end":
            steps.append((step_live, step_reserved))
    worst, worst_step, new_peaks, best = None, None, 0, 0
    for i, (lp, rp) in enumerate(steps):
        if lp > best:
            best = lp
            new_peaks += 1
            r = rp / lp if lp else None
            if r is not None and (worst is None or r > worst):
                worst, worst_step = r, i
    return {
        "trace_steps": len(steps),
        "trace_peak_reserved_bytes": peak_reserved,
        "peak_reserved_step": peak_reserved_step,
        "trace_peak_live_bytes": peak_live,
        "new_peak_steps": new_peaks,
        "new_peak_step_ratio_max": worst,
        "new_peak_step_worst": worst_step,
    }
