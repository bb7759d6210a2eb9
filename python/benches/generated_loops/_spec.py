"""A random training loop's specification, made from ``(seed, index)`` alone.

:func:`make_spec` draws every choice of loop ``index`` of a generation from a
``random.Random`` seeded with the string ``"generated_loops:{seed}:{index}"``
(Python seeds a string through SHA-512: the same spec on every machine and
interpreter run, whatever ``PYTHONHASHSEED``). The spec is a plain dict (JSON):
the runner records it and the loop script (``_loop.py``) makes it again from the
same two numbers, so nothing but ``(seed, index)`` travels between them.

The family and the shape schedule go round-robin over the index (every 16
consecutive loops hold each pair once); everything else is drawn. Sizes are
capped so that each loop stays small: a few MiB to tens of MiB live, a few
seconds on one CPU thread.
"""

import random

#: The model families: which layers the stack draws from, and the input's domain.
FAMILIES = ("mlp", "conv", "attention", "mixed")
#: How the input's shape changes from step to step.
SCHEDULES = ("fixed", "bucketed", "random", "growing")
#: Where sizes that depend on the data come from (``none``: only the schedule's shapes).
DYNAMIC = ("none", "mask_select", "nonzero", "padding")
#: Tensors the loop keeps across steps.
KEPT = ("none", "loss_history", "outputs")
OPTIMIZERS = ("sgd", "adam", "adamw")

# Tokens (batch x length, or batch x side^2 pixels) of the largest micro-batch, per family:
# the cap that keeps a run within a few seconds and tens of MiB.
TOKEN_CAP = {"mlp": 8192, "conv": 16384, "attention": 4096, "mixed": 4096}
#: Floating-point operations of a whole run at its largest shape (the cost model of
#: ``_flops_per_token``): a second or two of one CPU thread.
FLOP_BUDGET = 3e10
#: Optimizer steps per run, small ones more often.
STEPS = (20, 20, 30, 40, 50, 60, 80, 100, 150, 200)


def make_spec(seed, index):
    """The specification of loop ``index`` of generation ``seed`` (a JSON-able dict)."""
    rng = random.Random(f"generated_loops:{seed}:{index}")
    family = FAMILIES[index % len(FAMILIES)]
    schedule = SCHEDULES[(index // len(FAMILIES)) % len(SCHEDULES)]
    spec = {"seed": seed, "index": index, "family": family, "data_seed": rng.randrange(2**31)}
    spec["steps"] = rng.choice(STEPS)
    spec["accumulation"] = rng.choice((1, 1, 1, 2, 3, 4))
    if family == "conv":
        spec["domain"] = "image"
        spec["channels"] = rng.choice((3, 4, 8))
        spec["width"] = rng.choice((8, 16, 24, 32))
        spec["layers"] = _layers(rng, family)
        lo, hi = rng.choice((8, 12, 16)), rng.choice((16, 24, 32, 48))
        spec["shape"] = _schedule(rng, schedule, batch=(1, 32), length=(lo, hi), step=4, min_length=4,
                                  cap=_token_cap(spec, hi), square=True)
    else:
        spec["domain"] = "sequence"
        spec["width"] = rng.choice((16, 32, 48, 64, 96, 128))
        spec["heads"] = rng.choice((1, 2, 4))
        spec["layers"] = _layers(rng, family)
        lo, hi = rng.choice((8, 16, 32)), rng.choice((64, 96, 128, 192, 256))
        spec["shape"] = _schedule(rng, schedule, batch=(1, 32), length=(lo, hi), step=8, min_length=8,
                                  cap=_token_cap(spec, hi), square=False)
    dynamic = rng.choice(DYNAMIC)
    if dynamic == "padding" and spec["domain"] == "image":
        dynamic = "mask_select"  # images have no lengths to pad
    spec["dynamic"] = dynamic
    spec["keep_ratio"] = round(rng.uniform(0.2, 0.8), 2)  # the share a mask keeps
    if rng.random() < 0.5:
        spec["eval"] = {"every": rng.choice((3, 5, 7, 10)), "batch": rng.choice((1, 2, 3, 48, 64)),
                        "batches": rng.choice((1, 2))}
    else:
        spec["eval"] = None
    spec["kept"] = rng.choice(KEPT)
    spec["kept_every"] = rng.choice((1, 5, 10))
    spec["optimizer"] = rng.choice(OPTIMIZERS)
    spec["lr"] = rng.choice((1e-3, 3e-4)) if spec["optimizer"] != "sgd" else rng.choice((1e-2, 3e-2))
    spec["momentum"] = rng.choice((0.0, 0.9)) if spec["optimizer"] == "sgd" else None
    spec["clip_grad"] = rng.random() < 0.3
    spec["set_to_none"] = rng.random() < 0.8
    return spec


def _schedule(rng, kind, batch, length, step, min_length, cap, square):
    """The shape schedule: its kind and what it draws from; the loop draws each step's shape."""
    def tokens(b, n):
        return b * (n * n if square else n)

    b_lo, b_hi = batch
    n_lo, n_hi = length
    # The largest shape within the cap: the batch halved first, then the length cut.
    while b_hi > b_lo and tokens(b_hi, n_hi) > cap:
        b_hi = max(b_lo, b_hi // 2)
    while n_hi > min_length and tokens(b_hi, n_hi) > cap:
        n_hi -= step
    if n_lo >= n_hi:  # a range to draw from, also for the random and growing schedules
        n_lo = max(min_length, n_hi // 4 // step * step)
    b_lo = rng.randint(b_lo, max(b_lo, b_hi // 2))
    out = {"kind": kind, "batch": [b_lo, b_hi], "length": [n_lo, n_hi], "multiple": step}
    if kind == "fixed":
        out["fixed"] = [rng.randint(b_lo, b_hi), _round(rng.randint(n_lo, n_hi), step, n_lo)]
    elif kind == "bucketed":
        k = rng.randint(2, 5)
        buckets = {(rng.randint(b_lo, b_hi), _round(rng.randint(n_lo, n_hi), step, n_lo)) for _ in range(k)}
        out["buckets"] = [list(x) for x in sorted(buckets)]
    elif kind == "random":
        out["granularity"] = rng.choice((1, step))  # lengths any integer, or multiples of `step`
    else:  # growing
        out["ramp"] = rng.choice(("linear", "stages", "doubling"))
        out["noise"] = rng.random() < 0.5  # the batch drawn per step around the ramp
    return out


def _flops_per_token(spec, length):
    """The forward pass's multiply-adds per token (per pixel for images), roughly: the cost model
    that sizes the batch."""
    w = spec["width"]
    total = 2 * w  # the head
    if spec["domain"] == "image":
        total += 9 * spec["channels"] * w
    for layer in spec["layers"]:
        kind = layer["type"]
        if kind == "linear":
            total += 2 * w * w * layer["expand"]
        elif kind == "conv":
            k = layer["kernel"]
            total += w * w * (k * k if spec["domain"] == "image" else k)
        elif kind == "attention":
            total += 4 * w * w + 2 * length * w + (4 * w * w if layer["block"] == "encoder_layer" else 0)
        else:
            total += 8 * w
    return total


def _token_cap(spec, length):
    """Tokens of the largest micro-batch so that the whole run stays within ``FLOP_BUDGET``
    (training about 3x the forward pass), and within the family's ``TOKEN_CAP``."""
    per_step = 3 * 2 * _flops_per_token(spec, length) * spec["accumulation"]
    return max(64, min(TOKEN_CAP[spec["family"]], int(FLOP_BUDGET / (per_step * spec["steps"]))))


def _round(n, multiple, floor):
    return max(floor, n // multiple * multiple)


def _layers(rng, family):
    """The stack of layers: each a dict with its type and options; the loop builds them in order."""
    depth = rng.randint(1, 4)
    if family == "mlp":
        kinds = ("linear", "linear", "norm")
    elif family == "conv":
        kinds = ("conv", "conv", "norm", "linear")
    elif family == "attention":
        kinds = ("attention", "linear", "norm")
    else:
        kinds = ("linear", "conv", "attention", "norm")
    layers = []
    for i in range(depth):
        kind = rng.choice(kinds)
        if family == "attention" and i == 0:
            kind = "attention"  # the family's own layer at least once
        if family == "mixed" and i == depth - 1 and not any(x["type"] == "attention" for x in layers):
            kind = "attention"
        layer = {"type": kind}
        if kind == "linear":
            layer["expand"] = rng.choice((1, 2, 4))
            layer["act"] = rng.choice(("relu", "gelu", "silu"))
            layer["dropout"] = rng.choice((0.0, 0.0, 0.1))
        elif kind == "conv":
            layer["kernel"] = rng.choice((1, 3, 5))
            layer["act"] = rng.choice(("relu", "gelu"))
        elif kind == "attention":
            layer["block"] = rng.choice(("mha", "encoder_layer"))
            layer["causal"] = rng.random() < 0.3
        else:
            layer["norm"] = rng.choice(("batch", "group")) if family == "conv" else rng.choice(("layer", "rms"))
        layers.append(layer)
    return layers


def describe(spec):
    """One line: the family and its layers, the shapes, the dynamic sizes, and the loop's habits."""
    s = spec["shape"]
    if s["kind"] == "fixed":
        shape = f"fixed {s['fixed'][0]}x{s['fixed'][1]}"
    elif s["kind"] == "bucketed":
        shape = "buckets " + ",".join(f"{b}x{n}" for b, n in s["buckets"])
    elif s["kind"] == "random":
        shape = f"random B {s['batch'][0]}..{s['batch'][1]} N {s['length'][0]}..{s['length'][1]}"
    else:
        shape = f"growing ({s['ramp']}{', noisy batch' if s['noise'] else ''}) N {s['length'][0]}->{s['length'][1]}"
    side = "side" if spec["domain"] == "image" else "len"
    layers = "+".join(x.get("block", x.get("norm", x["type"])) for x in spec["layers"])
    parts = [f"{spec['family']} w{spec['width']} [{layers}]", f"{shape} ({side})"]
    if spec["dynamic"] != "none":
        parts.append(spec["dynamic"])
    if spec["accumulation"] > 1:
        parts.append(f"accum {spec['accumulation']}")
    if spec["eval"]:
        e = spec["eval"]
        parts.append(f"eval/{e['every']} B{e['batch']}x{e['batches']}")
    if spec["kept"] != "none":
        parts.append(f"keeps {spec['kept']}/{spec['kept_every']}")
    parts.append(f"{spec['optimizer']}, {spec['steps']} steps")
    return ", ".join(parts)
