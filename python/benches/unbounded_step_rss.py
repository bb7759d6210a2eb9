"""RSS growth over requests that no step end closes (issue 42's bounded-state target).

Run it under the launcher and plainly, and compare::

    OMP_NUM_THREADS=1 python -m tensor_arena.run --device cpu python/benches/unbounded_step_rss.py 3000000
    OMP_NUM_THREADS=1 python python/benches/unbounded_step_rss.py 3000000

Under the launcher a step is open from the start and never ends (no optimizer):
the allocator cuts it at its request cap and its books stay bounded. Prints one
JSON line: requests, RSS growth in bytes after a warm-up, and the allocator's
``book_bytes`` and ``steps_cut`` when it is installed.
"""

import json
import os
import sys

import torch


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3_000_000
    x = torch.randn(64)
    for _ in range(20_000):  # torch's and the allocator's warm-up
        y = x + 1
    start = rss()
    for _ in range(n):
        y = x + 1  # one request; the previous y is freed
    del y
    out = {"requests": n, "rss_growth_bytes": rss() - start}
    try:
        import tensor_arena.allocator as ta

        if ta._INSTANCE is not None:
            s = ta._INSTANCE.stats()
            out.update(book_bytes=s["book_bytes"], steps_cut=s["steps_cut"])
    except ImportError:
        pass
    print(json.dumps(out))


if __name__ == "__main__":
    main()
