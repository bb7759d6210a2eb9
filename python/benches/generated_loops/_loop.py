"""One generated training loop: ``python _loop.py --seed S --index I [--steps N] --out RESULTS.json``.

An ordinary torch script (it knows nothing of tensor-arena): it makes the spec
of loop ``I`` of generation ``S`` again (``_spec.make_spec``), builds the
model, runs the loop on the CPU and writes its losses (``float.hex``, exact),
eval losses, a digest of the final state (every parameter and buffer, and the
tensors the loop kept) and its per-step shapes and wall times. The runner
(``__main__.py``) runs it once as it is and once under ``python -m
tensor_arena.run``, and compares the two files.
"""

import argparse
import hashlib
import json
import random
import statistics
import sys
import time

import torch
from torch import nn
from torch.nn import functional as F

from _spec import TOKEN_CAP, make_spec

ACTS = {"relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU}


class Residual(nn.Module):
    """``h + f(h)`` for the sequence layers, with the attention's masks passed through."""

    def __init__(self, layer, width, heads):
        super().__init__()
        self.kind = layer["type"]
        self.causal = layer.get("causal", False)
        if self.kind == "linear":
            hidden = width * layer["expand"]
            self.f = nn.Sequential(nn.Linear(width, hidden), ACTS[layer["act"]](), nn.Dropout(layer["dropout"]),
                                   nn.Linear(hidden, width))
        elif self.kind == "conv":
            self.f = nn.Conv1d(width, width, layer["kernel"], padding=layer["kernel"] // 2)
            self.act = ACTS[layer["act"]]()
        elif self.kind == "attention" and layer["block"] == "mha":
            self.f = nn.MultiheadAttention(width, heads, batch_first=True)
        elif self.kind == "attention":
            self.f = nn.TransformerEncoderLayer(width, heads, dim_feedforward=2 * width, dropout=0.0,
                                                batch_first=True)
        else:
            self.f = nn.LayerNorm(width) if layer["norm"] == "layer" else nn.RMSNorm(width)

    def forward(self, h, pad):
        if self.kind == "linear":
            return h + self.f(h)
        if self.kind == "conv":
            return h + self.act(self.f(h.transpose(1, 2))).transpose(1, 2)
        if self.kind == "norm":
            return self.f(h)
        n = h.shape[1]
        causal = torch.ones(n, n, dtype=torch.bool).triu(1) if self.causal else None
        if isinstance(self.f, nn.MultiheadAttention):
            return h + self.f(h, h, h, key_padding_mask=pad, attn_mask=causal, need_weights=False)[0]
        return self.f(h, src_mask=causal, src_key_padding_mask=pad)


class SequenceModel(nn.Module):
    def __init__(self, spec):
        super().__init__()
        w = spec["width"]
        self.blocks = nn.ModuleList(Residual(layer, w, spec["heads"]) for layer in spec["layers"])
        self.head = nn.Linear(w, 1)

    def forward(self, x, pad=None):
        h = x
        for block in self.blocks:
            h = block(h, pad)
        return self.head(h).squeeze(-1)


class ImageModel(nn.Module):
    def __init__(self, spec):
        super().__init__()
        w = spec["width"]
        self.stem = nn.Conv2d(spec["channels"], w, 3, padding=1)
        self.blocks = nn.ModuleList()
        for layer in spec["layers"]:
            if layer["type"] == "conv":
                k = layer["kernel"]
                self.blocks.append(nn.Sequential(nn.Conv2d(w, w, k, padding=k // 2), ACTS[layer["act"]]()))
            elif layer["type"] == "linear":
                self.blocks.append(nn.Linear(w, w * layer["expand"]))
                self.blocks.append(nn.Linear(w * layer["expand"], w))
            else:
                self.blocks.append(nn.BatchNorm2d(w) if layer["norm"] == "batch" else nn.GroupNorm(4, w))
        self.head = nn.Conv2d(w, 1, 1)

    def forward(self, x, pad=None):
        h = self.stem(x)
        blocks = list(self.blocks)
        i = 0
        while i < len(blocks):
            b = blocks[i]
            if isinstance(b, nn.Linear):  # a 1x1 mixing of channels, channels-last, residual
                up, down = blocks[i], blocks[i + 1]
                h = h + down(F.gelu(up(h.permute(0, 2, 3, 1)))).permute(0, 3, 1, 2)
                i += 2
                continue
            h = b(h) if not isinstance(b, nn.Sequential) else h + b(h)
            i += 1
        return self.head(h).squeeze(1)


class Shapes:
    """Each micro-batch's (batch, length or side), drawn by the spec's schedule from the loop's rng."""

    def __init__(self, spec, rng):
        self.s, self.rng, self.steps = spec["shape"], rng, spec["steps"]

    def draw(self, step):
        s, rng = self.s, self.rng
        (b_lo, b_hi), (n_lo, n_hi) = s["batch"], s["length"]
        kind = s["kind"]
        if kind == "fixed":
            return tuple(s["fixed"])
        if kind == "bucketed":
            return tuple(rng.choice(s["buckets"]))
        if kind == "random":
            g = s["granularity"]
            return rng.randint(b_lo, b_hi), max(n_lo, rng.randint(n_lo, n_hi) // g * g)
        p = step / max(1, self.steps - 1)
        if s["ramp"] == "linear":
            n = n_lo + (n_hi - n_lo) * p
        elif s["ramp"] == "stages":
            n = n_lo + (n_hi - n_lo) * min(3, int(p * 4)) / 3
        else:
            levels = [n_lo]
            while levels[-1] * 2 <= n_hi:
                levels.append(levels[-1] * 2)
            n = levels[min(len(levels) - 1, int(p * len(levels)))]
        m = s["multiple"]
        n = max(n_lo, int(n) // m * m)
        b = rng.randint(b_lo, b_hi) if s["noise"] else b_hi
        return b, n


class Loop:
    def __init__(self, spec):
        self.spec = spec
        torch.manual_seed(spec["data_seed"])
        self.rng = random.Random(spec["data_seed"])
        self.image = spec["domain"] == "image"
        self.model = ImageModel(spec) if self.image else SequenceModel(spec)
        self.model.train()
        params = self.model.parameters()
        if spec["optimizer"] == "sgd":
            self.opt = torch.optim.SGD(params, lr=spec["lr"], momentum=spec["momentum"])
        elif spec["optimizer"] == "adam":
            self.opt = torch.optim.Adam(params, lr=spec["lr"])
        else:
            self.opt = torch.optim.AdamW(params, lr=spec["lr"])
        self.shapes = Shapes(spec, self.rng)
        # The mask's threshold on a standard normal value: keeps about `keep_ratio` of the elements.
        self.cut = statistics.NormalDist().inv_cdf(1 - spec["keep_ratio"])

    def batch(self, b, n):
        """The input, the target, the padding mask (or None) of one micro-batch."""
        spec = self.spec
        if self.image:
            x = torch.randn(b, spec["channels"], n, n)
            return x, x.mean(dim=1).sin(), None
        x = torch.randn(b, n, spec["width"])
        pad = None
        if spec["dynamic"] == "padding":
            lengths = torch.tensor([self.rng.randint(1, n) for _ in range(b)])
            pad = torch.arange(n)[None, :] >= lengths[:, None]  # True: padding
            x = x.masked_fill(pad[..., None], 0.0)
        return x, x.mean(dim=-1).mul(3).sin(), pad

    def loss(self, x, target, pad):
        spec, model = self.spec, self.model
        dynamic = spec["dynamic"]
        if dynamic == "mask_select" and spec["family"] == "mlp":
            # The article's selection: the kept values (a count known only from the mask), cut to
            # whole rows of features, as one sequence.
            kept = x[torch.randn(x.shape) > self.cut]
            w = spec["width"]
            rows = kept[: kept.numel() // w * w].view(1, -1, w)
            if rows.shape[1] == 0:
                rows = x[:1, :1]
            pred = model(rows)
            return F.mse_loss(pred, rows.mean(dim=-1).mul(3).sin()), pred
        pred = model(x, pad)
        if dynamic == "padding":
            valid = ~pad
            return F.mse_loss(pred[valid], target[valid]), pred
        if dynamic == "mask_select":
            sel = torch.randn(pred.shape) > self.cut
            sel.view(-1)[0] = True  # never an empty selection
            return F.mse_loss(pred[sel], target[sel]), pred
        if dynamic == "nonzero":
            score = x[:, 0] if self.image else x[..., 0]
            idx = (score > self.cut).reshape(-1).nonzero().squeeze(1)
            if idx.numel() == 0:
                idx = torch.zeros(1, dtype=torch.long)
            picked = pred.reshape(-1).index_select(0, idx)
            return F.mse_loss(picked, target.reshape(-1).index_select(0, idx)), pred
        return F.mse_loss(pred, target), pred

    def evaluate(self, step):
        e = self.spec["eval"]
        cap = 2 * TOKEN_CAP[self.spec["family"]]
        losses = []
        self.model.eval()
        with torch.no_grad():
            for _ in range(e["batches"]):
                _, n = self.shapes.draw(step)
                b = e["batch"]
                while b > 1 and b * (n * n if self.image else n) > cap:
                    b //= 2
                x, target, pad = self.batch(b, n)
                loss, _ = self.loss(x, target, pad)
                losses.append(loss.item().hex())
        self.model.train()
        return losses

    def run(self, steps):
        spec, opt, model = self.spec, self.opt, self.model
        losses, eval_losses, times, shapes = [], [], [], []
        history, kept = [], []
        accum = spec["accumulation"]
        for step in range(steps):
            t0 = time.perf_counter()
            if spec["eval"] and step % spec["eval"]["every"] == spec["eval"]["every"] - 1:
                eval_losses += self.evaluate(step)
            opt.zero_grad(set_to_none=spec["set_to_none"])
            total, drawn = None, []
            for _ in range(accum):
                b, n = self.shapes.draw(step)
                drawn.append([b, n])
                x, target, pad = self.batch(b, n)
                loss, pred = self.loss(x, target, pad)
                (loss / accum).backward()
                total = loss.detach() if total is None else total + loss.detach()
            if spec["clip_grad"]:
                nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            mean = total / accum
            if spec["kept"] == "loss_history":
                history.append(mean)  # kept as a tensor, never .item() until the end
            else:
                losses.append(mean.item().hex())
            if spec["kept"] == "outputs" and step % spec["kept_every"] == 0:
                kept.append(pred.detach()[:1].clone())
            times.append(time.perf_counter() - t0)
            shapes.append(drawn)
        if history:
            losses = [t.item().hex() for t in history]
        return losses, eval_losses, times, shapes, kept


def digest(model, kept):
    """SHA-256 of the final state (parameters and buffers, in order) and of the kept tensors."""
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().contiguous().numpy().tobytes())
    for t in kept:
        h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--index", type=int, required=True)
    ap.add_argument("--steps", type=int, default=None, help="override the spec's step count")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    spec = make_spec(args.seed, args.index)
    if args.steps is not None:
        spec["steps"] = args.steps
    loop = Loop(spec)
    losses, eval_losses, times, shapes, kept = loop.run(spec["steps"])
    with open(args.out, "w") as f:
        json.dump({"seed": args.seed, "index": args.index, "steps": spec["steps"], "losses": losses,
                   "eval_losses": eval_losses, "digest": digest(loop.model, kept), "step_times": times,
                   "shapes": shapes, "torch": torch.__version__, "threads": torch.get_num_threads()}, f)


if __name__ == "__main__":
    sys.exit(main())
