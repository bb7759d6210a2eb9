"""A fixed-shape loop: a tiny GPT-2 (transformers, built in code) at one sequence length, AdamW.

Every step has the same shapes; the ids are random, drawn per step.
"""

import torch

from _common import Results, arguments, tiny_gpt2

VOCAB, BATCH, LENGTH = 512, 4, 64


def main():
    args = arguments(__doc__.splitlines()[0])
    model = tiny_gpt2(vocab=VOCAB)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    res = Results(args, "gpt2_fixed")
    for _ in range(args.steps):
        res.begin()
        ids = torch.randint(0, VOCAB, (BATCH, LENGTH))
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        opt.step()
        res.end(loss, [LENGTH])
    res.write(model)


if __name__ == "__main__":
    main()
