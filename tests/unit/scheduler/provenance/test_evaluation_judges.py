"""An evaluation round's statement says what each evaluation judged: a fairness evaluation over the tenant's
``prediction`` column judged the tenant's predictions, never the model whose files are the statement's subject."""

from __future__ import annotations

from controller_sidecar.provenancerecord import Digested
from learnerkit.scheduler.provenance.evaluation import EvaluationFact, RoundFacts, evaluation_statement


def fact(spec: dict[str, object]) -> EvaluationFact:
    return EvaluationFact("fairness", "fairness", "failed", "missed", (), spec, None)


def test_each_evaluation_names_what_it_judged() -> None:
    facts = RoundFacts(
        "job-1",
        1,
        1,
        (Digested("attempt-1/learner-1/results/model.bin", "a" * 64, 3),),
        (fact({"name": "fairness", "prediction": "predicted"}), fact({"name": "fairness", "prediction": None})),
        "lk-test",
    )
    judged = [e["judges"] for e in evaluation_statement(facts)["predicate"]["evaluations"]]
    assert judged == ["tenant-predictions", "model"]
