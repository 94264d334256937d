"""The manifest's `evaluations:` section: typed, checked at parse, every problem naming its field and line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from learner.evaluation.spec import Bound, FairnessSpec, RobustnessSpec, RobustnessThreshold, spec_from_dict
from learnerkit.scheduler.errors import ManifestError
from learnerkit.scheduler.manifest.evaluations import load_evaluations
from learnerkit.scheduler.manifest.parser import parse_manifest
from tests.unit.scheduler.manifest.test_manifest import BASE, CATALOG

SECTION = """\
evaluations:
  - name: digits-robustness
    kind: robustness
    data: {file: eval/digits.csv, label: label}
    attacks: [fgsm, pgd]
    epsilons: [0.3, 0.05, 0.1, 0.2]
    pgd_steps: 7
    thresholds:
      - {attack: pgd, epsilon: 0.1, min_accuracy: 0.5}
  - name: credit-fairness
    kind: fairness
    data: {store: store, container: data/eval, file: credit.csv, label: credit, features: [age, amount]}
    protected_attribute: sex
    privileged_groups: [male, 1]
    favourable_label: 1
    prediction: predicted
    thresholds:
      disparate_impact: {min: 0.8, max: 1.25}
      equal_opportunity_difference: {min: -0.1}
"""


def problems(text: str) -> list[str]:
    with pytest.raises(ManifestError) as caught:
        parse_manifest(text, catalog=CATALOG)
    return [str(p) for p in caught.value.problems]


def test_section_becomes_typed_specs() -> None:
    job = parse_manifest(BASE + SECTION, catalog=CATALOG)
    robustness, fairness = job.evaluations
    assert isinstance(robustness, RobustnessSpec) and isinstance(fairness, FairnessSpec)
    assert robustness.epsilons == (0.05, 0.1, 0.2, 0.3)
    assert robustness.pgd_steps == 7
    assert robustness.thresholds == (RobustnessThreshold("pgd", 0.1, 0.5),)
    assert robustness.data.store is None and robustness.data.features == ()
    assert fairness.privileged_groups == ("male", "1")
    assert fairness.favourable_label == "1"
    assert fairness.thresholds == {
        "disparate_impact": Bound(0.8, 1.25),
        "equal_opportunity_difference": Bound(-0.1, None),
    }
    assert fairness.data.container == "data/eval"


def test_spec_goes_to_json_and_back_unchanged() -> None:
    job = parse_manifest(BASE + SECTION, catalog=CATALOG)
    raw = json.loads(json.dumps(job.to_dict()))
    assert tuple(spec_from_dict(item) for item in raw["evaluations"]) == job.evaluations


def test_a_manifest_without_the_section_has_no_evaluations() -> None:
    job = parse_manifest(BASE, catalog=CATALOG)
    assert job.evaluations == ()
    assert job.to_dict()["evaluations"] == []


def test_a_value_that_looks_like_code_is_just_a_string() -> None:
    code = '__import__("os").system("touch /tmp/pwned")'
    text = SECTION.replace("protected_attribute: sex", f"protected_attribute: '{code}'")
    job = parse_manifest(BASE + text, catalog=CATALOG)
    fairness = job.evaluations[1]
    assert isinstance(fairness, FairnessSpec)
    assert fairness.protected_attribute == code
    assert not Path("/tmp/pwned").exists()


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("kind: robustness", "kind: evasion", "evaluations[0].kind: unknown value 'evasion'; valid: robustness"),
        ("attacks: [fgsm, pgd]", "attacks: [fgsm, cw]", "evaluations[0].attacks[1]: unknown attack 'cw'"),
        ("epsilons: [0.3, 0.05, 0.1, 0.2]", "epsilons: [0.3, '0.1']", "evaluations[0].epsilons[1]: expected a number"),
        ("epsilons: [0.3, 0.05, 0.1, 0.2]", "epsilons: [0.3, -1]", "evaluations[0].epsilons[1]: expected a number"),
        ("pgd_steps: 7", "pgd_steps: 0", "evaluations[0].pgd_steps: must be at least 1"),
        ("epsilon: 0.1, min_accuracy", "epsilon: 0.15, min_accuracy", "thresholds[0].epsilon: 0.15 is not among"),
        ("min_accuracy: 0.5", "min_accuracy: 50", "thresholds[0].min_accuracy: must be between 0 and 1; got 50"),
        ("- {attack: pgd,", "- {attack: fgsm, bogus: 1,", "thresholds[0].bogus: unknown key 'bogus'"),
        ("data: {file: eval/digits.csv, label: label}", "data: {file: ../digits.csv, label: label}", "data.file"),
        (
            "data: {file: eval/digits.csv, label: label}",
            "data: {file: digits.csv}",
            "evaluations[0].data.label: required",
        ),
        ("store: store,", "store: elsewhere,", "evaluations[1].data.store: no data store has the id 'elsewhere'"),
        ("privileged_groups: [male, 1]", "privileged_groups: []", "evaluations[1].privileged_groups: required"),
        ("favourable_label: 1", "favourable_label: 0.5", "evaluations[1].favourable_label: expected a string"),
        ("disparate_impact: {min: 0.8, max: 1.25}", "disparate_impact: {min: 2, max: 1}", "min 2 is above max 1"),
        ("disparate_impact: {min", "accuracy: {min", "evaluations[1].thresholds.accuracy: unknown key 'accuracy'"),
        (
            "disparate_impact: {min: 0.8, max: 1.25}",
            "disparate_impact: {min: '0.8'}",
            "thresholds.disparate_impact.min",
        ),
        ("protected_attribute: sex", "protected_attribute: age", "'age' is a feature too"),
        ("name: credit-fairness", "name: digits-robustness", "duplicate evaluation name 'digits-robustness'"),
        ("name: credit-fairness", "name: Credit_Fairness", "evaluations[1].name: 'Credit_Fairness' is not valid"),
    ],
)
def test_bad_values_are_refused_naming_the_field_and_line(old: str, new: str, expected: str) -> None:
    assert old in SECTION, old
    found = problems(BASE + SECTION.replace(old, new, 1))
    matching = [p for p in found if expected in p]
    assert matching, found
    assert all(":" in p.split(" ", 1)[0] for p in matching), matching  # file:line: field


def test_every_problem_is_reported_at_once() -> None:
    text = SECTION.replace("pgd_steps: 7", "pgd_steps: -1").replace("favourable_label: 1", "favourable_label: ''")
    found = problems(BASE + text)
    assert any("pgd_steps" in p for p in found) and any("favourable_label" in p for p in found), found


def test_evaluations_file_for_job_evaluate(tmp_path: Path) -> None:
    path = tmp_path / "evaluations.yml"
    path.write_text(SECTION, encoding="utf-8")
    specs = load_evaluations(path, store_ids={"store"})
    assert [spec.name for spec in specs] == ["digits-robustness", "credit-fairness"]
    path.write_text("evaluations: []\n", encoding="utf-8")
    with pytest.raises(ManifestError, match=r"evaluations.yml:1: evaluations: expected a list"):
        load_evaluations(path)
    path.write_text("name: x\n", encoding="utf-8")
    with pytest.raises(ManifestError, match="unknown key 'name'"):
        load_evaluations(path)


def test_the_example_manifest_and_evaluations_file_are_valid() -> None:
    example = Path(__file__).resolve().parents[4] / "examples" / "digits-evaluated"
    text = re.sub(r"\$\{\w+\}", "http://127.0.0.1:8333", (example / "manifest.yml").read_text(encoding="utf-8"))
    job = parse_manifest(text, catalog=CATALOG)
    assert [spec.name for spec in job.evaluations] == ["digits-robustness"]
    assert [spec.name for spec in load_evaluations(example / "evaluations.yml")] == ["digits-robustness-strict"]
