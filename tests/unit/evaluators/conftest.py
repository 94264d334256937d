"""Run an evaluator folder's code on the host, as its image would: its spec in the environment, the CSV under
``$DATA_DIR``, the model under ``$MODEL_DIR``, the report under ``$RESULT_DIR`` (needs torch and the evaluator's
libraries, which the dev extra pins)."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from learner.evaluation.runner import main

REPO = Path(__file__).resolve().parents[3]


def evaluator(kind: str) -> ModuleType:
    """``frameworks/<kind>/evaluator/evaluate.py`` as a module of its own name."""
    name = f"evaluator_{kind}"
    if name in sys.modules:
        return sys.modules[name]
    found = importlib.util.spec_from_file_location(name, REPO / "frameworks" / kind / "evaluator" / "evaluate.py")
    assert found is not None and found.loader is not None
    module = importlib.util.module_from_spec(found)
    sys.modules[name] = module
    found.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Job:
    """A job folder's data, model and results, as the evaluator sees them."""

    root: Path

    @property
    def results(self) -> Path:
        return self.root / "result_dir" / "evaluations"

    def write_csv(self, name: str, header: Sequence[str], rows: Any) -> None:
        lines = [",".join(header)] + [",".join(f"{v:.6g}" for v in row) for row in rows]
        (self.root / "data_dir" / name).write_text("\n".join(lines) + "\n", encoding="utf-8")

    def save(self, net: Any, features: int, classes: int) -> None:
        import learner

        learner.save_model(net, [features], classes, folder=self.root / "model_dir")

    def run(self, kind: str, spec: dict[str, Any]) -> int:
        path = self.root / f"{spec['name']}.json"
        path.write_text(json.dumps(spec), encoding="utf-8")
        return main(evaluator(kind).evaluate, ["--spec", str(path)], kind=kind)

    def report(self, name: str) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads((self.results / f"{name}.json").read_text(encoding="utf-8"))
        return loaded


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Job:
    for name in ("DATA_DIR", "MODEL_DIR", "RESULT_DIR"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    (tmp_path / "data_dir").mkdir()
    return Job(tmp_path)


def train(x: Any, y: Any, hidden: int = 16, steps: int = 300, seed: int = 0) -> Any:
    """A small classifier trained full-batch with Adam: deterministic for a seed."""
    import torch

    torch.manual_seed(seed)
    classes = int(y.max()) + 1
    net = torch.nn.Sequential(torch.nn.Linear(x.shape[1], hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, classes))
    optimizer = torch.optim.Adam(net.parameters(), lr=0.03)
    inputs, labels = torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y, dtype=torch.int64)
    for _ in range(steps):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(net(inputs), labels).backward()
        optimizer.step()
    return net.eval()
