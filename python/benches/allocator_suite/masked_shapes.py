"""The seed's masked loop: the input shape is drawn per step and a data-dependent selection feeds the model.

``x[torch.randn(x.shape) > 0.5]`` keeps about 31% of the elements, a number
known only when the mask is made; the kept values, cut to whole rows of
``D`` features, go through a small MLP regressing a function of each row.
"""

import torch

from _common import Results, arguments

D = 64
BATCHES = (8, 16, 24, 32)
LENGTHS = (32, 48, 64, 96, 128)


def main():
    args = arguments(__doc__.splitlines()[0])
    model = torch.nn.Sequential(
        torch.nn.Linear(D, 256), torch.nn.GELU(), torch.nn.Linear(256, 256), torch.nn.GELU(),
        torch.nn.Linear(256, 1),
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    res = Results(args, "masked_shapes")
    for _ in range(args.steps):
        res.begin()
        b, n = args.rng.choice(BATCHES), args.rng.choice(LENGTHS)
        x = torch.randn(b, n, D)
        kept = x[torch.randn(x.shape) > 0.5]  # data-dependent length
        rows = kept[: kept.numel() // D * D].view(-1, D)
        target = rows.sum(dim=1, keepdim=True).sin()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(rows), target)
        loss.backward()
        opt.step()
        res.end(loss, [b, n, rows.shape[0]])
    res.write(model)


if __name__ == "__main__":
    main()
