"""Multi-scale CNN training: torchvision's resnet18 (random weights, 10 classes), SGD with momentum.

The image side and the batch are drawn per step from a small fixed set, as
multi-scale training does; images and labels are random tensors made per
step. torchvision's resnet18 has no width knob for its BasicBlock, so the
model is the full-width resnet18 at small image sides.
"""

import torch
import torchvision

from _common import Results, arguments

SIDES = (32, 48, 64, 96)
BATCHES = (2, 4)


def main():
    args = arguments(__doc__.splitlines()[0])
    model = torchvision.models.resnet18(num_classes=10)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    res = Results(args, "resnet_multiscale")
    for _ in range(args.steps):
        res.begin()
        side, batch = args.rng.choice(SIDES), args.rng.choice(BATCHES)
        images = torch.randn(batch, 3, side, side)
        labels = torch.randint(0, 10, (batch,))
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        opt.step()
        res.end(loss, [side, batch])
    res.write(model)


if __name__ == "__main__":
    main()
