"""Per-call cost of the device calls an allocator makes, on a real NVIDIA GPU.

    python3 python/gpu_check/device_calls.py OUT_JSON [--quick]

Times, through ctypes on the CUDA runtime (libcudart, the copy torch loaded)
and the driver (libcuda), one call at a time on the host clock
(time.perf_counter_ns around the call; each of these calls returns when the
driver has done its part), the median and the 10th/90th percentiles of many
calls:

- cudaMalloc / cudaFree at 512 B, 2 MiB, 20 MiB and 1 GiB, on an idle
  device, and with a long kernel queued on the default stream (torch's
  ``torch.cuda._sleep``), so that cudaFree's implicit device synchronisation
  shows: its cost then includes waiting for the queued kernel (the kernel's
  own length is reported beside it, measured with CUDA events);
- cuMemCreate + cuMemMap + cuMemSetAccess and cuMemUnmap + cuMemRelease at
  2 MiB and 64 MiB (each call's share too), idle and with a kernel queued;
- cuMemAddressReserve / cuMemAddressFree (2 MiB and 1 GiB of addresses);
- cudaEventCreateWithFlags(DisableTiming) / cudaEventRecord /
  cudaEventQuery / cudaEventDestroy;
- an empty ctypes call (cudaGetDevice), the floor every figure includes.

Writes OUT_JSON and prints a table. Exits 2 without a CUDA device. The
figures are documented in docs/device-costs.md.
"""

import ctypes
import json
import os
import platform
import statistics
import subprocess
import sys
import time


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def summary(ns):
    us = [x / 1000 for x in ns]
    return {"median_us": round(statistics.median(us), 3), "p10_us": round(pct(us, 0.1), 3),
            "p90_us": round(pct(us, 0.9), 3), "n": len(us)}


def main(argv):
    if len(argv) < 1:
        raise SystemExit("usage: device_calls.py OUT_JSON [--quick]")
    out_path = argv[0]
    quick = "--quick" in argv
    import torch

    if not torch.cuda.is_available():
        print("device_calls: torch sees no CUDA device", file=sys.stderr)
        return 2
    torch.cuda.init()
    torch.zeros(1, device="cuda")  # the primary context, current on this thread
    rt = ctypes.CDLL("libcudart.so.13" if torch.version.cuda.startswith("13") else "libcudart.so.12")
    drv = ctypes.CDLL("libcuda.so.1")
    vp, sz, ull = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_ulonglong

    rt.cudaMalloc.argtypes = [ctypes.POINTER(vp), sz]
    rt.cudaFree.argtypes = [vp]
    rt.cudaEventCreateWithFlags.argtypes = [ctypes.POINTER(vp), ctypes.c_uint]
    rt.cudaEventRecord.argtypes = [vp, vp]
    rt.cudaEventQuery.argtypes = [vp]
    rt.cudaEventDestroy.argtypes = [vp]
    rt.cudaGetDevice.argtypes = [ctypes.POINTER(ctypes.c_int)]

    def ok(code, what):
        if code != 0:
            raise RuntimeError(f"{what} failed with {code}")

    # cuda.h: CUmemLocation {int type; int id} (4408), CUmemAllocationProp
    # {int type; int requestedHandleTypes; CUmemLocation; void *win32; 8 bytes of
    # allocFlags} (4439), CUmemAccessDesc {CUmemLocation; int flags} (4511).
    class Loc(ctypes.Structure):
        _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]

    class Prop(ctypes.Structure):
        _fields_ = [("type", ctypes.c_int), ("handle_types", ctypes.c_int), ("location", Loc),
                    ("win32", vp), ("alloc_flags", ctypes.c_ubyte * 8)]

    class Access(ctypes.Structure):
        _fields_ = [("location", Loc), ("flags", ctypes.c_int)]

    assert ctypes.sizeof(Prop) == 32 and ctypes.sizeof(Access) == 12
    dev = torch.cuda.current_device()
    prop = Prop(1, 0, Loc(1, dev), None)  # PINNED, HANDLE_TYPE_NONE, LOCATION_TYPE_DEVICE
    access = Access(Loc(1, dev), 3)  # PROT_READWRITE
    drv.cuMemGetAllocationGranularity.argtypes = [ctypes.POINTER(sz), ctypes.POINTER(Prop), ctypes.c_int]
    drv.cuMemAddressReserve.argtypes = [ctypes.POINTER(ull), sz, sz, ull, ull]
    drv.cuMemAddressFree.argtypes = [ull, sz]
    drv.cuMemCreate.argtypes = [ctypes.POINTER(ull), sz, ctypes.POINTER(Prop), ull]
    drv.cuMemRelease.argtypes = [ull]
    drv.cuMemMap.argtypes = [ull, sz, sz, ull, ull]
    drv.cuMemUnmap.argtypes = [ull, sz]
    drv.cuMemSetAccess.argtypes = [ull, sz, ctypes.POINTER(Access), sz]
    gran = sz(0)
    ok(drv.cuMemGetAllocationGranularity(ctypes.byref(gran), ctypes.byref(prop), 0), "granularity")

    now = time.perf_counter_ns
    sync = torch.cuda.synchronize

    # The queued kernel: torch.cuda._sleep spins for a number of cycles; calibrate
    # it to about 20 ms with events.
    def sleep_ms(cycles):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        torch.cuda._sleep(cycles)
        b.record()
        b.synchronize()
        return a.elapsed_time(b)

    sleep_ms(1_000_000)
    cycles = 40_000_000
    kernel_ms = statistics.median(sleep_ms(cycles) for _ in range(3))
    cycles = int(cycles * 20.0 / kernel_ms)
    kernel_ms = statistics.median(sleep_ms(cycles) for _ in range(3))

    results = {"machine": {}, "idle": {}, "busy": {}, "vmm": {}, "events": {}}
    m = results["machine"]
    m["gpu"] = torch.cuda.get_device_name(dev)
    m["torch"] = torch.__version__
    m["cuda_runtime"] = torch.version.cuda
    dv = ctypes.c_int(0)
    drv.cuDriverGetVersion(ctypes.byref(dv))
    m["driver_api_version"] = dv.value
    try:
        m["nvidia_smi"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem",
                                          "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as e:  # noqa: BLE001 - reported
        m["nvidia_smi"] = repr(e)
    m["host"] = platform.platform()
    m["cpu_count"] = os.cpu_count()
    m["date_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    m["granularity"] = gran.value
    m["queued_kernel_ms"] = round(kernel_ms, 3)
    m["method"] = ("host clock (perf_counter_ns) around each ctypes call, one call at a time; the default "
                   "stream idle (synchronised before) or with one ~20 ms torch.cuda._sleep kernel queued on it")

    # The floor: an empty ctypes call into the runtime.
    d = ctypes.c_int()
    floor = []
    for _ in range(2000):
        t = now()
        rt.cudaGetDevice(ctypes.byref(d))
        floor.append(now() - t)
    results["ctypes_floor"] = summary(floor)

    sizes = {"512B": 512, "2MiB": 2 << 20, "20MiB": 20 << 20, "1GiB": 1 << 30}
    reps_idle = {"512B": 300, "2MiB": 300, "20MiB": 200, "1GiB": 40}
    if quick:
        reps_idle = {k: max(5, v // 10) for k, v in reps_idle.items()}
    for name, n in sizes.items():
        mal, fre = [], []
        p = vp()
        sync()
        for _ in range(5):  # warm-up
            ok(rt.cudaMalloc(ctypes.byref(p), n), "cudaMalloc")
            ok(rt.cudaFree(p), "cudaFree")
        for _ in range(reps_idle[name]):
            t = now()
            ok(rt.cudaMalloc(ctypes.byref(p), n), "cudaMalloc")
            t1 = now()
            ok(rt.cudaFree(p), "cudaFree")
            t2 = now()
            mal.append(t1 - t)
            fre.append(t2 - t1)
        results["idle"][name] = {"cudaMalloc": summary(mal), "cudaFree": summary(fre)}
        # Busy: a block allocated beforehand, a ~20 ms kernel queued, then
        # cudaMalloc of another block and cudaFree of the first.
        mal, fre, fre_after = [], [], []
        q = vp()
        for _ in range(3 if quick else 8):
            ok(rt.cudaMalloc(ctypes.byref(q), n), "cudaMalloc")
            sync()
            torch.cuda._sleep(cycles)
            t = now()
            ok(rt.cudaMalloc(ctypes.byref(p), n), "cudaMalloc")
            t1 = now()
            ok(rt.cudaFree(q), "cudaFree")
            t2 = now()
            sync()
            t3 = now()
            ok(rt.cudaFree(p), "cudaFree")
            mal.append(t1 - t)
            fre.append(t2 - t1)
            fre_after.append(t3 - t2)
        results["busy"][name] = {"cudaMalloc": summary(mal), "cudaFree": summary(fre),
                                 "synchronize_after_free": summary(fre_after)}

    # ---- the driver's VMM ---------------------------------------------------------
    def vmm(nbytes, reps, busy):
        base = ull(0)
        ok(drv.cuMemAddressReserve(ctypes.byref(base), nbytes, gran.value, 0, 0), "cuMemAddressReserve")
        c, mp, acc, un, rel = [], [], [], [], []
        h = ull(0)
        for i in range(reps + 3):
            if busy:
                sync()
                torch.cuda._sleep(cycles)
            t0 = now()
            ok(drv.cuMemCreate(ctypes.byref(h), nbytes, ctypes.byref(prop), 0), "cuMemCreate")
            t1 = now()
            ok(drv.cuMemMap(base, nbytes, 0, h, 0), "cuMemMap")
            t2 = now()
            ok(drv.cuMemSetAccess(base, nbytes, ctypes.byref(access), 1), "cuMemSetAccess")
            t3 = now()
            ok(drv.cuMemUnmap(base, nbytes), "cuMemUnmap")
            t4 = now()
            ok(drv.cuMemRelease(h), "cuMemRelease")
            t5 = now()
            if i >= 3:
                c.append(t1 - t0)
                mp.append(t2 - t1)
                acc.append(t3 - t2)
                un.append(t4 - t3)
                rel.append(t5 - t4)
        sync()
        ok(drv.cuMemAddressFree(base, nbytes), "cuMemAddressFree")
        return {"cuMemCreate": summary(c), "cuMemMap": summary(mp), "cuMemSetAccess": summary(acc),
                "map_total": summary([a + b + x for a, b, x in zip(c, mp, acc)]),
                "cuMemUnmap": summary(un), "cuMemRelease": summary(rel),
                "unmap_total": summary([a + b for a, b in zip(un, rel)])}

    for name, n in (("2MiB", 2 << 20), ("64MiB", 64 << 20)):
        results["vmm"][name] = vmm(n, 20 if quick else 200, False)
        results["vmm"][name + "_busy"] = vmm(n, 3 if quick else 8, True)
    for name, n in (("2MiB", 2 << 20), ("1GiB", 1 << 30)):
        res, fr = [], []
        base = ull(0)
        for _ in range(20 if quick else 300):
            t = now()
            ok(drv.cuMemAddressReserve(ctypes.byref(base), n, gran.value, 0, 0), "cuMemAddressReserve")
            t1 = now()
            ok(drv.cuMemAddressFree(base, n), "cuMemAddressFree")
            t2 = now()
            res.append(t1 - t)
            fr.append(t2 - t1)
        results["vmm"]["reserve_" + name] = {"cuMemAddressReserve": summary(res), "cuMemAddressFree": summary(fr)}

    # ---- events -------------------------------------------------------------------
    sync()
    cr, rec, qi, qb, de = [], [], [], [], []
    e = vp()
    for i in range(100 if quick else 2000):
        t = now()
        ok(rt.cudaEventCreateWithFlags(ctypes.byref(e), 2), "cudaEventCreateWithFlags")
        t1 = now()
        ok(rt.cudaEventRecord(e, None), "cudaEventRecord")
        t2 = now()
        rt.cudaEventQuery(e)
        t3 = now()
        ok(rt.cudaEventDestroy(e), "cudaEventDestroy")
        t4 = now()
        cr.append(t1 - t)
        rec.append(t2 - t1)
        qi.append(t3 - t2)
        de.append(t4 - t3)
    torch.cuda._sleep(cycles)
    ok(rt.cudaEventCreateWithFlags(ctypes.byref(e), 2), "cudaEventCreateWithFlags")
    ok(rt.cudaEventRecord(e, None), "cudaEventRecord")
    pending = 0
    for _ in range(100 if quick else 1000):
        t = now()
        code = rt.cudaEventQuery(e)
        qb.append(now() - t)
        pending += code == 600
    sync()
    rt.cudaEventDestroy(e)
    results["events"] = {"cudaEventCreateWithFlags": summary(cr), "cudaEventRecord": summary(rec),
                         "cudaEventQuery_done": summary(qi), "cudaEventQuery_pending": summary(qb),
                         "pending_answers": pending, "cudaEventDestroy": summary(de)}

    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)

    def row(label, s):
        print(f"| {label} | {s['median_us']:.2f} | {s['p10_us']:.2f} | {s['p90_us']:.2f} | {s['n']} |")

    print(f"device_calls: {m['gpu']}, driver {m['nvidia_smi']}, torch {m['torch']}, granularity {gran.value}, "
          f"queued kernel {kernel_ms:.2f} ms")
    print("| call | median us | p10 | p90 | n |\n|---|---|---|---|---|")
    row("ctypes floor (cudaGetDevice)", results["ctypes_floor"])
    for name in sizes:
        for k in ("cudaMalloc", "cudaFree"):
            row(f"{k} {name} idle", results["idle"][name][k])
            row(f"{k} {name} kernel queued", results["busy"][name][k])
    for name, v in results["vmm"].items():
        for k, s in v.items():
            row(f"{k} {name}", s)
    for k, s in results["events"].items():
        if isinstance(s, dict):
            row(k, s)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
