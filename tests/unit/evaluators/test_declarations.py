"""The explainability and uncertainty kinds as their folders declare them: the manifest parser takes an entry of
each with its defaults, and refuses a field of another kind, a metric the kind does not produce and a value out
of range, naming field and line."""

from __future__ import annotations

import pytest

from learner.evaluation.spec import KindSpec
from learnerkit.scheduler.errors import ManifestError
from learnerkit.scheduler.manifest.evaluations import parse_evaluations_text

ENTRIES = """\
evaluations:
  - name: credit-explained
    kind: explainability
    data: {file: credit.csv, label: credit}
    methods: [kernel_shap, integrated_gradients]
    watch: [postcode]
    thresholds:
      - {method: kernel_shap, max_share: 0.2, min_faithfulness: 0.3}
  - name: digits-uncertainty
    kind: uncertainty
    data: {file: digits-eval.csv, label: label}
    rejection_rates: [0.2, 0.1]
    thresholds:
      expected_calibration_error: {max: 0.05}
      coverage: {min: 0.88}
"""


def problems(text: str) -> list[str]:
    with pytest.raises(ManifestError) as caught:
        parse_evaluations_text(text, "evaluations.yml")
    return [str(p) for p in caught.value.problems]


def test_an_entry_of_each_kind_is_taken_with_its_defaults() -> None:
    explained, uncertain = parse_evaluations_text(ENTRIES, "evaluations.yml")
    assert isinstance(explained, KindSpec) and isinstance(uncertain, KindSpec)
    assert explained.fields["methods"] == ["kernel_shap", "integrated_gradients"]
    assert (explained.fields["examples"], explained.fields["baseline"], explained.fields["samples"]) == (
        500,
        "mean",
        200,
    )
    assert explained.fields["thresholds"] == [{"method": "kernel_shap", "max_share": 0.2, "min_faithfulness": 0.3}]
    assert (uncertain.fields["level"], uncertain.fields["bins"], uncertain.fields["rejection_rates"]) == (
        0.9,
        15,
        [0.1, 0.2],
    )
    assert uncertain.fields["thresholds"]["coverage"] == {"min": 0.88, "max": None}


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "watch: [postcode]",
            "epsilons: [0.1]",
            "evaluations.yml:6: evaluations[0].epsilons: unknown key 'epsilons' for kind explainability; "
            "it is a field of robustness evaluations",
        ),
        (
            "{method: kernel_shap,",
            "{method: lime,",
            "evaluations.yml:8: evaluations[0].thresholds[0].method: unknown method 'lime'",
        ),
        (
            "max_share: 0.2",
            "min_share: 0.2",
            "evaluations.yml:8: evaluations[0].thresholds[0].min_share: unknown key 'min_share': explainability "
            "evaluations produce no share; bounds: max_share (feature_share)",
        ),
        (
            "coverage: {min: 0.88}",
            "disparate_impact: {min: 0.8}",
            "evaluations.yml:15: evaluations[1].thresholds.disparate_impact: unknown key 'disparate_impact': "
            "uncertainty evaluations produce no such metric; valid: expected_calibration_error, brier_score, coverage",
        ),
        ("coverage: {min: 0.88}", "coverage: {max: 0.88}", "coverage is better higher: its threshold is a min"),
        (
            "rejection_rates: [0.2, 0.1]",
            "rejection_rates: [0.2, 0.95]",
            "evaluations[1].rejection_rates[1]: must be at most 0.9",
        ),
    ],
)
def test_bad_input_is_refused_naming_field_and_line(old: str, new: str, expected: str) -> None:
    found = problems(ENTRIES.replace(old, new))
    assert any(expected in problem for problem in found), found
