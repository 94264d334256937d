"""A job's model verdict from its latest evaluation round: accepted, rejected naming each threshold missed, pending
while evaluations are planned or running, not evaluated; a fairness evaluation over the tenant's prediction column
is named as judging the tenant's predictions."""

from __future__ import annotations

from learnerkit.scheduler.core.verdicts import model_verdict
from learnerkit.scheduler.evaluations.record import EvaluationOutcome, EvaluationRound
from learnerkit.scheduler.jobs.state import JobStatus
from learnerkit.scheduler.manifest.evaluations import parse_evaluations_text

SPECS = """\
evaluations:
  - name: robust
    kind: robustness
    data: {file: eval/digits.csv, label: label}
    attacks: [fgsm]
    epsilons: [0.1]
    thresholds:
      - {attack: fgsm, epsilon: 0.1, min_accuracy: 0.5}
  - name: fairness
    kind: fairness
    data: {file: credit.csv, label: credit}
    protected_attribute: sex
    privileged_groups: [male]
    favourable_label: 1
    thresholds:
      disparate_impact: {min: 0.8}
"""
PREDICTED = SPECS.replace("    favourable_label: 1\n", "    favourable_label: 1\n    prediction: predicted\n")
MISSED = {"metric": "disparate_impact", "value": 0.3127, "threshold": ">= 0.8", "at": {}}


def settled(text: str, robust: str, fairness: str, *failures: dict[str, object]) -> EvaluationRound:
    specs = parse_evaluations_text(text, "evaluations.yml")
    started = EvaluationRound.start("job-1", 1, 1, specs)
    started = started.settled(0, EvaluationOutcome("robust", "robustness", robust))  # type: ignore[arg-type]
    outcome = EvaluationOutcome("fairness", "fairness", fairness, "why", tuple(failures))  # type: ignore[arg-type]
    return started.settled(1, outcome)


def test_every_evaluation_passed_accepts_the_model() -> None:
    assert model_verdict(JobStatus.COMPLETED, True, settled(SPECS, "passed", "passed")) == "accepted"


def test_a_missed_threshold_rejects_it_naming_the_metric_its_value_and_the_threshold() -> None:
    verdict = model_verdict(JobStatus.COMPLETED, True, settled(SPECS, "passed", "failed", MISSED))
    assert verdict == "rejected (fairness: disparate_impact 0.313, wants >= 0.8)"


def test_a_fairness_evaluation_of_the_tenants_predictions_is_named_so() -> None:
    evaluated = settled(PREDICTED, "passed", "failed", MISSED)
    verdict = model_verdict(JobStatus.COMPLETED, True, evaluated)
    assert verdict == (
        "rejected (fairness on the tenant's predictions (predicted): disparate_impact 0.313, wants >= 0.8)"
    )
    assert evaluated.judges("fairness") == "the tenant's predictions (column predicted)"
    assert evaluated.judges("robust") == "the model"


def test_planned_or_running_evaluations_are_pending_and_none_is_not_evaluated() -> None:
    assert model_verdict(JobStatus.PROCESSING, True, None) == "pending"
    assert model_verdict(JobStatus.COMPLETED, True, None) == "pending"
    assert model_verdict(JobStatus.COMPLETED, True, settled(SPECS, "running", "passed")) == "pending"
    assert model_verdict(JobStatus.COMPLETED, False, None) == "not evaluated"
    assert model_verdict(JobStatus.FAILED, True, None) == "not evaluated"


def test_an_evaluation_without_a_verdict_is_neither_a_pass_nor_a_rejection() -> None:
    verdict = model_verdict(JobStatus.COMPLETED, True, settled(SPECS, "passed", "crashed"))
    assert verdict == "not evaluated (fairness: no verdict: why)"
