#!/usr/bin/env python3
"""numpy baseline for the bernoulli_ benchmark: fill a preallocated 64 MiB
float32 buffer with uniforms (Generator.random(out=...)) and compare against
p into a preallocated bool mask (np.less(..., out=...)), as a framework that
keeps its buffers would. Prints the median rate over several runs.

    python3 benches/numpy_bernoulli.py

Skips with a message if numpy is not installed (pip install numpy).
"""
import statistics
import sys
import time

try:
    import numpy as np
except ImportError:
    print("numpy is not installed; skipping the numpy baseline (pip install numpy)")
    sys.exit(0)

N = 16 << 20  # elements: 64 MiB of float32, as the Rust benchmark
P = np.float32(0.5)
RUNS = 15

buf = np.empty(N, dtype=np.float32)
mask = np.empty(N, dtype=np.bool_)


def measure(bit_generator, label):
    """Median rate of uniforms + compare into the preallocated arrays."""
    gen = np.random.Generator(bit_generator)
    times = []
    for _ in range(RUNS + 2):
        t0 = time.perf_counter()
        gen.random(out=buf, dtype=np.float32)
        np.less(buf, P, out=mask)
        times.append(time.perf_counter() - t0)
    times = times[2:]  # warm-up
    med = statistics.median(times)
    print(f"numpy {np.__version__} {label}: median {med * 1e3:.2f} ms per 64 MiB, "
          f"{N / med / 1e9:.3f} G elements/s (min {N / max(times) / 1e9:.3f}, "
          f"max {N / min(times) / 1e9:.3f})")


measure(np.random.Philox(1234), "Philox")
measure(np.random.PCG64(1234), "PCG64 (default)")
