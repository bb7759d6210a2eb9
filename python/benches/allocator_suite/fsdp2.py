"""FSDP2 (``fully_shard`` per block) of a tiny GPT-2 over gloo on the CPU, 2 ranks; run under torchrun.

    torchrun --standalone --nproc-per-node 2 fsdp2.py --out res-{rank}.json [--mixed] [--checkpoint]

Each transformer block is a ``fully_shard`` unit and the root holds the
embeddings and the head: every step all-gathers a block's parameters before
its forward (and again before its backward), frees the unsharded storage after
use (``untyped_storage().resize_(0)``), and reduce-scatters its gradients.
``--mixed``: ``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)``
(bf16 all-gathers and compute). ``--checkpoint``: activation checkpointing of
every block (recomputed in backward, so each block is unsharded once more).
``--reshard 0``: ``reshard_after_forward=False``, each block's unsharded parameters live
from its forward's all-gather to its backward's reduce-scatter.
Each rank draws its own ids (seed + rank); the same initial weights on every rank.
"""

import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from _common import Results, arguments, tiny_gpt2

VOCAB, BATCH, LENGTH = 512, 4, 64


def main():
    args = arguments(__doc__.splitlines()[0],
                     mixed=(int, 0, "1: bf16 parameters and compute, fp32 gradient reduction"),
                     checkpoint=(int, 0, "1: activation checkpointing of every block"),
                     reshard=(int, 1, "0: reshard_after_forward=False (unsharded from the forward's all-gather "
                                      "to the backward's reduce-scatter)"))
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    model = tiny_gpt2(vocab=VOCAB)  # same seed on every rank: the same initial weights
    if args.checkpoint:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if args.mixed \
        else MixedPrecisionPolicy()
    for block in model.transformer.h:
        fully_shard(block, mesh=mesh, mp_policy=policy, reshard_after_forward=bool(args.reshard))
    fully_shard(model, mesh=mesh, mp_policy=policy)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(args.seed + 1 + rank)
    name = "fsdp2" + ("_mixed" if args.mixed else "") + ("_checkpoint" if args.checkpoint else "") + \
        ("" if args.reshard else "_keep_unsharded")
    res = Results(args, name)
    for _ in range(args.steps):
        res.begin()
        ids = torch.randint(0, VOCAB, (BATCH, LENGTH), generator=gen)
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        opt.step()
        res.end(loss, [LENGTH])
    res.write(model, rank=rank, world_size=world)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
