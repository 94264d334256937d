"""Smoke evaluation of the explainability image: train a tiny classifier leaning on a planted proxy feature, save
it as TorchScript, explain it.

Writes the data and the model into the job folder, runs the image's evaluator as a job would, and checks its
report: both methods' importance led by the proxy, the share threshold missed naming it, the chart a PNG.
"""

import json
import subprocess
import sys
from pathlib import Path

import torch

import learner


def main() -> int:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    n = 400
    y = torch.randint(0, 2, (n,), generator=generator)
    x = torch.randn((n, 4), generator=generator)
    x[:, 3] = y.float() * 2 - 1 + 0.1 * torch.randn(n, generator=generator)  # the proxy: a near copy of the label
    net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    optimizer = torch.optim.Adam(net.parameters(), lr=0.05)
    for _ in range(100):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        optimizer.step()
    learner.save_model(net, [4], 2, folder=learner.model_dir())

    data = learner.data_dir() / "smoke.csv"
    data.parent.mkdir(parents=True, exist_ok=True)
    rows = ["a,b,c,zip,label"] + [",".join(f"{v:.5f}" for v in row) + f",{int(c)}" for row, c in zip(x.tolist(), y)]
    data.write_text("\n".join(rows) + "\n", encoding="utf-8")
    spec = {
        "kind": "explainability",
        "name": "smoke",
        "data": {"file": "smoke.csv", "label": "label"},
        "methods": ["integrated_gradients", "kernel_shap"],
        "watch": ["zip"],
        "examples": 100,
        "samples": 64,
        "thresholds": [{"method": "kernel_shap", "max_share": 0.3}],
    }
    spec_path = Path("/tmp/smoke-spec.json")
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    done = subprocess.run([sys.executable, "/opt/learner/evaluator/evaluate.py", "--spec", str(spec_path)], check=False)
    if done.returncode != 0:
        print(f"smoke: the evaluator exited {done.returncode}", file=sys.stderr)
        return 1
    folder = learner.result_dir() / "evaluations"
    report = json.loads((folder / "smoke.json").read_text(encoding="utf-8"))
    problems = []
    for method, found in report["metrics"]["methods"].items():
        if found["importance"][0]["feature"] != "zip":
            problems.append(f"{method}: importance led by {found['importance'][0]}, not zip")
    failures = report["failures"]
    if report["verdict"] != "failed" or [(f["metric"], f["at"].get("feature")) for f in failures] != [
        ("feature_share", "zip")
    ]:
        problems.append(f"the share threshold of 0.3 should fail naming zip: {report['verdict']} {failures}")
    if (folder / report["metrics"]["chart"]).read_bytes()[:4] != b"\x89PNG":
        problems.append("the importance chart is not a PNG")
    for problem in problems:
        print(f"smoke: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
