"""Smoke evaluation of the fairness image: a small data set with planted bias, and a model, judged by AIF360.

The prediction column favours group "a" (60 % favourable) over group "b" (36 %): disparate impact 0.6. The
evaluator must report it and fail the declared threshold naming `disparate_impact`; a saved TorchScript model
is evaluated too (the path without a prediction column).
"""

import json
import subprocess
import sys
from pathlib import Path

import torch

import learner


def run(spec: dict) -> dict:
    path = Path(f"/tmp/{spec['name']}.json")
    path.write_text(json.dumps(spec), encoding="utf-8")
    done = subprocess.run([sys.executable, "/opt/learner/evaluator/evaluate.py", "--spec", str(path)], check=False)
    if done.returncode != 0:
        raise SystemExit(f"smoke: the evaluator exited {done.returncode} on {spec['name']}")
    return json.loads((learner.result_dir() / "evaluations" / f"{spec['name']}.json").read_text(encoding="utf-8"))


def main() -> int:
    rows = ["group,score,label,predicted"]
    for group, favoured in (("a", 60), ("b", 36)):
        rows += [f"{group},{i / 100:.2f},{int(i % 2 == 0)},{int(i < favoured)}" for i in range(100)]
    data = learner.data_dir() / "smoke.csv"
    data.parent.mkdir(parents=True, exist_ok=True)
    data.write_text("\n".join(rows) + "\n", encoding="utf-8")
    common = {
        "kind": "fairness",
        "data": {"file": "smoke.csv", "label": "label", "features": ["score"]},
        "protected_attribute": "group",
        "privileged_groups": ["a"],
        "favourable_label": "1",
    }
    column = run({**common, "name": "smoke", "prediction": "predicted",
                  "thresholds": {"disparate_impact": {"min": 0.8, "max": 1.25}}})
    net = torch.nn.Linear(1, 2)
    learner.save_model(net, [1], 2, folder=learner.model_dir())
    model = run({**common, "name": "smoke-model"})
    problems = []
    impact = column["metrics"]["disparate_impact"]
    if abs(impact - 0.6) > 1e-6 or column["verdict"] != "failed" or column["failures"][0]["metric"] != "disparate_impact":
        problems.append(f"planted bias: {column}")
    if model["verdict"] != "passed" or "statistical_parity_difference" not in model["metrics"]:
        problems.append(f"model: {model}")
    for problem in problems:
        print(f"smoke: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
