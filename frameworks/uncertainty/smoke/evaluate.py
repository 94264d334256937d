"""Smoke evaluation of the uncertainty image: train a tiny classifier on overlapping classes, make it
over-confident (its logits times 5), save it as TorchScript, evaluate its uncertainty.

Writes the data and the model into the job folder, runs the image's evaluator as a job would, and checks its
report: the calibration threshold missed, conformal coverage near its level, selective accuracy rising, the
reliability diagram a PNG.
"""

import json
import subprocess
import sys
from pathlib import Path

import torch

import learner


class Scaled(torch.nn.Module):
    def __init__(self, net: torch.nn.Module, factor: float) -> None:
        super().__init__()
        self.net, self.factor = net, factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x) * self.factor


def main() -> int:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    n = 2000
    y = torch.randint(0, 2, (n,), generator=generator)
    x = torch.randn((n, 2), generator=generator) + (y.float() * 2 - 1).unsqueeze(1) * 0.7
    net = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.Adam(net.parameters(), lr=0.05)
    for _ in range(100):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        optimizer.step()
    learner.save_model(Scaled(net, 5.0), [2], 2, folder=learner.model_dir())

    data = learner.data_dir() / "smoke.csv"
    data.parent.mkdir(parents=True, exist_ok=True)
    rows = ["a,b,label"] + [",".join(f"{v:.5f}" for v in row) + f",{int(c)}" for row, c in zip(x.tolist(), y)]
    data.write_text("\n".join(rows) + "\n", encoding="utf-8")
    spec = {
        "kind": "uncertainty",
        "name": "smoke",
        "data": {"file": "smoke.csv", "label": "label"},
        "bins": 10,
        "level": 0.9,
        "calibration_share": 0.5,
        "rejection_rates": [0.1, 0.5],
        "thresholds": {"expected_calibration_error": {"max": 0.05}},
    }
    spec_path = Path("/tmp/smoke-spec.json")
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    done = subprocess.run([sys.executable, "/opt/learner/evaluator/evaluate.py", "--spec", str(spec_path)], check=False)
    if done.returncode != 0:
        print(f"smoke: the evaluator exited {done.returncode}", file=sys.stderr)
        return 1
    folder = learner.result_dir() / "evaluations"
    report = json.loads((folder / "smoke.json").read_text(encoding="utf-8"))
    metrics = report["metrics"]
    problems = []
    if [f["metric"] for f in report["failures"]] != ["expected_calibration_error"]:
        problems.append(f"the over-confident model should miss the ECE threshold only: {report['failures']}")
    if abs(metrics["coverage"] - 0.9) > 0.05:
        problems.append(f"coverage {metrics['coverage']} at level 0.9")
    selective = [p["accuracy"] for p in metrics["selective"]]
    if not metrics["accuracy"] <= selective[0] <= selective[1]:
        problems.append(f"selective accuracy {selective} does not rise from {metrics['accuracy']}")
    if (folder / metrics["chart"]).read_bytes()[:4] != b"\x89PNG":
        problems.append("the reliability diagram is not a PNG")
    for problem in problems:
        print(f"smoke: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
