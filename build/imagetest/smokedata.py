"""The smoke dataset every framework's smoke training reads: `train.csv`, two Gaussian blobs."""

from __future__ import annotations

import csv
import os
import random
from pathlib import Path

FEATURES = 8


def write_smoke_dataset(folder: Path, rows: int = 512, seed: int = 7) -> Path:
    """Write `folder/train.csv` (header x0..x7,label) atomically; labels 0/1, classes well separated."""
    rng = random.Random(seed)  # noqa: S311 - test data, not secrets
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "train.csv"
    temp = folder / ".train.csv.tmp"
    with temp.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow([*(f"x{i}" for i in range(FEATURES)), "label"])
        for row in range(rows):
            label = row % 2
            centre = 1.0 if label else -1.0
            writer.writerow([*(f"{rng.gauss(centre, 1.0):.6f}" for _ in range(FEATURES)), label])
        handle.flush()
        os.fsync(handle.fileno())
    temp.replace(path)
    return path
