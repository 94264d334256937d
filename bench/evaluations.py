"""The robustness evaluation's cost on this machine: scikit-learn's digits, a small PyTorch network, FGSM and PGD
at 4 epsilons each (docs/evaluations.md). Trains the model in the pytorch learner image and evaluates it in the
robustness image, both hardened as in a job; prints the wall time of each and their ratio (the training is the
baseline measured in the same run). The issue's budget: the evaluation within 120 s on 2 cores.

python bench/evaluations.py [--epsilons 0.05 0.1 0.2 0.3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from learner.evaluation.spec import EvaluationData, RobustnessSpec, spec_to_dict
from learnerkit_build.builds.images import build_image
from learnerkit_build.imagetest.containers import LearnerRun, make_job_folder, output_of
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.recipes.pipconfig import BuildOptions, pip_config, resolve_build_inputs

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "examples" / "digits-evaluated" / "model" / "train.py"
BUDGET_S = 120.0
WRITE_DIGITS = (REPO / "examples" / "digits-evaluated" / "write_digits.py").read_text()


def _image(name: str) -> str:
    inputs = resolve_build_inputs(BuildOptions(), pip_config()).inputs
    [spec] = load_matrix(REPO).select([name])
    image_id = build_image(REPO, spec, inputs, lambda line: None).image_id
    if image_id is None:
        raise SystemExit(f"{name} is not built")
    return image_id


def _job(root: Path, name: str) -> Path:
    job = make_job_folder(root / name)
    (job / "control" / "start").write_text("", encoding="utf-8")
    return job


def _timed(image: str, job: Path, command: list[str], env: dict[str, str] | None = None) -> float:
    started = time.monotonic()
    status, logs = output_of(LearnerRun(image, job, command, env=env or {}), timeout=900)
    if status != 0:
        raise SystemExit(f"{' '.join(command)} exited {status}:\n{logs[-2000:]}")
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.05, 0.1, 0.2, 0.3])
    args = parser.parse_args()
    robustness, pytorch = _image("robustness:1.20-cpu"), _image("pytorch:2.13-cpu")
    with tempfile.TemporaryDirectory(prefix="bench-evaluations-") as scratch:
        root = Path(scratch)
        job = _job(root, "train")
        _timed(robustness, job, ["python", "-c", WRITE_DIGITS])
        shutil.copy(TRAIN, job / "model" / "train.py")
        training = _timed(pytorch, job, ["python", "/job/model/train.py"])
        evaluation_job = _job(root, "evaluate")
        shutil.copy(job / "data" / "digits-eval.csv", evaluation_job / "data" / "digits-eval.csv")
        for name in ("model.pt", "model.json"):
            shutil.copy(job / "results" / "model" / name, evaluation_job / "model" / name)
        spec = RobustnessSpec(
            name="bench",
            data=EvaluationData(file="digits-eval.csv", label="label"),
            attacks=("fgsm", "pgd"),
            epsilons=tuple(args.epsilons),
        )
        env = {"EVALUATION_SPEC": json.dumps(spec_to_dict(spec))}
        evaluation = _timed(robustness, evaluation_job, ["python", "/opt/learner/evaluator/evaluate.py"], env)
        report = json.loads((evaluation_job / "results" / "evaluations" / "bench.json").read_text(encoding="utf-8"))
    attacks = len(spec.attacks) * len(spec.epsilons)
    print(f"training (pytorch image, 30 epochs, 1300 digits):   {training:7.1f} s")
    print(
        f"evaluation ({attacks} attack runs on 497 digits):        {evaluation:7.1f} s"
        f"  (in the evaluator: {report['seconds']:.1f} s)"
    )
    print(
        f"evaluation / training: {evaluation / training:.2f}; budget {BUDGET_S:.0f} s: "
        f"{'within' if evaluation <= BUDGET_S else 'OVER'}"
    )


if __name__ == "__main__":
    main()
