"""Writes TensorBoard scalars with PyTorch's SummaryWriter into ``<out>/train``: ``loss`` in the legacy
``simple_value`` form (add_scalar's default), ``lr`` tensor-encoded (``new_style=True``), and a histogram the
reader must skip. Runs inside the pytorch learner image.

Usage: python torch_scalars.py OUT [STEPS]
"""

import sys

import torch
from torch.utils.tensorboard import SummaryWriter

out, steps = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 5
writer = SummaryWriter(f"{out}/train")
for step in range(steps):
    writer.add_scalar("loss", 1.0 / (step + 1), step)
    writer.add_scalar("lr", 0.5**step, step, new_style=True)
    writer.add_histogram("weights", torch.randn(16), step)
    writer.flush()
writer.close()
print(f"torch wrote {steps} steps", flush=True)
