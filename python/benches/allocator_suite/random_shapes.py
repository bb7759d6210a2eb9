"""Random shapes every step: a masked attention block whose batch and length are drawn fresh each step.

The article's problem: every step's temporaries have a shape the run has
not seen (batch uniform in 1..32, length uniform in 8..256, not a small set
of buckets), and each sequence is padded to the step's length with a key
padding mask of its own length. A transformer encoder layer (d_model 64,
4 heads) and a masked mean pool regress a function of the inputs; AdamW.
"""

import torch

from _common import Results, arguments

D, HEADS = 64, 4
BATCH, LENGTH = (1, 32), (8, 256)


def main():
    args = arguments(__doc__.splitlines()[0])
    layer = torch.nn.TransformerEncoderLayer(D, HEADS, dim_feedforward=128, dropout=0.0, batch_first=True)
    model = torch.nn.Sequential()  # a container, so that the digest sees every parameter
    model.add_module("layer", layer)
    model.add_module("head", torch.nn.Linear(D, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    res = Results(args, "random_shapes")
    for _ in range(args.steps):
        res.begin()
        b, n = args.rng.randint(*BATCH), args.rng.randint(*LENGTH)
        lengths = torch.tensor([args.rng.randint(1, n) for _ in range(b)])
        pad = torch.arange(n)[None, :] >= lengths[:, None]  # True: padding
        x = torch.randn(b, n, D).masked_fill(pad[..., None], 0.0)
        target = x.sum(dim=(1, 2)).div(lengths).sin()[:, None]
        opt.zero_grad(set_to_none=True)
        h = model.layer(x, src_key_padding_mask=pad)
        keep = (~pad)[..., None].to(h.dtype)
        pooled = (h * keep).sum(dim=1) / lengths[:, None]
        loss = torch.nn.functional.mse_loss(model.head(pooled), target)
        loss.backward()
        opt.step()
        res.end(loss, [b, n])
    res.write(model)


if __name__ == "__main__":
    main()
