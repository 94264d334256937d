"""A TorchScript model as `learner.save_model` saves it (`model.pt` and `model.json`), run by torch.

`model.json` gives one example's input shape and the number of classes: the model takes `input` (FP32, a batch of
any size first) and answers `logits` (FP32). `torch.jit.load` reads the program and its weights, no pickled
Python object of the job.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from v2protocol import ANY, ModelFailed, Request, Signature, Tensor, TensorSpec

PLATFORM = "pytorch_torchscript"
DESCRIPTION_FILE = "model.json"
FORMAT = "torchscript"


class FormatError(ValueError):
    """The description beside the program is not one `learner.save_model` wrote."""


def classifier(name: str, version: str, input_shape: tuple[int, ...], classes: int) -> Signature:
    """The tensors of a classifier `learner.save_model` saved: `input` and `logits`, a batch first."""
    return Signature(
        name,
        version,
        PLATFORM,
        (TensorSpec("input", "FP32", (ANY, *input_shape)),),
        (TensorSpec("logits", "FP32", (ANY, classes)),),
    )


class TorchScriptModel:
    """The program and its signature; `run` calls it on the one input."""

    def __init__(self, model_file: Path, name: str, version: str) -> None:
        description_file = model_file.with_name(DESCRIPTION_FILE)
        try:
            description = json.loads(description_file.read_text(encoding="utf-8"))
            fmt = description.get("format")
            shape = tuple(int(n) for n in description["input_shape"])
            classes = int(description["classes"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise FormatError(f"{description_file.name}: not written by learner.save_model ({e})") from e
        if fmt != FORMAT:
            raise FormatError(f"{description_file.name}: format {fmt!r}, this server loads {FORMAT}")
        self.signature = classifier(name, version, shape, classes)
        self.program = torch.jit.load(str(model_file), map_location="cpu")
        self.program.eval()

    def run(self, request: Request) -> list[Tensor]:
        (batch,) = request.inputs
        try:
            with torch.inference_mode():
                out = self.program(torch.tensor(batch.values, dtype=torch.float32).reshape(batch.shape))
        except RuntimeError as e:  # torch's error for an operator that failed
            raise ModelFailed(f"{self.signature.name}: the TorchScript program failed: {e}") from e
        return [Tensor("logits", "FP32", tuple(out.shape), out.reshape(-1).tolist())]
