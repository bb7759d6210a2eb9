"""PyTorch Lightning's Trainer: a tiny GPT-2 LightningModule, DDP over gloo on the CPU, 2 ranks, validation every 5 steps.

    torchrun --standalone --nproc-per-node 2 lightning_trainer.py --out res-{rank}.json

The Trainer owns the loop (``Trainer.fit`` with ``max_steps``): its strategy
wraps the module in DDP, its optimizer loop calls ``optimizer.step(closure)``
(forward and backward run inside the closure), and every 5 training batches
its validation loop runs 2 batches under ``model.eval()`` and
``torch.no_grad()``. The data is a fixed random token set; Lightning adds the
``DistributedSampler``. Needs ``pip install lightning==2.6.6``.
"""

import os

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

from _common import Results, arguments, tiny_gpt2

VOCAB, BATCH, LENGTH, VAL_EVERY = 512, 4, 64, 5


class LM(L.LightningModule):
    def __init__(self, res):
        super().__init__()
        self.model = tiny_gpt2(vocab=VOCAB)
        self.res, self.eval_losses = res, []

    def training_step(self, batch, _):
        (ids,) = batch
        return self.model(input_ids=ids, labels=ids, use_cache=False).loss

    def validation_step(self, batch, _):
        (ids,) = batch
        self.eval_losses.append(self.model(input_ids=ids, labels=ids, use_cache=False).loss.item().hex())

    def on_train_batch_start(self, batch, batch_idx):
        self.res.begin()

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.res.end(outputs["loss"], [LENGTH])

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def main():
    args = arguments(__doc__.splitlines()[0], val_every=(int, VAL_EVERY, "training batches between validations; "
                                                                         "0: no validation"))
    res = Results(args, "lightning_trainer")
    module = LM(res)  # same seed on every rank: the same initial weights
    world = int(os.environ.get("WORLD_SIZE", "1"))
    gen = torch.Generator().manual_seed(args.seed + 1)
    train = TensorDataset(torch.randint(0, VOCAB, (args.steps * BATCH * world, LENGTH), generator=gen))
    val = TensorDataset(torch.randint(0, VOCAB, (2 * BATCH * world, LENGTH), generator=gen))
    trainer = L.Trainer(
        accelerator="cpu", devices=world, strategy="ddp" if world > 1 else "auto", max_steps=args.steps,
        val_check_interval=args.val_every or None, check_val_every_n_epoch=None,
        limit_val_batches=2 if args.val_every else 0,
        num_sanity_val_steps=0, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, deterministic=True,
    )
    trainer.fit(module, DataLoader(train, batch_size=BATCH), DataLoader(val, batch_size=BATCH))
    res.write(module.model, rank=trainer.global_rank, world_size=world, eval_losses=module.eval_losses)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
