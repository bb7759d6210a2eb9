"""A DataLoader with 2 worker processes: a tiny GPT-2, fixed shape, AdamW.

The batch comes from the loader (made in a worker, collated there) before
``zero_grad()``, as ``for batch in loader:`` loops do. Each sample is drawn
from a generator seeded by its index, so the data do not depend on which
worker makes it. ``--start-method`` picks how the workers start (default
``fork``, Linux's default before Python 3.14; ``forkserver`` and ``spawn``
start them from a fresh interpreter, which inherits nothing of the parent's
allocator).
"""

import torch
from torch.utils.data import DataLoader, Dataset

from _common import Results, arguments, tiny_gpt2

VOCAB, BATCH, LENGTH = 512, 4, 64


class Tokens(Dataset):
    def __init__(self, n, seed):
        self.n, self.seed = n, seed

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        return torch.randint(0, VOCAB, (LENGTH,), generator=gen)


def main():
    args = arguments(__doc__.splitlines()[0],
                     start_method=(str, "fork", "multiprocessing start method of the workers"))
    model = tiny_gpt2(vocab=VOCAB)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(Tokens(args.steps * BATCH, args.seed), batch_size=BATCH, num_workers=2, shuffle=False,
                        multiprocessing_context=args.start_method)
    res = Results(args, "dataloader_workers")
    res.begin()
    for ids in loader:
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        opt.step()
        res.end(loss, [LENGTH])
        res.begin()
    res.write(model, start_method=args.start_method)


if __name__ == "__main__":
    main()
