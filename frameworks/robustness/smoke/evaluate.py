"""Smoke evaluation of the robustness image: train a tiny classifier, save it as TorchScript, attack it.

Writes the data and the model into the job folder, runs the image's evaluator as a job would, and checks its
report: every attack at every epsilon, accuracy never rising with epsilon, a failed threshold named.
"""

import json
import subprocess
import sys
from pathlib import Path

import torch

import learner

EPSILONS = [0.05, 0.1, 0.5, 1.0]


def main() -> int:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    n = 400
    y = torch.randint(0, 2, (n,), generator=generator)
    x = torch.randn((n, 4), generator=generator) * 0.6 + (y.float() * 2 - 1).unsqueeze(1)
    net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    optimizer = torch.optim.Adam(net.parameters(), lr=0.05)
    for _ in range(100):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        optimizer.step()
    learner.save_model(net, [4], 2, folder=learner.model_dir())

    data = learner.data_dir() / "smoke.csv"
    data.parent.mkdir(parents=True, exist_ok=True)
    rows = ["a,b,c,d,label"] + [",".join(f"{v:.5f}" for v in row) + f",{int(c)}" for row, c in zip(x.tolist(), y)]
    data.write_text("\n".join(rows) + "\n", encoding="utf-8")
    spec = {
        "kind": "robustness",
        "name": "smoke",
        "data": {"file": "smoke.csv", "label": "label"},
        "attacks": ["fgsm", "pgd"],
        "epsilons": EPSILONS,
        "pgd_steps": 5,
        "thresholds": [{"attack": "pgd", "epsilon": 1.0, "min_accuracy": 0.99}],
    }
    spec_path = Path("/tmp/smoke-spec.json")
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    done = subprocess.run([sys.executable, "/opt/learner/evaluator/evaluate.py", "--spec", str(spec_path)], check=False)
    if done.returncode != 0:
        print(f"smoke: the evaluator exited {done.returncode}", file=sys.stderr)
        return 1
    report = json.loads((learner.result_dir() / "evaluations" / "smoke.json").read_text(encoding="utf-8"))
    problems = []
    if report["metrics"]["clean_accuracy"] < 0.9:
        problems.append(f"clean accuracy {report['metrics']['clean_accuracy']}")
    for attack in ("fgsm", "pgd"):
        points = report["metrics"]["curve"][attack]
        accuracies = [p["accuracy"] for p in points]
        if [p["epsilon"] for p in points] != EPSILONS or accuracies != sorted(accuracies, reverse=True):
            problems.append(f"{attack} curve {points}")
    if report["verdict"] != "failed" or report["failures"][0]["metric"] != "adversarial_accuracy":
        problems.append(f"the threshold of 0.99 at epsilon 1.0 should fail: {report['verdict']} {report['failures']}")
    for problem in problems:
        print(f"smoke: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
