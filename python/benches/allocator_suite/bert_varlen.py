"""A variable-length encoder: transformers' BertForMaskedLM built from a small config, AdamW.

The sequence length is drawn per step from 16..256 (multiples of 16); 15% of
the tokens are masked and predicted. Token ids are random; nothing is
downloaded.
"""

import torch
from transformers import BertConfig, BertForMaskedLM

from _common import Results, arguments, quiet_transformers

VOCAB, BATCH, MASK_ID = 1000, 4, 3
LENGTHS = tuple(range(16, 257, 16))


def main():
    args = arguments(__doc__.splitlines()[0])
    quiet_transformers()
    cfg = BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=128, max_position_embeddings=256)
    model = BertForMaskedLM(cfg)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    res = Results(args, "bert_varlen")
    for _ in range(args.steps):
        res.begin()
        n = args.rng.choice(LENGTHS)
        ids = torch.randint(5, VOCAB, (BATCH, n))
        masked = torch.rand(BATCH, n) < 0.15
        labels = torch.where(masked, ids, torch.full_like(ids, -100))
        inputs = torch.where(masked, torch.full_like(ids, MASK_ID), ids)
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=inputs, labels=labels).loss
        loss.backward()
        opt.step()
        res.end(loss, [n])
    res.write(model)


if __name__ == "__main__":
    main()
