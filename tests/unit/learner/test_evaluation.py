"""learner.evaluation: thresholds judged into failures naming metric, value and threshold; reports written whole."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from learner.evaluation.report import read_report, write_report
from learner.evaluation.runner import InputError, main, read_table
from learner.evaluation.spec import (
    Bound,
    EvaluationData,
    FairnessSpec,
    RobustnessSpec,
    RobustnessThreshold,
    SpecError,
    spec_from_dict,
    spec_to_dict,
)
from learner.evaluation.verdict import judge_fairness, judge_robustness
from learner.modelfile import read_description

DATA = EvaluationData(file="eval.csv", label="label")
ROBUSTNESS = RobustnessSpec(
    name="digits",
    data=DATA,
    attacks=("fgsm", "pgd"),
    epsilons=(0.1, 0.2),
    thresholds=(RobustnessThreshold("pgd", 0.2, 0.5),),
)
FAIRNESS = FairnessSpec(
    name="credit",
    data=DATA,
    protected_attribute="sex",
    privileged_groups=("male",),
    favourable_label="1",
    thresholds={"disparate_impact": Bound(0.8, 1.25), "equal_opportunity_difference": Bound(-0.1, 0.1)},
)
CURVE = {"fgsm": [(0.1, 0.8), (0.2, 0.6)], "pgd": [(0.1, 0.7), (0.2, 0.4)]}


def test_a_missed_robustness_threshold_names_metric_value_threshold_and_where() -> None:
    report = judge_robustness(ROBUSTNESS, 0.95, CURVE, 1.0)
    assert report.verdict == "failed"
    (failure,) = report.failures
    assert (failure.metric, failure.value, failure.threshold) == ("adversarial_accuracy", 0.4, ">= 0.5")
    assert dict(failure.at) == {"attack": "pgd", "epsilon": 0.2}
    passed = judge_robustness(ROBUSTNESS, 0.95, {**CURVE, "pgd": [(0.1, 0.7), (0.2, 0.5)]}, 1.0)
    assert passed.verdict == "passed" and passed.failures == ()


def test_fairness_thresholds_fail_naming_the_metric_and_undefined_values_fail_too() -> None:
    metrics = {"disparate_impact": 0.6, "statistical_parity_difference": -0.2, "equal_opportunity_difference": math.nan}
    report = judge_fairness(FAIRNESS, metrics, {"privileged": {"rows": 10}}, 0.5)
    assert [(f.metric, f.threshold) for f in report.failures] == [
        ("disparate_impact", ">= 0.8 and <= 1.25"),
        ("equal_opportunity_difference", ">= -0.1 and <= 0.1"),
    ]
    assert report.failures[0].value == 0.6
    assert report.metrics["equal_opportunity_difference"] is None


def test_report_json_and_summary_are_written_and_read_back(tmp_path: Path) -> None:
    report = judge_robustness(ROBUSTNESS, 0.95, CURVE, 1.0)
    path = write_report(tmp_path, report)
    assert path == tmp_path / "evaluations" / "digits.json"
    assert read_report(path) == report
    summary = (tmp_path / "evaluations" / "digits.txt").read_text(encoding="utf-8")
    assert (
        "FAILED" in summary and "adversarial_accuracy = 0.4000 (attack pgd, epsilon 0.2), threshold >= 0.5" in summary
    )
    assert "epsilon 0.2      accuracy 0.6000" in summary
    assert not [p for p in (tmp_path / "evaluations").iterdir() if p.name.startswith(".tmp-")]
    fairness = judge_fairness(FAIRNESS, {"disparate_impact": math.nan}, {}, 0.1)
    raw = json.loads(write_report(tmp_path, fairness).read_text(encoding="utf-8"))
    assert raw["failures"][0]["value"] is None  # JSON has no NaN
    assert "disparate_impact: undefined" in (tmp_path / "evaluations" / "credit.txt").read_text(encoding="utf-8")


def test_spec_round_trip_and_bad_documents_name_the_field() -> None:
    for spec in (ROBUSTNESS, FAIRNESS):
        assert spec_from_dict(json.loads(json.dumps(spec_to_dict(spec)))) == spec
    raw = spec_to_dict(ROBUSTNESS)
    with pytest.raises(SpecError, match="attacks: unknown cw"):
        spec_from_dict({**raw, "attacks": ["cw"]})
    with pytest.raises(SpecError, match="'epsilons'"):
        spec_from_dict({key: value for key, value in raw.items() if key != "epsilons"})
    with pytest.raises(SpecError, match="kind: unknown 'eval'"):
        spec_from_dict({**raw, "kind": "eval"})


def test_csv_problems_name_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "eval.csv"
    path.write_text("a,label\n1,0\n2\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"eval.csv:3: 1 cells, the header has 2"):
        read_table(path)
    path.write_text("a,label\n1,0\nx,1\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"eval.csv:3: not a number"):
        read_table(path).numbers(["a"])
    with pytest.raises(InputError, match="no column 'b'"):
        read_table(path).column("b")


def test_the_evaluator_command_exits_2_naming_what_it_cannot_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("DATA_DIR", "MODEL_DIR", "RESULT_DIR"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    (tmp_path / "data_dir").mkdir()
    (tmp_path / "data_dir" / "eval.csv").write_text("a,label\n1,0\n", encoding="utf-8")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(spec_to_dict(ROBUSTNESS)), encoding="utf-8")

    def measure(spec: object, inputs: object) -> object:
        read_description(tmp_path / "model_dir")  # no model saved
        raise AssertionError("unreachable")

    assert main(measure, ["--spec", str(spec)]) == 2  # type: ignore[arg-type]
    assert "model.json: not a model description" in capsys.readouterr().err
    assert main(measure, []) == 2  # type: ignore[arg-type]
    assert "no evaluation spec" in capsys.readouterr().err
    assert not (tmp_path / "result_dir").exists()


def test_reports_are_readable_by_other_users(tmp_path: Path) -> None:
    """mkstemp's 0600 kept the report from the sidecar and the evaluator of another pair."""
    path = write_report(tmp_path, judge_robustness(ROBUSTNESS, 0.95, CURVE, 1.0))
    assert path.stat().st_mode & 0o044 == 0o044
    assert path.with_suffix(".txt").stat().st_mode & 0o044 == 0o044
