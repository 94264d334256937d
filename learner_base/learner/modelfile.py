"""The trained model as evaluations read it: TorchScript at a fixed place under ``$RESULT_DIR``.

A training job that wants evaluations calls :func:`save_model` at its end. It writes
``$RESULT_DIR/model/model.pt`` (TorchScript: a program of tensor operations and the weights, loaded by
``torch.jit.load`` without unpickling any Python object of the job) and ``model.json`` beside it: the format, the
input shape of one example and the number of classes. The evaluator never imports or runs the job's code.

This module stays stdlib-only for images without torch: torch is imported only when a function here is called.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from learner.atomicfile import replacing, write_text
from learner.paths import result_dir

MODEL_FOLDER = "model"
"""Below ``$RESULT_DIR``: the saved model and its description."""
MODEL_FILE = "model.pt"
DESCRIPTION_FILE = "model.json"
TORCHSCRIPT = "torchscript"


@dataclass(frozen=True)
class ModelDescription:
    """What the evaluator needs besides the weights: how one example is shaped, how many classes come out."""

    format: str
    input_shape: tuple[int, ...]
    classes: int


def save_model(model: Any, input_shape: Sequence[int], classes: int, folder: Path | None = None) -> Path:
    """Save a ``torch.nn.Module`` classifier as TorchScript (traced on one zero example) with its description.

    ``input_shape``: one example's shape without the batch (``[64]``, ``[1, 28, 28]``); ``classes``: the number
    of logits it returns. Both files are written atomically; returns the model file's path. Raises
    ``ValueError`` for a shape or class count that cannot be, ``ModuleNotFoundError`` where torch is missing.
    """
    shape = tuple(int(n) for n in input_shape)
    if not shape or any(n < 1 for n in shape):
        raise ValueError(f"input_shape must be positive sizes, got {list(input_shape)}")
    if isinstance(classes, bool) or not isinstance(classes, int) or classes < 2:
        raise ValueError(f"classes must be a whole number of at least 2, got {classes!r}")
    torch = importlib.import_module("torch")
    target = folder if folder is not None else result_dir() / MODEL_FOLDER
    target.mkdir(parents=True, exist_ok=True)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            program = torch.jit.trace(model, torch.zeros((1, *shape)))
    finally:
        model.train(was_training)
    with replacing(target / MODEL_FILE, suffix=".pt") as temp:  # torch names the archive after the file
        torch.jit.save(program, str(temp))
    description = {"format": TORCHSCRIPT, "input_shape": list(shape), "classes": classes}
    write_text(target / DESCRIPTION_FILE, json.dumps(description) + "\n")
    return target / MODEL_FILE


def read_description(folder: Path) -> ModelDescription:
    """``model.json`` of a saved model; ``ValueError`` naming the file when it is missing or wrong."""
    path = folder / DESCRIPTION_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        description = ModelDescription(
            format=str(raw["format"]),
            input_shape=tuple(int(n) for n in raw["input_shape"]),
            classes=int(raw["classes"]),
        )
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a model description written by learner.save_model ({e})") from e
    if description.format != TORCHSCRIPT:
        raise ValueError(f"{path}: format {description.format!r}; the evaluators read {TORCHSCRIPT!r}")
    return description


def load_model(folder: Path) -> tuple[Any, ModelDescription]:
    """The saved TorchScript program (on the CPU, in eval mode) and its description; never unpickles."""
    description = read_description(folder)
    torch = importlib.import_module("torch")
    program = torch.jit.load(str(folder / MODEL_FILE), map_location="cpu")
    program.eval()
    return program, description
