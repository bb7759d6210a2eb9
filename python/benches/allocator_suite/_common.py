"""What every loop of the suite shares: its arguments, the results file, the parameter digest.

Nothing here knows of tensor-arena: the loops are ordinary training scripts,
run as they are under torch's own allocator and under ``python -m
tensor_arena.run`` by the suite's runner (``__main__.py``).
"""

import argparse
import hashlib
import json
import os
import random
import time

import torch


def arguments(description, steps=60, **extra):
    """``--steps``, ``--seed``, ``--out`` (else ``$ALLOC_SUITE_OUT``; ``{rank}`` is ``$RANK``), and extras."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--steps", type=int, default=steps, help="optimizer steps")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.environ.get("ALLOC_SUITE_OUT"),
                    help="results JSON (losses, parameter digest, step times); default $ALLOC_SUITE_OUT")
    for name, (kind, default, text) in extra.items():
        ap.add_argument(f"--{name.replace('_', '-')}", type=kind, default=default, help=text)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    args.rng = random.Random(args.seed)  # the per-step draws (shapes, lengths)
    return args


def quiet_transformers():
    from transformers import logging

    logging.set_verbosity_error()  # the notes of a model built from a config, not downloaded


def digest(model):
    """SHA-256 of every parameter's bytes, in order: equal only when the parameters are bit-identical."""
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        p = p.detach()
        p = p.to_local() if hasattr(p, "to_local") else p  # a DTensor (FSDP2): this rank's shard
        h.update(name.encode())
        h.update(p.contiguous().float().numpy().tobytes() if p.dtype == torch.bfloat16 else
                 p.contiguous().numpy().tobytes())
    return h.hexdigest()


class Results:
    """Per-step losses (``float.hex``: exact), wall times and the shapes drawn; written by :meth:`write`."""

    def __init__(self, args, name):
        self.args, self.name = args, name
        self.losses, self.times, self.shapes = [], [], []
        self._t0 = None

    def begin(self):
        self._t0 = time.perf_counter()

    def end(self, loss, shape=None):
        """The step's loss (a float or a 0-d tensor), recorded after the optimizer step."""
        value = loss.item() if isinstance(loss, torch.Tensor) else float(loss)
        self.times.append(time.perf_counter() - self._t0)
        self.losses.append(value.hex())
        self.shapes.append(shape)

    def lap(self, shape=None):
        """The step's wall time alone, for a loop that keeps its losses as tensors (losses set later)."""
        self.times.append(time.perf_counter() - self._t0)
        self.shapes.append(shape)

    def write(self, model, **extra):
        out = self.args.out
        if not out:
            return
        out = out.replace("{rank}", os.environ.get("RANK", "0"))
        record = dict(
            loop=self.name, steps=self.args.steps, seed=self.args.seed, losses=self.losses,
            digest=digest(model), step_times=self.times, shapes=self.shapes,
            torch=torch.__version__, threads=torch.get_num_threads(), **extra,
        )
        with open(out, "w") as f:
            json.dump(record, f)


def tiny_gpt2(positions=256, vocab=512, embd=64, layers=2, heads=2):
    """transformers' GPT2LMHeadModel from a small config, random weights (nothing downloaded)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    quiet_transformers()
    cfg = GPT2Config(vocab_size=vocab, n_positions=positions, n_embd=embd, n_layer=layers, n_head=heads,
                     bos_token_id=vocab - 1, eos_token_id=vocab - 1)
    model = GPT2LMHeadModel(cfg)
    model.train()
    return model
