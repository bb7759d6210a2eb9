"""A loop whose kept tensors grow: the loss history is a list of tensors, never read with ``.item()``.

``history.append(loss.detach())`` every step, as a training script that logs
lazily does; every 10 steps a running mean of the last 10 losses is made from
the list (``torch.stack``) and kept too. Nothing is synchronised to a Python
float until the loop ends, so every step leaves one or two more small live
tensors behind. A tiny GPT-2 at a fixed shape, AdamW.
"""

import torch

from _common import Results, arguments, tiny_gpt2

VOCAB, BATCH, LENGTH, WINDOW = 512, 4, 32, 10


def main():
    args = arguments(__doc__.splitlines()[0])
    model = tiny_gpt2(vocab=VOCAB)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    res = Results(args, "kept_losses")
    history, means = [], []
    for step in range(args.steps):
        res.begin()
        ids = torch.randint(0, VOCAB, (BATCH, LENGTH))
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        opt.step()
        history.append(loss.detach())
        if (step + 1) % WINDOW == 0:
            means.append(torch.stack(history[-WINDOW:]).mean())
        res.lap([LENGTH])
    res.losses = [t.item().hex() for t in history]
    res.write(model, eval_losses=[t.item().hex() for t in means])


if __name__ == "__main__":
    main()
