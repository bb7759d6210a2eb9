"""Gradient accumulation and evaluation: a tiny GPT-2, 4 micro-batches per optimizer step, AdamW.

Each optimizer step accumulates the gradients of 4 micro-batches (loss / 4
each); every 5 steps an eval pass (``model.eval()``, ``torch.no_grad()``)
runs over 2 held-out batches, as a training script's periodic validation
does. ``zero_grad()`` is at the top of the step.
"""

import torch

from _common import Results, arguments, tiny_gpt2

VOCAB, BATCH, LENGTH, MICRO, EVAL_EVERY = 512, 2, 64, 4, 5


def main():
    args = arguments(__doc__.splitlines()[0])
    model = tiny_gpt2(vocab=VOCAB)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    held_out = [torch.randint(0, VOCAB, (BATCH, LENGTH)) for _ in range(2)]
    res = Results(args, "gpt2_accum_eval")
    evals = []
    for step in range(args.steps):
        res.begin()
        opt.zero_grad()
        total = 0.0
        for _ in range(MICRO):
            ids = torch.randint(0, VOCAB, (BATCH, LENGTH))
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss / MICRO
            loss.backward()
            total += loss.item()
        opt.step()
        if (step + 1) % EVAL_EVERY == 0:
            model.eval()
            with torch.no_grad():
                val = sum(model(input_ids=ids, labels=ids, use_cache=False).loss.item() for ids in held_out)
            model.train()
            evals.append(val.hex())
        res.end(total, [LENGTH])
    res.write(model, eval_losses=evals)


if __name__ == "__main__":
    main()
