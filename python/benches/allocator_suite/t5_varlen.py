"""An encoder-decoder: transformers' T5ForConditionalGeneration built from a small config, AdamW.

The source and target lengths are drawn per step (source 16..128, target
8..64); ids are random; nothing is downloaded.
"""

import torch
from transformers import T5Config, T5ForConditionalGeneration

from _common import Results, arguments, quiet_transformers

VOCAB, BATCH = 1000, 4
SOURCES = tuple(range(16, 129, 16))
TARGETS = tuple(range(8, 65, 8))


def main():
    args = arguments(__doc__.splitlines()[0])
    quiet_transformers()
    cfg = T5Config(vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2,
                   num_heads=4, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    model = T5ForConditionalGeneration(cfg)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    res = Results(args, "t5_varlen")
    for _ in range(args.steps):
        res.begin()
        src, tgt = args.rng.choice(SOURCES), args.rng.choice(TARGETS)
        inputs = torch.randint(2, VOCAB, (BATCH, src))
        labels = torch.randint(2, VOCAB, (BATCH, tgt))
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=inputs, labels=labels).loss
        loss.backward()
        opt.step()
        res.end(loss, [src, tgt])
    res.write(model)


if __name__ == "__main__":
    main()
