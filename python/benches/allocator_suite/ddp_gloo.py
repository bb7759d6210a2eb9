"""DistributedDataParallel with the gloo backend: a tiny GPT-2, fixed shape, AdamW; run under torchrun.

    torchrun --standalone --nproc-per-node 2 ddp_gloo.py --out res-{rank}.json

Each rank draws its own ids (seed + rank); DDP all-reduces the gradients, so
the ranks' parameters stay equal.
"""

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from _common import Results, arguments, tiny_gpt2

VOCAB, BATCH, LENGTH = 512, 4, 64


def main():
    args = arguments(__doc__.splitlines()[0])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = tiny_gpt2(vocab=VOCAB)  # same seed on every rank: the same initial weights
    ddp = DistributedDataParallel(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(args.seed + 1 + rank)
    res = Results(args, "ddp_gloo")
    for _ in range(args.steps):
        res.begin()
        ids = torch.randint(0, VOCAB, (BATCH, LENGTH), generator=gen)
        opt.zero_grad(set_to_none=True)
        loss = ddp(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        opt.step()
        res.end(loss, [LENGTH])
    res.write(model, rank=rank, world_size=dist.get_world_size())
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
