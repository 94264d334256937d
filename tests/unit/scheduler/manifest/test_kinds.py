"""The installed evaluators' kinds as their folders declare them, and what the parser refuses because of them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from learnerkit.scheduler.errors import ManifestError
from learnerkit.scheduler.manifest.kinds import installed_kinds
from learnerkit.scheduler.manifest.parser import parse_manifest
from learnerkit_build.recipes.matrix import load_matrix
from tests.unit.scheduler.manifest.test_evaluations import SECTION
from tests.unit.scheduler.manifest.test_manifest import BASE, CATALOG

REPO = Path(__file__).resolve().parents[4]


def problems(text: str) -> list[str]:
    with pytest.raises(ManifestError) as caught:
        parse_manifest(text, catalog=CATALOG)
    return [str(p) for p in caught.value.problems]


def test_every_evaluator_folder_declares_one_kind_and_only_they_do() -> None:
    evaluators = {i.framework.name for i in load_matrix(REPO).images if i.framework.smoke.kind == "evaluation"}
    kinds = installed_kinds(REPO)
    assert {kinds.kinds[name].framework for name in kinds.names} == evaluators
    assert kinds.names[:2] == ("robustness", "fairness")
    assert kinds.kinds["fairness"].predictions_field == "prediction"
    assert kinds.kinds["robustness"].predictions_field is None


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "pgd_steps: 7",
            "pgd_steps: 7\n    protected_attribute: sex",
            r"manifest.yml:\d+: evaluations\[0\]\.protected_attribute: unknown key 'protected_attribute' for kind "
            r"robustness; it is a field of fairness evaluations",
        ),
        (
            "prediction: predicted",
            "prediction: predicted\n    epsilons: [0.1]",
            r"manifest.yml:\d+: evaluations\[1\]\.epsilons: unknown key 'epsilons' for kind fairness; it is a field "
            r"of robustness evaluations",
        ),
        (
            "disparate_impact: {min",
            "accuracy: {min",
            r"manifest.yml:\d+: evaluations\[1\]\.thresholds\.accuracy: unknown key 'accuracy': fairness evaluations "
            r"produce no such metric; valid: disparate_impact, statistical_parity_difference, "
            r"equal_opportunity_difference",
        ),
        (
            "min_accuracy: 0.5",
            "max_accuracy: 0.5",
            r"manifest.yml:\d+: evaluations\[0\]\.thresholds\[0\]\.max_accuracy: unknown key 'max_accuracy': "
            r"robustness evaluations produce no accuracy; bounds: min_accuracy \(adversarial_accuracy\)",
        ),
        (
            "kind: robustness",
            "kind: lineage",
            r"manifest.yml:\d+: evaluations\[0\]\.kind: unknown value 'lineage'; valid: robustness, fairness",
        ),
    ],
)
def test_a_field_or_metric_of_another_kind_is_refused_naming_field_and_line(old: str, new: str, expected: str) -> None:
    assert old in SECTION
    found = problems(BASE + SECTION.replace(old, new, 1))
    assert any(re.search(expected, p) for p in found), found


def test_a_threshold_is_checked_against_the_lists_that_were_not_refused() -> None:
    text = SECTION.replace("attacks: [fgsm, pgd]", "attacks: [fgsm, cw]").replace("epsilon: 0.1,", "epsilon: 0.15,")
    found = problems(BASE + text)
    assert any("attacks[1]: unknown attack 'cw'" in p for p in found), found
    assert any("thresholds[0].epsilon: 0.15 is not among this evaluation's epsilons" in p for p in found), found
