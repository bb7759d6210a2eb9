"""Step time of the transformers loop with the planned allocator against torch's own, same run.

    python python/benches/planned_allocator_step.py [--rounds 3] [--warmup 6] [--steps 40] [EXAMPLE FLAGS]

The loop is python/examples/planned_allocator.py's (GPT-2 from transformers,
AdamW, a fixed sequence length). Each round is a fresh process that builds two
identically seeded models, one while torch's own CPU allocator holds the slot
and one after ``PlannedAllocator("cpu").install()``, then alternates their
steps (torch, planned, planned, torch, ...), handing torch's allocator slot
over between them (``uninstall()`` / ``install()``, one pointer store each),
so that the noise of a shared machine falls on both kinds alike. The first
``--warmup`` steps of each (the planned one records and plans in them) are
not timed; then ``time.perf_counter`` times each step, ``alloc.step()``
included. Printed: the median step time of each kind over all timed steps,
their ratio planned / torch, the median and quartiles of the paired per-step
ratios, and the median and range of the per-round ratios (the figure to
quote: each compares medians measured in one process under the same load).
Each step reseeds torch's generator, so both models draw the same dropout
masks and their losses must agree bit for bit (printed). Flags it does not
know go to the example's parser (``--seq-len``, ``--batch``, ``--layers``,
``--embd``, ``--threads``...).
"""

import argparse
import contextlib
import importlib.util
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "planned_allocator.py"


def load_example():
    spec = importlib.util.spec_from_file_location("planned_allocator_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def worker(warmup, steps, rest):
    import torch
    from transformers import GPT2LMHeadModel

    import tensor_arena as ta

    ex = load_example()
    args = ex.parse([*rest, "--steps", str(warmup + steps)])
    torch.set_num_threads(args.threads)
    data = ex.batches(args)

    def build():
        torch.manual_seed(args.seed)
        model = GPT2LMHeadModel(ex.config(args))
        return model, torch.optim.AdamW(model.parameters(), lr=1e-3)

    alloc = ta.PlannedAllocator("cpu")
    loops = {"torch": build()}
    alloc.install()
    loops["planned"] = build()
    times = {"torch": [], "planned": []}
    losses = {"torch": [], "planned": []}

    def step(kind, i, ids):
        model, opt = loops[kind]
        if kind == "torch":
            alloc.uninstall()
        torch.manual_seed(args.seed + i)  # the same dropout masks for both models
        t0 = time.perf_counter()
        with alloc.step() if kind == "planned" else contextlib.nullcontext():
            out = model(input_ids=ids, labels=ids, use_cache=False)
            out.loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses[kind].append(out.loss.item())
            del out
        dt = time.perf_counter() - t0
        if kind == "torch":
            alloc.install()
        times[kind].append(dt)

    for i, ids in enumerate(data):
        for kind in ("torch", "planned") if i % 2 == 0 else ("planned", "torch"):
            step(kind, i, ids)
    s = alloc.stats()
    print(json.dumps({
        "torch": times["torch"][warmup:],
        "planned": times["planned"][warmup:],
        "identical": losses["torch"] == losses["planned"],
        "served_share": s["served_share"],
        "fallback_allocations_max_step": s["fallback_allocations_max_step"],
        "requests_after_warmup": s["requests_after_warmup"],
        "phase": s["phase"],
    }))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=6)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args, rest = ap.parse_known_args()
    if args.worker:
        worker(args.warmup, args.steps, rest)
        return
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    if "--threads" not in rest:
        rest += ["--threads", env["OMP_NUM_THREADS"]]
    pooled = {"torch": [], "planned": []}
    paired, rounds = [], []
    for r in range(args.rounds):
        cmd = [sys.executable, __file__, "--worker", "--warmup", str(args.warmup),
               "--steps", str(args.steps), *rest]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"round {r} failed:\n{done.stderr}")
        res = json.loads(done.stdout.strip().splitlines()[-1])
        for kind in pooled:
            pooled[kind] += res[kind]
        paired += [p / t for p, t in zip(res["planned"], res["torch"])]
        ratio = statistics.median(res["planned"]) / statistics.median(res["torch"])
        rounds.append(ratio)
        print(f"round {r}: torch {statistics.median(res['torch']) * 1e3:.2f} ms, "
              f"planned {statistics.median(res['planned']) * 1e3:.2f} ms, ratio {ratio:.4f}; "
              f"losses identical: {res['identical']}; served {res['served_share'] * 100:.2f}%, "
              f"fallback allocations per step {res['fallback_allocations_max_step']}", flush=True)
    import torch

    t, p = statistics.median(pooled["torch"]), statistics.median(pooled["planned"])
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, {os.cpu_count()} cpus; "
          f"{args.rounds} rounds x {args.steps} timed steps of each kind after {args.warmup} warm-up steps; "
          f"example flags: {' '.join(rest)}")
    print(f"median step: torch's allocator {t * 1e3:.2f} ms, planned allocator {p * 1e3:.2f} ms, "
          f"ratio {p / t:.4f}; paired per-step ratio median {statistics.median(paired):.4f} "
          f"(quartiles {statistics.quantiles(paired, n=4)[0]:.4f}-{statistics.quantiles(paired, n=4)[2]:.4f})")
    print(f"per-round ratio (medians of one process, the same conditions): median {statistics.median(rounds):.4f}, "
          f"range {min(rounds):.4f}-{max(rounds):.4f}")


if __name__ == "__main__":
    main()
