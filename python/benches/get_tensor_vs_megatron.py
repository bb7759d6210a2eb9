"""A frozen ``tensor_arena.GlobalMemoryBuffer.get_tensor`` against megatron-core's own, in the same run.

    python python/benches/get_tensor_vs_megatron.py [--device cpu] [--repeats 15] [--number 20000]

Both buffers are warmed up first (megatron's has grown each ``(name, dtype)`` buffer, the
adapter has recorded one iteration and planned its slab), so every timed call is a steady
one: megatron's dict look-ups, ``numel`` check, slice and view against the adapter's plan.
Each figure is the median over ``repeats`` interleaved timeit runs of ``number`` calls, in
microseconds per call; the ratio is the adapter over megatron. Needs megatron-core
(``pip install megatron-core``).
"""

import argparse
import platform
import statistics
import timeit

import torch

import tensor_arena as ta

# (label, shape, dtype, name, keyword call): the shapes the tests' megatron paths ask for, a
# larger sequence-parallel all-gather, and megatron-FSDP's 1-D keyword call.
CASES = [
    ("linear all-gather", (32, 2, 16), torch.float32, "mpu", False),
    ("attention scores", (8, 16, 16), torch.float32, "mpu", False),
    ("all-gather, 2048 x 2 x 1024", (2048, 2, 1024), torch.bfloat16, "mpu", False),
    ("FSDP bucket, keywords", [1 << 20], torch.bfloat16, "fsdp_gbuf_0", True),
]


def per_call_us(fn, number):
    return timeit.timeit(fn, number=number) / number * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--number", type=int, default=20000)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    try:
        import megatron.core
        from megatron.core.utils import GlobalMemoryBuffer as MegatronBuffer
    except ImportError as e:
        raise SystemExit(f"megatron-core is needed: pip install megatron-core ({e})")
    device = torch.device(args.device)
    if device.type == "cpu":
        # megatron allocates on torch.cuda.current_device(); point it at the CPU for the warm-up.
        torch.cuda.current_device = lambda: "cpu"

    theirs = MegatronBuffer()
    ours = ta.GlobalMemoryBuffer(device)
    with ours.step():
        for _, shape, dtype, name, _ in CASES:
            theirs.get_tensor(shape, dtype, name)
            ours.get_tensor(shape, dtype, name)
    assert ours.is_frozen
    fallback = ours.stats()["fallback_requests"]

    print(f"megatron-core {megatron.core.__version__}, torch {torch.__version__}, "
          f"{platform.processor() or platform.machine()}, device {device}, "
          f"{args.repeats} x {args.number} calls, median us per call")
    print("| request | megatron-core get_tensor | tensor_arena get_tensor (frozen) | ratio |")
    print("|---|---|---|---|")
    for label, shape, dtype, name, keywords in CASES:
        if keywords:
            def mine():
                ours.get_tensor(shape, dtype=dtype, name=name, mem_alloc_context=None)

            def megatron():
                theirs.get_tensor(shape, dtype=dtype, name=name, mem_alloc_context=None)
        else:
            def mine():
                ours.get_tensor(shape, dtype, name)

            def megatron():
                theirs.get_tensor(shape, dtype, name)

        t = mine()
        assert ours.get_tensor(shape, dtype, name).untyped_storage().data_ptr() == \
            ours.arena.slab.untyped_storage().data_ptr()
        megatron()
        # Interleaved, so that load on a shared machine hits both alike.
        a, m = [], []
        for _ in range(args.repeats):
            m.append(per_call_us(megatron, args.number))
            a.append(per_call_us(mine, args.number))
        a, m = statistics.median(a), statistics.median(m)
        print(f"| {label} {list(shape)} {str(dtype).replace('torch.', '')} | {m:.2f} | {a:.2f} | {a / m:.2f} |")
        del t
    assert ours.stats()["fallback_requests"] == fallback, "a timed call left the plan"


if __name__ == "__main__":
    main()
