"""Lease + release from Python against torch.empty of the same shape, in the same run.

    python python/benches/lease_vs_empty.py [--device cpu] [--repeats 15] [--number 20000]

Each figure is the median over ``repeats`` timeit runs of ``number`` iterations, in
microseconds per iteration; the ratio is lease+release over torch.empty. The lease
runs inside an open step (one step per run, as in a training step with many leases);
``torch.empty`` drops its tensor at once, so the caching allocator (CUDA) or the CPU
allocator gets it back every iteration.
"""

import argparse
import platform
import statistics
import timeit

import torch

import tensor_arena as ta

SHAPES = [(64, 64), (256, 1024), (4096, 1024)]


def median_us(fn, number, repeats):
    times = timeit.repeat(fn, number=number, repeat=repeats)
    return statistics.median(times) / number * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--number", type=int, default=20000)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    p = ta.Planner()
    bufs = [p.step(f"x{i}", shape, torch.float32) for i, shape in enumerate(SHAPES)]
    arena = p.plan().reserve(device)
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, device {device}, "
          f"{args.repeats} x {args.number} iterations, median us per iteration")
    print("| shape | lease + release (tensor) | lease + release (handle) | torch.empty | ratio (tensor) | ratio (handle) |")
    print("|---|---|---|---|---|---|")
    for buf, shape in zip(bufs, SHAPES):
        with arena.step() as s:
            def lease_release():
                s.release(s.lease(buf, shape))

            def lease_release_handle():
                s.lease(buf, shape)
                s.release(buf)

            def empty():
                torch.empty(shape, dtype=torch.float32, device=device)

            for f in (lease_release, lease_release_handle, empty):
                f()  # warm-up
            if cuda:
                torch.cuda.synchronize()
            # Interleave the three so that load on a shared machine hits all of them alike.
            a, b, e = [], [], []
            for _ in range(args.repeats):
                a.append(median_us(lease_release, args.number, 1))
                b.append(median_us(lease_release_handle, args.number, 1))
                e.append(median_us(empty, args.number, 1))
            a, b, e = statistics.median(a), statistics.median(b), statistics.median(e)
        print(f"| {list(shape)} | {a:.2f} | {b:.2f} | {e:.2f} | {a / e:.2f} | {b / e:.2f} |")


if __name__ == "__main__":
    main()
