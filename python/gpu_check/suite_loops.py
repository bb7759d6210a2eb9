"""The GPU suite's training loops: ordinary training scripts that know nothing of tensor-arena.

::

    python suite_loops.py LOOP --device cuda|cpu [--tiny] [--steps N] [--seed S] --out PATH [--fraction F]

``suite.py`` runs each loop three times, each in a fresh process: as it is
(torch's caching allocator), with ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``,
and under ``python -m tensor_arena.run --device ...``. The script is the same
every time; it only *reads* what is there: the device memory as the driver
sees it, torch's counters, and, when the planned allocator is installed in its
process (the launcher runs the script in the same interpreter), that
allocator's stats after every step (outside the timed part of the step).

Loops (``LOOPS``; sizes at real scale on a GPU, ``--tiny`` on the CPU):

- ``article``: a new random input shape every step (batch and length drawn
  uniformly) and a data-dependent mask, ``x[torch.randn(x.shape) > 0.5]``,
  into an MLP;
- ``gpt2_eval``: transformers' GPT-2 (small: 768 wide, 12 layers, vocabulary
  50257) at a sequence length drawn every step, and every 5 steps an eval pass
  under ``torch.no_grad()`` with another batch size;
- ``bert_varlen``: BERT-base masked LM at a length drawn every step;
- ``resnet_multiscale``: torchvision's resnet50 when installed, else a
  hand-written resnet18-shaped convnet, image side and batch drawn per step;
- ``fixed_shape``: GPT-2 at one fixed batch and length (the case torch's
  caching allocator already serves well);
- ``cudnn_benchmark``: a convnet at a fixed shape with
  ``torch.backends.cudnn.benchmark = True``.

Models are built in code with random weights; nothing is downloaded. On CUDA,
``torch.use_deterministic_algorithms(True, warn_only=True)`` and
``CUBLAS_WORKSPACE_CONFIG=:4096:8`` make the losses comparable bit for bit;
attention is transformers' eager implementation (the fused kernels' backward
passes are not all deterministic) and resnet's adaptive average pool (whose
CUDA backward is not deterministic) is a mean. A kernel without a deterministic
implementation is reported in ``nondeterministic`` (torch's warning), not
hidden. ``cudnn_benchmark`` picks algorithms by timing them, so its losses may
differ between runs of any one allocator; the suite says so beside its row.

``--fraction F`` calls ``torch.cuda.set_per_process_memory_fraction(F)``
before the first allocation (the suite's capacity search); an out-of-memory
error ends the loop and is reported (``oom``), the process exits 0.
"""

import argparse
import json
import os
import random
import statistics
import sys
import threading
import time
import warnings

LOOPS = {
    "article": "new random input shape every step, x[torch.randn(x.shape) > 0.5] into an MLP",
    "gpt2_eval": "GPT-2 at a length drawn every step, an eval pass of another batch size every 5 steps",
    "bert_varlen": "BERT masked LM at a length drawn every step",
    "resnet_multiscale": "resnet, image side and batch drawn every step",
    "fixed_shape": "GPT-2 at one fixed batch and length",
    "cudnn_benchmark": "convnet at a fixed shape, torch.backends.cudnn.benchmark = True",
}
EVAL_EVERY = 5


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("loop", choices=sorted(LOOPS))
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--tiny", action="store_true", help="small sizes (the CPU form)")
    ap.add_argument("--steps", type=int, default=None, help="optimizer steps (default 30, --tiny 12)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True, help="results JSON")
    ap.add_argument("--fraction", type=float, help="torch.cuda.set_per_process_memory_fraction before anything")
    args = ap.parse_args(argv)
    if args.steps is None:
        args.steps = 12 if args.tiny else 30
    return args


# ---- what the script reads --------------------------------------------------------------


class DeviceMemory:
    """Device memory as the driver sees it, sampled every 5 ms on a thread and after every step.

    NVML's per-process figure (``pynvml``, when installed and when the
    process is listed under its own pid), else ``torch.cuda.mem_get_info()``
    (used = total - free, the whole device) against the baseline read before
    the first allocation. ``peak_over_baseline`` is what the run added.
    """

    def __init__(self, torch, device):
        self.torch, self.source, self.peak = torch, None, 0
        self.baseline = self.total = None
        self._stop = threading.Event()
        self._thread = None
        if device != "cuda":
            return
        torch.cuda.init()
        self.total = torch.cuda.get_device_properties(0).total_memory
        self._read = self._mem_get_info
        self.source = "mem_get_info (whole device) - baseline"
        try:
            import pynvml

            pynvml.nvmlInit()
            uuid = str(getattr(torch.cuda.get_device_properties(0), "uuid", "") or "")
            handle = (pynvml.nvmlDeviceGetHandleByUUID(("GPU-" + uuid) if uuid and not uuid.startswith("GPU-") else uuid)
                      if uuid else pynvml.nvmlDeviceGetHandleByIndex(0))
            self._nvml, self._handle = pynvml, handle
            torch.cuda.mem_get_info()  # the context exists, so the process is listed
            if self._nvml_process() is not None:
                self._read = self._nvml_process
                self.source = "NVML, this process - baseline"
        except Exception as e:  # noqa: BLE001 - pynvml absent or refusing: the fallback is named
            self.nvml_error = f"{type(e).__name__}: {e}"
        self.baseline = self._read()
        self.peak = self.baseline

    def _mem_get_info(self):
        free, total = self.torch.cuda.mem_get_info()
        return total - free

    def _nvml_process(self):
        for p in self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handle):
            if p.pid == os.getpid():
                return int(p.usedGpuMemory or 0)
        return None

    def sample(self):
        if self.source is None:
            return
        used = self._read()
        if used is not None and used > self.peak:
            self.peak = used

    def start(self):
        if self.source is None:
            return

        def loop():
            while not self._stop.wait(0.005):
                try:
                    self.sample()
                except Exception:  # noqa: BLE001 - a failed read ends the sampling, never the loop
                    return

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def figures(self):
        if self.source is None:
            return {"source": "n/a (CPU)"}
        return {"source": self.source, "baseline_bytes": self.baseline, "peak_bytes": self.peak,
                "peak_over_baseline_bytes": self.peak - self.baseline, "total_bytes": self.total,
                "nvml_error": getattr(self, "nvml_error", None)}


def planned_allocator():
    """The planned allocator of this process when ``python -m tensor_arena.run`` put one there, else None."""
    module = sys.modules.get("tensor_arena.allocator")
    return getattr(module, "_INSTANCE", None) if module is not None else None


PROBE_KEYS = ("phase", "steps", "replans", "plans", "served_from_plan", "requests_after_warmup",
              "fallback_allocations_last_step", "backing_calls", "backing_calls_last_step")


def probe(alloc):
    if alloc is None:
        return None
    s = alloc.stats()
    return {k: s.get(k) for k in PROBE_KEYS}


# ---- the models --------------------------------------------------------------------------


def quiet_transformers():
    from transformers import logging

    logging.set_verbosity_error()


def gpt2(torch, tiny, device):
    from transformers import GPT2Config, GPT2LMHeadModel

    quiet_transformers()
    if tiny:
        cfg = dict(vocab_size=512, n_positions=128, n_embd=64, n_layer=2, n_head=2)
    else:
        cfg = dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12)
    v = cfg["vocab_size"]
    config = GPT2Config(**cfg, bos_token_id=v - 1, eos_token_id=v - 1, attn_implementation="eager")
    with torch.device(device):
        model = GPT2LMHeadModel(config)
    model.train()
    return model, v


class MeanPool:
    """A deterministic stand-in for adaptive average pooling to 1x1 (its CUDA backward is not)."""

    def __new__(cls, torch):
        class _Mean(torch.nn.Module):
            def forward(self, x):
                return x.mean(dim=(2, 3), keepdim=True)

        return _Mean()


def handwritten_resnet(torch, widths, classes):
    """A resnet18-shaped convnet (BasicBlock x [2, 2, 2, 2]) written here, for machines without torchvision."""
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = nn.BatchNorm2d(cout)
            self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = nn.BatchNorm2d(cout)
            self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else nn.Identity())

        def forward(self, x):
            y = torch.relu(self.b1(self.c1(x)))
            return torch.relu(self.b2(self.c2(y)) + self.skip(x))

    layers = [nn.Conv2d(3, widths[0], 7, 2, 3, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU()]
    cin = widths[0]
    for i, w in enumerate(widths):
        layers += [Block(cin, w, 1 if i == 0 else 2), Block(w, w, 1)]
        cin = w
    layers += [MeanPool(torch), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def vgg_like(torch, widths, classes):
    nn = torch.nn
    layers, cin = [], 3
    for i, w in enumerate(widths):
        layers += [nn.Conv2d(cin, w, 3, 1 if i == 0 else 2, 1), nn.ReLU(), nn.Conv2d(w, w, 3, 1, 1), nn.ReLU()]
        cin = w
    layers += [MeanPool(torch), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


# ---- the loops: each returns (model, step(i) -> (loss, shape), eval(i) -> loss or None) ------


def loop_article(torch, args, dev, rng):
    if args.tiny:
        d, h, batches, lengths = 32, 64, (2, 8), (4, 32)
    else:
        d, h, batches, lengths = 1024, 4096, (8, 64), (128, 2048)
    nn = torch.nn
    model = nn.Sequential(nn.Linear(d, h), nn.GELU(), nn.Linear(h, h), nn.GELU(), nn.Linear(h, h), nn.GELU(),
                          nn.Linear(h, 1)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)

    def step(i):
        b, n = rng.randint(*batches), rng.randint(*lengths)
        x = torch.randn(b, n, d, device=dev)
        kept = x[torch.randn(x.shape, device=dev) > 0.5]  # the article's data-dependent mask
        rows = kept[: kept.numel() // d * d].view(-1, d)
        target = rows.sum(dim=1, keepdim=True).sin()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(rows), target)
        loss.backward()
        opt.step()
        return loss, [b, n, rows.shape[0]]

    return model, step, None, f"MLP {d}-{h}-{h}-{h}-1, batch {batches}, length {lengths} uniform"


def _gpt2_loop(torch, args, dev, rng, lengths, batch, eval_batch, eval_length):
    model, vocab = gpt2(torch, args.tiny, dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device="cpu").manual_seed(args.seed + 1)
    held_out = (torch.randint(0, vocab, (eval_batch, eval_length), generator=gen).to(dev)
                if eval_batch else None)

    def step(i):
        n = rng.choice(lengths)
        ids = torch.randint(0, vocab, (batch, n), device=dev)
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        opt.step()
        return loss, [batch, n]

    def evaluate(i):
        if held_out is None or (i + 1) % EVAL_EVERY:
            return None
        model.eval()
        with torch.no_grad():
            loss = model(input_ids=held_out, labels=held_out, use_cache=False).loss
        model.train()
        return loss

    return model, step, evaluate


def loop_gpt2_eval(torch, args, dev, rng):
    if args.tiny:
        lengths, batch, eb, el = tuple(range(16, 65, 8)), 2, 4, 32
    else:
        lengths, batch, eb, el = tuple(range(128, 1025, 64)), 8, 16, 512
    model, step, ev = _gpt2_loop(torch, args, dev, rng, lengths, batch, eb, el)
    return model, step, ev, f"GPT-2 {'tiny' if args.tiny else 'small (124M)'}, batch {batch}, length " \
                            f"{lengths[0]}..{lengths[-1]}; eval batch {eb} x {el} every {EVAL_EVERY} steps"


def loop_fixed_shape(torch, args, dev, rng):
    batch, length = (2, 32) if args.tiny else (8, 1024)
    model, step, ev = _gpt2_loop(torch, args, dev, rng, (length,), batch, 0, 0)
    return model, step, ev, f"GPT-2 {'tiny' if args.tiny else 'small (124M)'}, batch {batch} x {length}"


def loop_bert_varlen(torch, args, dev, rng):
    from transformers import BertConfig, BertForMaskedLM

    quiet_transformers()
    if args.tiny:
        cfg = dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                   intermediate_size=128, max_position_embeddings=128)
        batch, lengths = 4, tuple(range(16, 65, 8))
    else:
        cfg = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                   intermediate_size=3072, max_position_embeddings=512)
        batch, lengths = 16, tuple(range(64, 513, 32))
    with torch.device(dev):
        model = BertForMaskedLM(BertConfig(**cfg, attn_implementation="eager"))
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    vocab = cfg["vocab_size"]

    def step(i):
        n = rng.choice(lengths)
        ids = torch.randint(5, vocab, (batch, n), device=dev)
        masked = torch.rand(batch, n, device=dev) < 0.15
        labels = torch.where(masked, ids, torch.full_like(ids, -100))
        inputs = torch.where(masked, torch.full_like(ids, 3), ids)
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=inputs, labels=labels).loss
        loss.backward()
        opt.step()
        return loss, [batch, n]

    return model, step, None, f"BERT {'tiny' if args.tiny else 'base'}, batch {batch}, length " \
                              f"{lengths[0]}..{lengths[-1]}"


def loop_resnet_multiscale(torch, args, dev, rng):
    if args.tiny:
        model, what = handwritten_resnet(torch, (4, 8, 16, 32), 10), "hand-written resnet18 shape, widths 4..32"
        sides, batches, classes = (16, 24, 32), (2, 4), 10
    else:
        classes = 1000
        try:
            import torchvision

            model = torchvision.models.resnet50(num_classes=classes)
            model.avgpool = MeanPool(torch)
            what = f"torchvision {torchvision.__version__} resnet50 (average pool as a mean)"
        except ImportError:
            model, what = handwritten_resnet(torch, (64, 128, 256, 512), classes), \
                "hand-written resnet18 shape (torchvision not installed)"
        sides, batches = (128, 160, 192, 224), (32, 64)
    model = model.to(dev).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(i):
        side, b = rng.choice(sides), rng.choice(batches)
        images = torch.randn(b, 3, side, side, device=dev)
        labels = torch.randint(0, classes, (b,), device=dev)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        opt.step()
        return loss, [b, side]

    return model, step, None, f"{what}, sides {sides}, batches {batches}"


def loop_cudnn_benchmark(torch, args, dev, rng):
    torch.backends.cudnn.benchmark = True
    if args.tiny:
        widths, batch, side, classes = (4, 8, 16), 2, 16, 10
    else:
        widths, batch, side, classes = (64, 128, 256), 32, 224, 1000
    model = vgg_like(torch, widths, classes).to(dev).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(i):
        images = torch.randn(batch, 3, side, side, device=dev)
        labels = torch.randint(0, classes, (batch,), device=dev)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        opt.step()
        return loss, [batch, side]

    return model, step, None, f"convnet widths {widths}, batch {batch} x 3 x {side} x {side}, cudnn.benchmark"


# ---- the run -----------------------------------------------------------------------------


def main(argv=None):
    args = parse(argv)
    if args.device == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("suite_loops: --device cuda but torch sees no CUDA device", file=sys.stderr)
        return 2
    caught = []
    warnings.simplefilter("always")
    shown = warnings.showwarning
    warnings.showwarning = lambda m, c, f, l, file=None, line=None: caught.append(f"{c.__name__}: {m}")
    if args.device == "cuda":
        torch.use_deterministic_algorithms(True, warn_only=True)
    alloc = planned_allocator()
    if args.fraction is not None and args.device == "cuda":
        torch.cuda.set_per_process_memory_fraction(args.fraction)
    mem = DeviceMemory(torch, args.device)
    reserved_at_baseline = torch.cuda.memory_reserved() if args.device == "cuda" else None
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    out = {"loop": args.loop, "what": LOOPS[args.loop], "device": args.device, "tiny": args.tiny,
           "steps": args.steps, "seed": args.seed, "fraction": args.fraction, "torch": torch.__version__,
           "pid": os.getpid(), "planned": alloc is not None, "oom": None, "error": None,
           "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
           "reserved_at_baseline": reserved_at_baseline}
    if args.device == "cuda":
        out["gpu"] = torch.cuda.get_device_name(0)
    losses, eval_losses, times, shapes, probes = [], [], [], [], [probe(alloc)]
    mem.start()
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    try:
        model, step, evaluate, out["model"] = globals()[f"loop_{args.loop}"](torch, args, args.device, rng)
        for i in range(args.steps):
            sync()
            t0 = time.perf_counter()
            loss, shape = step(i)
            value = loss.item()
            ev = evaluate(i) if evaluate is not None else None
            ev_value = ev.item() if ev is not None else None
            sync()
            times.append(time.perf_counter() - t0)
            losses.append(value.hex())
            if ev_value is not None:
                eval_losses.append(ev_value.hex())
            shapes.append(shape)
            del loss, ev
            mem.sample()
            probes.append(probe(alloc))
    except torch.OutOfMemoryError as e:
        out["oom"] = {"step": len(losses), "message": str(e).splitlines()[0][:400]}
    finally:
        mem.stop()
    try:
        mem.sample()
    except Exception:  # noqa: BLE001
        pass
    warnings.showwarning = shown
    out.update(losses=losses, eval_losses=eval_losses, step_times=times, shapes=shapes,
               steps_done=len(losses), device_memory=mem.figures(),
               nondeterministic=sorted({w[:300] for w in caught if "determin" in w}))
    window = times[len(times) // 3:] or times
    out["median_step_s"] = statistics.median(window) if window else None
    out["median_window"] = [len(times) // 3, len(times)]
    if args.device == "cuda":
        out["max_memory_reserved"] = torch.cuda.max_memory_reserved()
        out["max_memory_allocated"] = torch.cuda.max_memory_allocated()
    if alloc is not None:
        out["probes"] = probes
        s = alloc.stats()
        out["planned_stats"] = {k: s.get(k) for k in (
            "served_share", "replans", "plans", "fallback_allocations_max_step", "backing_calls",
            "backing_calls_max_steady_step", "steady_steps_with_backing_calls", "device_call_seconds_estimate",
            "peak_reserved_bytes", "peak_live_bytes", "lower_bound_bytes", "map_granularity", "backing",
            "misses", "errors")}
        out["planned_stats"]["caching_model_peak_reserved_bytes"] = (s.get("caching_model") or {}).get(
            "peak_reserved_bytes")
        out["planned_stats"]["expandable_model_peak_reserved_bytes"] = (s.get("expandable_model") or {}).get(
            "peak_reserved_bytes")
    with open(args.out, "w") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
