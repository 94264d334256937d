"""An evaluation round's statement says what each evaluation judged: a fairness evaluation over the tenant's
``prediction`` column judged the tenant's predictions, never the model whose files are the statement's subject."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from controller_sidecar.provenancerecord import Digested
from learnerkit.scheduler.client.factsheetview import factsheet_rows
from learnerkit.scheduler.provenance.evaluation import EvaluationFact, RoundFacts, evaluation_statement, round_summary
from learnerkit.scheduler.provenance.factsheet import factsheet, factsheet_markdown
from tests.unit.scheduler.provenance.jobfolder import PREFIX, finished_job


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
    statement = evaluation_statement(facts)
    judged = [e["judges"] for e in statement["predicate"]["evaluations"]]
    assert judged == ["tenant-predictions", "model"]
    assert [e["judges"] for e in round_summary(statement)["evaluations"]] == judged


def test_the_factsheet_names_an_evaluation_of_the_tenants_predictions(tmp_path: Path) -> None:
    store, _ = finished_job(tmp_path)
    envelope = json.loads(store.objects[f"{PREFIX}provenance/provenance.intoto.json"])
    statement = json.loads(base64.b64decode(envelope["payload"]))
    judged = {"name": "loans", "kind": "fairness", "verdict": "failed", "message": "", "judges": "tenant-predictions"}
    sheet = factsheet(statement, rounds=[{"round": 1, "attempt": 1, "verdict": "failed", "evaluations": [judged]}])
    assert "- loans (fairness, of the tenant's predictions): failed" in factsheet_markdown(sheet)
    assert ("evaluation", "round 1: loans (of the tenant's predictions) failed") in factsheet_rows(sheet)
