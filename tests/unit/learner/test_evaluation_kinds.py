"""An evaluator of a kind the learner helper has no typed spec for: it names its kind and gets a `KindSpec`, judges
with the shared pieces and writes the same report files (docs/evaluations.md, "Declaring a kind")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from learner.evaluation.report import Failure, Report, read_report
from learner.evaluation.runner import Inputs, main
from learner.evaluation.spec import EvaluationData, EvaluationSpec, KindSpec, SpecError, spec_from_dict, spec_to_dict

SPEC = KindSpec(
    "calibrated",
    "calibration",
    EvaluationData("eval.csv", "label"),
    {"levels": [0.9], "thresholds": [{"level": 0.9, "min_coverage": 0.88}]},
)


def test_a_kind_is_taken_only_where_it_is_named() -> None:
    raw = json.loads(json.dumps(spec_to_dict(SPEC)))
    assert raw["levels"] == [0.9] and raw["kind"] == "calibration"
    assert spec_from_dict(raw, known=("calibration",)) == SPEC
    with pytest.raises(SpecError, match="kind: unknown 'calibration'; valid: robustness, fairness"):
        spec_from_dict(raw)


def test_the_evaluator_of_a_new_kind_reads_its_spec_and_writes_its_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("DATA_DIR", "MODEL_DIR", "RESULT_DIR"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    (tmp_path / "data_dir").mkdir()
    (tmp_path / "data_dir" / "eval.csv").write_text("a,label\n1,0\n2,1\n", encoding="utf-8")
    monkeypatch.setenv("EVALUATION_SPEC", json.dumps(spec_to_dict(SPEC)))

    def measure(spec: EvaluationSpec, inputs: Inputs) -> Report:
        assert isinstance(spec, KindSpec)
        (wanted,) = spec.fields["thresholds"]
        coverage = len(inputs.table.rows) / 4
        failures = (Failure("coverage", coverage, f">= {wanted['min_coverage']}", {"level": wanted["level"]}),)
        return Report(spec.name, spec.kind, failures, {"coverage": coverage})

    assert main(measure, [], kind="calibration") == 0
    report = read_report(tmp_path / "result_dir" / "evaluations" / "calibrated.json")
    assert (report.kind, report.verdict, report.metrics) == ("calibration", "failed", {"coverage": 0.5})
    assert "missed: coverage = 0.5000 (level 0.9), threshold >= 0.88" in capsys.readouterr().out
    assert main(measure, []) == 2  # an evaluator that names no kind takes none but the typed ones
    assert "kind: unknown 'calibration'" in capsys.readouterr().err
