"""mask-and-train in PyTorch: the manual cure for fragmentation, written with tensor_arena.

The loop: a small model (a per-token linear layer and ReLU, mean pooling over each
sequence, a linear classifier, softmax cross-entropy) trained by hand-written
backward passes and SGD, on batches whose shapes vary (the last batch of each epoch
is smaller; the sequence length changes from batch to batch). Every step draws a
dropout mask on the input with ``bernoulli_`` into a leased uint8 buffer, applied
with ``masked_fill_``. Every
temporary (activations, the mask, gradients) is a lease of one planned slab, used
with in-place ops and ``out=``, so a steady step allocates nothing.

``--naive`` runs the same loop, with the same numbers, but allocates every temporary
(the masks included) with ``torch.empty`` each step.

    python python/examples/mask_and_train.py [--device cuda] [--naive] [--steps N]

On CUDA it prints ``torch.cuda.memory_stats()`` allocation counters over the steady
steps; on the CPU it checks that every lease's storage lies inside the slab and
counts allocations with ``torch.profiler`` over the last steps.
"""

import argparse
import math
import time

import torch
from torch.profiler import ProfilerActivity, profile

import tensor_arena as ta

D, H, C = 32, 128, 4  # token features, hidden units, classes
B_MAX, L_MAX = 64, 64  # largest batch and sequence length
KEEP = 0.9  # input keep probability


def make_data(steps, seed, device):
    """Batches of (tokens [B*L, D], one-hot labels [B, C], B, L), made once at startup."""
    g = torch.Generator().manual_seed(seed)
    directions = torch.randn(C, D, generator=g)
    batches = []
    for i in range(steps):
        b = B_MAX if i % 10 != 9 else 23  # the short last batch of a 10-batch epoch
        length = 16 * (1 + (i * 7) % (L_MAX // 16))  # bucketed lengths 16..64
        labels = torch.randint(0, C, (b,), generator=g)
        tokens = torch.randn(b, length, D, generator=g) * 2.0
        tokens += directions[labels].unsqueeze(1) * 0.12  # visible only on average
        onehot = torch.nn.functional.one_hot(labels, C).float()
        batches.append((tokens.reshape(b * length, D).to(device), onehot.to(device), b, length))
    return batches


def declare(planner):
    """The model's buffers: parameters and constants persistent, temporaries by phase."""
    fwd, bwd, upd = planner.phase("forward"), planner.phase("backward"), planner.phase("update")
    f32, u8 = torch.float32, torch.uint8
    n = B_MAX * L_MAX
    bufs = dict(
        w1=planner.persistent("w1", (D, H), f32),
        b1=planner.persistent("b1", (H,), f32),
        w2=planner.persistent("w2", (H, C), f32),
        b2=planner.persistent("b2", (C,), f32),
        inv_keep=planner.persistent("inv_keep", (1,), f32),
        inv_len=planner.persistent("inv_len", (1,), f32),
        inv_batch=planner.persistent("inv_batch", (1,), f32),
        x=planner.span("x", (n, D), f32, fwd, bwd),
        drop=planner.span("drop", (n, D), u8, fwd),
        h=planner.span("h", (n, H), f32, fwd, bwd),
        pooled=planner.span("pooled", (B_MAX, H), f32, fwd, bwd),
        probs=planner.span("probs", (B_MAX, C), f32, fwd, bwd),
        row=planner.span("row", (B_MAX, 2), f32, fwd),
        stats=planner.step("stats", (2,), f32),
        scratch=planner.span("scratch", (B_MAX, C), f32, fwd),
        dlogits=planner.span("dlogits", (B_MAX, C), f32, bwd),
        dpooled=planner.span("dpooled", (B_MAX, H), f32, bwd),
        dh=planner.span("dh", (n, H), f32, bwd),
        relu=planner.span("relu", (n, H), f32, bwd),
        dw1=planner.span("dw1", (D, H), f32, bwd, upd),
        db1=planner.span("db1", (H,), f32, bwd, upd),
        dw2=planner.span("dw2", (H, C), f32, bwd, upd),
        db2=planner.span("db2", (C,), f32, bwd, upd),
    )
    return (fwd, bwd, upd), bufs


class Temps:
    """Where a step's temporaries come from: the arena's step, or torch.empty (--naive)."""

    def __init__(self, step, bufs, device, check=None):
        self.step, self.bufs, self.device, self.check = step, bufs, device, check

    def get(self, name, shape):
        if self.step is None:
            b = self.bufs[name]
            return torch.empty(shape, dtype=b.dtype, device=self.device)
        t = self.step.lease(self.bufs[name], shape)
        if self.check is not None:
            self.check(t)
        return t

    def done(self, *tensors):
        if self.step is not None:
            self.step.release(*tensors)

    def enter(self, phase):
        if self.step is not None:
            self.step.enter(phase)


def train_step(t, p, batch, phases, lr):
    """One step: forward, loss, backward, SGD. Returns (sum of log p[label], hits) as tensors."""
    fwd, bwd, upd = phases
    tokens, onehot, b, length = batch
    rows = b * length
    p["inv_len"].fill_(1.0 / length)
    p["inv_batch"].fill_(1.0 / b)
    # Forward: the batch goes into the planned input buffer, then the input mask.
    x = t.get("x", (rows, D))
    x.copy_(tokens)
    drop = t.get("drop", (rows, D))
    drop.bernoulli_(1.0 - KEEP)  # uint8 0/1: 1 byte per element
    x.masked_fill_(drop.view(torch.bool), 0.0)
    torch.mul(x, p["inv_keep"], out=x)
    h = t.get("h", (rows, H))
    torch.addmm(p["b1"], x, p["w1"], out=h)
    h.relu_()
    pooled = t.get("pooled", (b, H))
    torch.sum(h.view(b, length, H), 1, out=pooled)
    torch.mul(pooled, p["inv_len"], out=pooled)
    probs = t.get("probs", (b, C))
    torch.addmm(p["b2"], pooled, p["w2"], out=probs)
    row = t.get("row", (b, 2))
    rmax, plabel = row[:, 0:1], row[:, 1:2]
    torch.amax(probs, 1, keepdim=True, out=rmax)
    torch.sub(probs, rmax, out=probs)
    probs.exp_()
    torch.sum(probs, 1, keepdim=True, out=plabel)
    probs.div_(plabel)
    # The loss figure and the hits: p[label] against the row's largest p.
    stats = t.get("stats", (2,))
    scratch = t.get("scratch", (b, C))
    torch.mul(probs, onehot, out=scratch)
    torch.sum(scratch, 1, keepdim=True, out=plabel)
    torch.amax(probs, 1, keepdim=True, out=rmax)
    torch.ge(plabel, rmax, out=rmax)
    torch.sum(rmax.reshape(b), 0, keepdim=True, out=stats[1:2])
    plabel.log_()
    torch.sum(plabel.reshape(b), 0, keepdim=True, out=stats[0:1])
    t.done(drop, row, scratch)
    # Backward.
    t.enter(bwd)
    dlogits = t.get("dlogits", (b, C))
    torch.sub(probs, onehot, out=dlogits)
    torch.mul(dlogits, p["inv_batch"], out=dlogits)
    dw2, db2 = t.get("dw2", (H, C)), t.get("db2", (C,))
    torch.matmul(pooled.t(), dlogits, out=dw2)
    torch.sum(dlogits, 0, out=db2)
    dpooled = t.get("dpooled", (b, H))
    torch.matmul(dlogits, p["w2"].t(), out=dpooled)
    torch.mul(dpooled, p["inv_len"], out=dpooled)
    dh = t.get("dh", (rows, H))
    dh.view(b, length, H).copy_(dpooled.unsqueeze(1).expand(b, length, H))
    relu = t.get("relu", (rows, H))
    torch.sign(h, out=relu)
    torch.mul(dh, relu, out=dh)
    dw1, db1 = t.get("dw1", (D, H)), t.get("db1", (H,))
    torch.matmul(x.t(), dh, out=dw1)
    torch.sum(dh, 0, out=db1)
    t.done(x, h, pooled, probs, dlogits, dpooled, dh, relu)
    # Update.
    t.enter(upd)
    for w, g in (("w1", dw1), ("b1", db1), ("w2", dw2), ("b2", db2)):
        p[w].add_(g, alpha=-lr)
    return stats


def run(args):
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    data = make_data(args.steps, args.seed, device)
    planner = ta.Planner()
    phases, bufs = declare(planner)
    plan = planner.plan()
    mode = "naive (torch.empty per temporary)" if args.naive else "arena"
    print(
        f"mask-and-train (PyTorch, {mode}) on {device}, {args.threads} thread(s): "
        f"{args.steps} steps, batch <= {B_MAX}, seed {args.seed}"
    )
    init = {
        "w1": torch.randn(D, H) * math.sqrt(2.0 / D),
        "b1": torch.zeros(H),
        "w2": torch.randn(H, C) * math.sqrt(1.0 / H),
        "b2": torch.zeros(C),
        "inv_keep": torch.full((1,), 1.0 / KEEP),
        "inv_len": torch.ones(1),
        "inv_batch": torch.ones(1),
    }
    arena = None
    if args.naive:
        params = {k: v.to(device) for k, v in init.items()}
    else:
        print(plan)
        arena = plan.reserve(device, checked=args.checked or None)
        params = {k: arena.persistent(bufs[k]) for k in init}
        for k, v in init.items():
            params[k].copy_(v)
    slab = None if arena is None else arena.slab
    lo = None if slab is None else slab.data_ptr()
    checked_leases = [0]

    def inside_slab(tensor):
        # CPU check: same storage as the slab, bytes within its range.
        assert tensor.untyped_storage().data_ptr() == slab.untyped_storage().data_ptr()
        start = tensor.data_ptr()
        assert lo <= start and start + tensor.numel() * tensor.element_size() <= lo + slab.numel()
        checked_leases[0] += 1

    check = inside_slab if (arena is not None and device.type == "cpu") else None
    cuda = device.type == "cuda"
    profiled = max(0, min(args.profile_steps, args.steps - 1)) if device.type == "cpu" else 0
    steady_from = 1  # the first step warms torch's kernels and caches up
    before = None
    started, logged = time.perf_counter(), 0
    total_loss = total_hits = total_n = 0.0
    prof = None
    for i, batch in enumerate(data):
        if cuda and i == steady_from:
            torch.cuda.synchronize()
            before = torch.cuda.memory_stats()
        if profiled and i == args.steps - profiled:
            prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
            prof.__enter__()
        if arena is None:
            stats = train_step(Temps(None, bufs, device), params, batch, phases, args.lr)
            log_p, hits = stats[0].item(), stats[1].item()
        else:
            with arena.step() as s:
                stats = train_step(Temps(s, bufs, device, check), params, batch, phases, args.lr)
                # Read before the step ends: its buffers are the next step's.
                log_p, hits = stats[0].item(), stats[1].item()
        total_loss -= log_p
        total_hits += hits
        total_n += batch[2]
        if (i + 1) % args.log_every == 0 or i + 1 == args.steps:
            now = time.perf_counter()
            rate = (i + 1 - logged) / (now - started)
            note = "  (torch.profiler on)" if prof is not None else ""
            print(
                f"step {i + 1:5d}  loss {total_loss / total_n:.4f}  accuracy {total_hits / total_n:.3f}"
                f"  steps/s {rate:8.1f}{note}"
            )
            total_loss = total_hits = total_n = 0.0
            started, logged = now, i + 1
    if prof is not None:
        prof.__exit__(None, None, None)
        allocs = [e for e in prof.events() if e.cpu_memory_usage > 0]
        print(f"allocations over the last {profiled} steps (torch.profiler, CPU allocator): {len(allocs)}")
    if cuda and before is not None:
        torch.cuda.synchronize()
        after = torch.cuda.memory_stats()
        steady = args.steps - steady_from
        keys = ["allocation.all.allocated", "segment.all.allocated", "num_alloc_retries", "num_ooms"]
        counts = ", ".join(f"{k} +{after.get(k, 0) - before.get(k, 0)}" for k in keys)
        print(f"torch.cuda.memory_stats() over {steady} steady steps: {counts}")
    if arena is not None:
        if check is not None:
            print(f"leases checked: {checked_leases[0]}, every one a view inside the slab (one storage, {slab.numel()} bytes)")
        st = arena.stats()
        print(f"slab allocations: {st['slab_allocations']}; leases {st['total_leases']}, steps {st['steps']}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--naive", action="store_true", help="allocate every temporary each step")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (torch.set_num_threads)")
    ap.add_argument("--log-every", type=int, default=50, help="steps per loss line")
    ap.add_argument("--checked", action="store_true", help="checked mode (guards, NaN poisoning)")
    ap.add_argument("--profile-steps", type=int, default=5, help="CPU: steps counted by torch.profiler")
    args = ap.parse_args()
    raise SystemExit(run(args))


if __name__ == "__main__":
    main()
