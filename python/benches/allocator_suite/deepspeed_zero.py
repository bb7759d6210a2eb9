"""DeepSpeed ZeRO (stage 2 or 3) of a tiny GPT-2 on its CPU accelerator over gloo, 2 ranks; run under torchrun.

    DS_ACCELERATOR=cpu torchrun --standalone --nproc-per-node 2 deepspeed_zero.py --stage 3 --out res-{rank}.json

``deepspeed.initialize`` wraps the model and a torch AdamW in its engine; the
loop is the engine's own (``engine(batch)``, ``engine.backward(loss)``,
``engine.step()``), fp32. Stage 2 partitions the optimizer state and the
gradients (reduce-scattered from its bucket every step); stage 3 also the
parameters, all-gathered before each module's forward and backward (with
prefetch) and released after. Each rank draws its own ids (seed + rank).
Needs ``pip install deepspeed==0.19.8`` (the suite says so when it is missing).
"""

import os

os.environ.setdefault("DS_ACCELERATOR", "cpu")  # before deepspeed is imported: no CUDA probe

import deepspeed  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from _common import Results, arguments, tiny_gpt2  # noqa: E402

VOCAB, BATCH, LENGTH = 512, 4, 64


def main():
    args = arguments(__doc__.splitlines()[0], stage=(int, 3, "ZeRO stage (2 or 3)"))
    deepspeed.init_distributed(dist_backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = tiny_gpt2(vocab=VOCAB)  # same seed on every rank: the same initial weights
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    config = {
        "train_micro_batch_size_per_gpu": BATCH,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {
            "stage": args.stage,
            # Small buckets, so that the tiny model still takes several per step.
            "reduce_bucket_size": 50_000,
            "allgather_bucket_size": 50_000,
            "stage3_prefetch_bucket_size": 50_000,
            "stage3_param_persistence_threshold": 1_000,
        },
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=config)
    gen = torch.Generator().manual_seed(args.seed + 1 + rank)
    res = Results(args, f"deepspeed_zero{args.stage}")
    for _ in range(args.steps):
        res.begin()
        ids = torch.randint(0, VOCAB, (BATCH, LENGTH), generator=gen)
        loss = engine(input_ids=ids, labels=ids, use_cache=False).loss
        engine.backward(loss)
        engine.step()
        res.end(loss, [LENGTH])
    if args.stage == 3:
        # The partitioned parameters are empty placeholders between steps: digest
        # this rank's partitions (ds_tensor), as the other loops digest parameters.
        class Shards(torch.nn.Module):
            def __init__(self):
                super().__init__()
                for i, (name, p) in enumerate(model.named_parameters()):
                    self.register_parameter(f"p{i}", torch.nn.Parameter(p.ds_tensor.detach().clone()))
        res.write(Shards(), rank=rank, world_size=world)
    else:
        res.write(model, rank=rank, world_size=world)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
