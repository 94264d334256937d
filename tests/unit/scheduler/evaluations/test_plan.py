"""An evaluation's pair as planned, and the round as recorded in etcd."""

from __future__ import annotations

import json

import pytest

from controller_sidecar.endpoints import Endpoints
from controller_sidecar.settings import load_settings
from learner.evaluation.spec import spec_from_dict
from learnerkit.common.errors import ConfigError
from learnerkit.scheduler.core.planning import Platform
from learnerkit.scheduler.evaluations.plan import EvaluatedJob, plan_evaluation
from learnerkit.scheduler.evaluations.record import EvaluationOutcome, EvaluationRound
from learnerkit.scheduler.manifest.parser import parse_manifest

MANIFEST = """\
name: j
cpus: 1
memory: 1Gb
data_stores:
  - id: s3
    type: s3_datastore
    training_data: {container: data/train}
    training_results: {container: results/team}
    connection: {auth_url: "http://127.0.0.1:8333", user_name: a, password: b}
  - id: elsewhere
    type: s3_datastore
    training_data: {container: other}
    connection: {auth_url: "http://127.0.0.1:9999", user_name: c, password: d}
framework: {name: custom, version: img, command: run}
evaluations:
  - name: robust
    kind: robustness
    data: {file: eval/digits.csv, label: label, container: data/held-out}
    attacks: [fgsm]
    epsilons: [0.1]
  - name: remote
    kind: robustness
    data: {file: x.csv, label: label, store: elsewhere}
    attacks: [fgsm]
    epsilons: [0.1]
"""
ENDPOINTS = Endpoints("127.0.0.1:2379", s3_endpoint_url="http://127.0.0.1:8333", s3_access_key="a", s3_secret_key="b")


def _job() -> EvaluatedJob:
    return EvaluatedJob("job-1", parse_manifest(MANIFEST), ENDPOINTS, MANIFEST, "manifest.yml")


def test_the_pair_reads_the_trained_model_and_hands_the_evaluator_its_spec_only() -> None:
    job = _job()
    spec = job.manifest.evaluations[0]
    plan = plan_evaluation(job, 2, 3, 0, spec, "evaluator:1", Platform("127.0.0.1:2379", "sidecar:1"), "lk-x")
    assert plan.job_id == "job-1-ev2-1" and plan.instance == "lk-x" and not plan.distributed
    [pair] = plan.learners
    assert pair.learner_image == "evaluator:1" and pair.num_learners == 1  # one learner: no network
    assert set(pair.learner_env) == {"EVALUATION_SPEC"}  # no credentials, no store
    assert spec_from_dict(json.loads(pair.learner_env["EVALUATION_SPEC"])) == spec
    document = json.dumps({**pair.sidecar_config, "job_id": pair.job_id, "learner_id": 1, "num_learners": 1})
    settings = load_settings({"LEARNERKIT_SIDECAR_CONFIG_JSON": document, "ETCD_ENDPOINTS": "127.0.0.1:2379"})
    locations = settings.locations
    assert locations.trained_model is not None and locations.model is None
    assert str(locations.trained_model) == "s3://results/team/job-1/attempt-3/learner-1/results/model/"
    assert str(locations.results) == "s3://results/team/job-1/evaluations/round-2/robust/"
    assert locations.data is not None and str(locations.data) == "s3://data/held-out/"


def test_data_on_another_endpoint_than_the_results_is_refused_naming_the_store() -> None:
    job = _job()
    with pytest.raises(ConfigError, match="remote: its data store elsewhere is not the results store's endpoint"):
        plan_evaluation(job, 1, 1, 1, job.manifest.evaluations[1], "e:1", Platform("127.0.0.1:2379", "s:1"), "")


def test_a_round_survives_its_record() -> None:
    specs = _job().manifest.evaluations
    started = EvaluationRound.start("job-1", 1, 2, specs)
    assert started.in_flight and [o.outcome for o in started.outcomes] == ["running", "running"]
    failure = {"metric": "adversarial_accuracy", "value": 0.3, "threshold": ">= 0.6", "at": {"attack": "fgsm"}}
    settled = started.settled(0, EvaluationOutcome("robust", "robustness", "failed", "missed", (failure,), "s3://r/k"))
    settled = settled.settled(1, EvaluationOutcome("remote", "robustness", "crashed", "no report"))
    assert not settled.in_flight
    assert EvaluationRound.from_raw("job-1", json.loads(json.dumps(settled.to_raw()))) == settled


def test_an_unknown_outcome_in_the_record_is_refused() -> None:
    with pytest.raises(ValueError, match="outcome 'maybe'"):
        EvaluationOutcome.from_raw({"name": "n", "kind": "robustness", "outcome": "maybe"})
