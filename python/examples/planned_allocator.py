"""An unmodified transformers model trained with the planned allocator on the CPU (or a device).

GPT-2 (``GPT2LMHeadModel`` from transformers, a small ``GPT2Config`` built in
code, random weights, synthetic token ids: nothing is downloaded) and AdamW
train for ``--steps`` steps, twice: first with torch's own CPU allocator in a
subprocess, then here with ``tensor_arena.PlannedAllocator("cpu")`` installed
as torch's CPU allocator. The losses and the final parameters must be
bit-identical; the run ends with the allocator's figures::

    python python/examples/planned_allocator.py                      # fixed sequence length
    python python/examples/planned_allocator.py --seq-range 32 96    # a random length per step
    python python/examples/planned_allocator.py --device cuda        # CUDAPluggableAllocator
    python python/examples/planned_allocator.py --device npu         # NPUPluggableAllocator (torch_npu)

The model code is transformers' own; the loop marks each step with
``alloc.step()`` and nothing else (``python -m tensor_arena.run`` does even
that without an edit, see docs/python.md).
"""

import argparse
import contextlib
import hashlib
import json
import os
import random
import subprocess
import sys

import torch


def config(args):
    from transformers import GPT2Config, logging

    logging.set_verbosity_error()  # the config notes of a model built in code, not downloaded

    return GPT2Config(
        vocab_size=args.vocab,
        n_positions=max(args.lengths) + 1,
        n_embd=args.embd,
        n_layer=args.layers,
        n_head=args.heads,
        bos_token_id=args.vocab - 1,
        eos_token_id=args.vocab - 1,
        loss_type="ForCausalLM",
    )


def batches(args):
    """Synthetic token ids, one batch per step, made before training (a dataset in memory):
    each row repeats a random phrase of 16 tokens, so that the loss has something to fall to."""
    gen = torch.Generator().manual_seed(args.seed + 1)
    phrases = torch.randint(0, args.vocab, (args.batch, 16), generator=gen)
    longest = phrases.repeat(1, -(-max(args.lengths) // 16))
    return [longest[:, :n].contiguous() for n in args.lengths]


def digest(model):
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def train(args, alloc=None, on_step=None):
    """Builds the model and trains it over ``args.lengths``; returns losses (float.hex) and a digest."""
    from transformers import GPT2LMHeadModel

    torch.manual_seed(args.seed)
    data = batches(args)
    if args.device != "cpu":
        data = [ids.to(args.device) for ids in data]
    model = GPT2LMHeadModel(config(args)).to(args.device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for i, ids in enumerate(data):
        with alloc.step() if alloc is not None else contextlib.nullcontext():
            out = model(input_ids=ids, labels=ids, use_cache=False)
            out.loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(out.loss.item())
            del out
        if on_step is not None:
            on_step(i, ids.shape[1], losses[-1])
    return {"losses": [x.hex() for x in losses], "digest": digest(model)}


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--seq-len", type=int, default=64, help="the fixed sequence length")
    ap.add_argument(
        "--seq-range", type=int, nargs=2, metavar=("LO", "HI"),
        help="a random sequence length per step in [LO, HI] instead of --seq-len",
    )
    ap.add_argument("--lengths", help="explicit comma-separated lengths, one per step (overrides both)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--embd", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", choices=["cpu", "cuda", "npu"], default="cpu",
                    help="cuda and npu: the pluggable allocator, deterministic algorithms in both runs")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads(),
                    help="torch intra-op threads, the same in both runs")
    ap.add_argument("--policy", default="{}", help="policy keywords of PlannedAllocator as JSON")
    ap.add_argument("--json", metavar="PATH", help="also write the losses, per-step stats and stats here")
    ap.add_argument("--quiet", action="store_true", help="no per-step lines")
    ap.add_argument("--role", choices=["compare", "baseline", "planned"], default="compare",
                    help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.lengths:
        args.lengths = [int(x) for x in args.lengths.split(",")]
    elif args.seq_range:
        lo, hi = args.seq_range
        if not 0 < lo <= hi:
            ap.error(f"--seq-range needs 0 < LO <= HI, not {lo} {hi}")
        rng = random.Random(args.seed)
        args.lengths = [rng.randint(lo, hi) for _ in range(args.steps)]
    else:
        args.lengths = [args.seq_len] * args.steps
    return args


def baseline(argv, args):
    """The same run with torch's own allocator, in a fresh process."""
    cmd = [sys.executable, os.path.abspath(__file__), *argv,
           "--threads", str(args.threads), "--role", "baseline"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"the baseline run failed (exit {done.returncode}):\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: torch sees no CUDA device")
    if args.device != "cpu":
        # Bit-identical runs on a device need deterministic kernels (and a fixed cuBLAS
        # workspace, set before the first cuBLAS call).
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        if args.device == "npu":
            try:
                import torch_npu  # noqa: F401
            except ImportError as e:
                sys.exit(f"--device npu needs torch_npu: {e}")
            if not torch.npu.is_available():
                sys.exit("--device npu: torch_npu sees no NPU")
        torch.use_deterministic_algorithms(True)
    if args.role == "baseline":
        print(json.dumps(train(args)))
        return 0

    ref = baseline(argv, args) if args.role == "compare" else None

    import tensor_arena as ta

    alloc = ta.PlannedAllocator(args.device, **json.loads(args.policy)).install()
    per_step = []
    phase = [alloc.stats()["phase"]]  # the phase a step runs in: the one read before it

    def on_step(i, length, loss):
        s = alloc.stats()
        during, phase[0] = phase[0], s["phase"]
        per_step.append({k: s[k] for k in (
            "phase", "requests", "requests_after_warmup", "served_from_plan",
            "fallback_allocations_last_step", "backing_reservations",
            "backing_reservations_last_step", "misses", "replans", "plans", "slab_bytes",
        )} | {"length": length})
        if not args.quiet:
            print(f"step {i:3d}  length {length:4d}  loss {loss:.6f}  {during:9s}  "
                  f"served {s['served_from_plan']}/{s['requests_after_warmup']}  "
                  f"fallback {s['fallback_allocations_last_step']}  replans {s['replans']}")

    run = train(args, alloc, on_step)
    stats = alloc.stats()
    same = None
    if ref is not None:
        same = ref["losses"] == run["losses"] and ref["digest"] == run["digest"]
        diff = sum(a != b for a, b in zip(ref["losses"], run["losses"]))
        print(f"losses over {len(run['losses'])} steps: "
              + ("bit-identical to torch's own allocator (final parameters too)" if same
                 else f"DIFFER from torch's own allocator in {diff} steps"
                      + ("" if ref["digest"] == run["digest"] else ", final parameters differ")))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"lengths": args.lengths, "planned": run, "baseline": ref, "identical": same,
                       "per_step": per_step, "stats": stats}, f, indent=1)
    print(alloc.summary(stats))
    return 1 if same is False else 0


if __name__ == "__main__":
    sys.exit(main())
