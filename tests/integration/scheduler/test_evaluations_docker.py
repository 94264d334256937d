"""Evaluations run by the scheduler after training (issue 24), on the Docker backend with the real etcd and S3:
a small PyTorch model trained in seconds, then the robustness evaluator image as a pair of its own, its verdicts
in the job's status and its reports with the job's results."""

from __future__ import annotations

import json
import random
import textwrap
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.facade import JobView
from learnerkit_build.builds.images import build_image
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.recipes.render import BuildInputs
from tests.integration.conftest import REPO
from tests.integration.scheduler.conftest import DATA_BUCKET, RESULTS_BUCKET, TERMINAL, Harness, leftovers, manifest
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(900)]

FOLDER = "evaluated"
EVALUATORS = (("robustness", "1.20"), ("fairness", "0.6"))
TRAIN = """\
import csv

import torch

import learner

with (learner.data_dir() / "eval.csv").open(newline="") as handle:
    rows = list(csv.DictReader(handle))
x = torch.tensor([[float(r["x0"]), float(r["x1"])] for r in rows])
y = torch.tensor([int(r["label"]) for r in rows])
torch.manual_seed(0)
net = torch.nn.Linear(2, 2)
optimizer = torch.optim.Adam(net.parameters(), lr=0.1)
for step in range(300):
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(net(x), y)
    loss.backward()
    optimizer.step()
learner.log_metrics(step, loss=loss.item())
learner.save_model(net, [2], 2)
"""
EVALUATIONS = """\
evaluations:
  - name: gentle
    kind: robustness
    data: {file: eval.csv, label: label}
    attacks: [fgsm]
    epsilons: [0.01]
    thresholds:
      - {attack: fgsm, epsilon: 0.01, min_accuracy: 0.5}
  - name: harsh
    kind: robustness
    data: {file: eval.csv, label: label}
    attacks: [fgsm, pgd]
    epsilons: [0.5]
    pgd_steps: 3
    thresholds:
      - {attack: pgd, epsilon: 0.5, min_accuracy: 1.0}
"""


def evaluation_data() -> str:
    """Two features in [0, 1]; the class is which one is larger: linear, learnt in a few hundred steps."""
    rng = random.Random(24)
    lines = ["x0,x1,label"]
    for _ in range(200):
        a, b = rng.random(), rng.random()
        lines.append(f"{a:.4f},{b:.4f},{int(a > b)}")
    return "\n".join(lines) + "\n"


def _loans() -> str:
    """Planted bias: half of each group deserve the loan; group a is granted 50 of 100, group b 30 (disparate
    impact 0.6)."""
    lines = ["group,income,deserves,granted"]
    for group, granted in (("a", 50), ("b", 30)):
        lines += [f"{group},{i},{int(i < 50)},{int(i < granted)}" for i in range(100)]
    return "\n".join(lines) + "\n"


def built(name: str, build_inputs: BuildInputs) -> str:
    [spec] = load_matrix(REPO).select([name])
    built = build_image(REPO, spec, build_inputs, lambda line: None)
    assert built.immutable_reference is not None, built
    return built.immutable_reference


@pytest.fixture(scope="module")
def evaluated_data(scheduler_buckets: Any) -> None:
    scheduler_buckets.put_object(Bucket=DATA_BUCKET, Key=f"{FOLDER}/eval.csv", Body=evaluation_data().encode())
    scheduler_buckets.put_object(Bucket=DATA_BUCKET, Key=f"{FOLDER}/train.py", Body=TRAIN.encode())
    scheduler_buckets.put_object(Bucket=DATA_BUCKET, Key=f"{FOLDER}/loans.csv", Body=_loans().encode())


@pytest.fixture
def evaluating(
    etcd_server: Any, service_options: SchedulerOptions, evaluated_data: None, build_inputs: BuildInputs
) -> Iterator[Harness]:
    evaluators = {kind: built(f"{kind}:{version}-cpu", build_inputs) for kind, version in EVALUATORS}
    options = replace(service_options, resolve_evaluator=evaluators.__getitem__)
    made = Harness(etcd_server, options)
    yield made
    made.kill()


def settled_evaluations(harness: Harness, job_id: str, round_names: set[str]) -> JobView:
    """The job once its latest round's evaluations (named ``round_names``) have settled."""

    def done() -> JobView | None:
        view = harness.call(harness.service.get("team-a", job_id))
        names = {e.name for e in view.evaluations}
        settled = all(e.outcome != "running" for e in view.evaluations)
        return view if names == round_names and settled else None

    return wait_until(
        done,
        timeout=600,
        interval=0.2,
        message=lambda: f"{job_id}'s evaluations to settle: {harness.call(harness.service.get('team-a', job_id))}",
    )


def test_a_job_with_evaluations_ends_with_their_verdicts(
    evaluating: Harness, s3_server: Any, scheduler_buckets: Any, learner_image: str
) -> None:
    text = manifest(s3_server, "python /job/data/train.py", data=FOLDER, extra=EVALUATIONS)
    view = evaluating.call(evaluating.service.submit("team-a", text, image=learner_image))
    assert view.model == "pending", view
    final = evaluating.wait_status("team-a", view.job_id, TERMINAL)
    assert final.status == "COMPLETED", final
    settled = settled_evaluations(evaluating, view.job_id, {"gentle", "harsh"})
    assert settled.model.startswith("rejected (harsh: adversarial_accuracy "), settled.model
    assert "wants >= 1" in settled.model, settled.model
    [listed] = [j for j in evaluating.call(evaluating.service.list_jobs("team-a")) if j.job_id == view.job_id]
    assert listed.model == settled.model and listed.evaluations == ()
    outcomes = {e.name: e for e in settled.evaluations}
    assert outcomes["gentle"].outcome == "passed", outcomes["gentle"]
    harsh = outcomes["harsh"]
    assert harsh.outcome == "failed", harsh
    assert "adversarial_accuracy" in harsh.message and "threshold >= 1" in harsh.message, harsh.message
    assert "pgd" in harsh.message and "0.5" in harsh.message
    key = f"{view.job_id}/evaluations/round-1/harsh/results/evaluations/harsh.json"
    assert harsh.report == f"s3://{RESULTS_BUCKET}/{key}"
    report = json.loads(scheduler_buckets.get_object(Bucket=RESULTS_BUCKET, Key=key)["Body"].read())
    assert report["verdict"] == "failed" and set(report["metrics"]["curve"]) == {"fgsm", "pgd"}
    assert [failure["metric"] for failure in report["failures"]] == ["adversarial_accuracy"]
    for n in (1, 2):
        assert leftovers(f"{view.job_id}-ev1-{n}") == []


def test_an_evaluator_that_cannot_read_its_data_is_crashed_not_passed(
    evaluating: Harness, s3_server: Any, learner_image: str
) -> None:
    missing = textwrap.dedent(
        """\
        evaluations:
          - name: nodata
            kind: robustness
            data: {file: absent.csv, label: label}
            attacks: [fgsm]
            epsilons: [0.1]
        """
    )
    text = manifest(s3_server, "python /job/data/train.py", data=FOLDER, extra=missing)
    view = evaluating.call(evaluating.service.submit("team-a", text, image=learner_image))
    assert evaluating.wait_status("team-a", view.job_id, TERMINAL).status == "COMPLETED"
    [nodata] = settled_evaluations(evaluating, view.job_id, {"nodata"}).evaluations
    assert nodata.outcome == "crashed" and "FAILED" in nodata.message, nodata


def test_job_evaluate_evaluates_the_model_again_without_retraining(
    evaluating: Harness, s3_server: Any, scheduler_buckets: Any, learner_image: str
) -> None:
    text = manifest(s3_server, "python /job/data/train.py", data=FOLDER)
    view = evaluating.call(evaluating.service.submit("team-a", text, image=learner_image))
    assert evaluating.wait_status("team-a", view.job_id, TERMINAL).status == "COMPLETED"
    trained = evaluating.call(evaluating.service.get("team-a", view.job_id))
    assert trained.evaluations == () and trained.model == "not evaluated", trained
    harsh_only = EVALUATIONS.split("  - name: harsh\n")[1]
    evaluated = evaluating.call(
        evaluating.service.evaluate("team-a", view.job_id, "evaluations:\n  - name: harsh\n" + harsh_only)
    )
    assert [(e.name, e.outcome) for e in evaluated.evaluations] == [("harsh", "running")]
    [harsh] = settled_evaluations(evaluating, view.job_id, {"harsh"}).evaluations
    assert harsh.outcome == "failed" and "adversarial_accuracy" in harsh.message, harsh
    reports = evaluating.call(evaluating.service.evaluation_reports("team-a", view.job_id))
    assert reports.round == 1 and reports.evaluations[0].report is not None
    assert "FAILED" in reports.evaluations[0].summary
    final = evaluating.call(evaluating.service.get("team-a", view.job_id))
    assert final.status == "COMPLETED" and final.restarts == 0  # evaluated, not trained again
    listed = scheduler_buckets.list_objects_v2(Bucket=RESULTS_BUCKET, Prefix=f"{view.job_id}/attempt-2/")
    assert listed["KeyCount"] == 0


def test_an_evaluation_in_flight_at_a_restart_is_finished_by_the_next_scheduler(
    etcd_server: Any, evaluating: Harness, s3_server: Any, learner_image: str
) -> None:
    text = manifest(s3_server, "python /job/data/train.py", data=FOLDER, extra=EVALUATIONS)
    view = evaluating.call(evaluating.service.submit("team-a", text, image=learner_image))
    evaluating.wait_status("team-a", view.job_id, TERMINAL)
    wait_until(
        lambda: leftovers(f"{view.job_id}-ev1-2"),
        timeout=120,
        interval=0.1,
        message=f"{view.job_id}'s second evaluation to be deployed",
    )
    evaluating.kill()
    restarted = Harness(etcd_server, evaluating.options)
    try:
        outcomes = {
            e.name: e.outcome for e in settled_evaluations(restarted, view.job_id, {"gentle", "harsh"}).evaluations
        }
        assert outcomes == {"gentle": "passed", "harsh": "failed"}
        verdict = restarted.call(restarted.service.get("team-a", view.job_id)).model
        assert verdict.startswith("rejected (harsh: "), verdict
        assert leftovers(f"{view.job_id}-ev1-1") == [] and leftovers(f"{view.job_id}-ev1-2") == []
    finally:
        restarted.kill()


def test_a_fairness_evaluation_of_planted_bias_fails_naming_disparate_impact(
    evaluating: Harness, s3_server: Any, learner_image: str
) -> None:
    fairness = textwrap.dedent(
        """\
        evaluations:
          - name: loans
            kind: fairness
            data: {file: loans.csv, label: deserves, features: [income]}
            protected_attribute: group
            privileged_groups: [a]
            favourable_label: 1
            prediction: granted
            thresholds:
              disparate_impact: {min: 0.8, max: 1.25}
        """
    )
    text = manifest(s3_server, "python /job/data/train.py", data=FOLDER, extra=fairness)
    view = evaluating.call(evaluating.service.submit("team-a", text, image=learner_image))
    assert evaluating.wait_status("team-a", view.job_id, TERMINAL).status == "COMPLETED"
    [loans] = settled_evaluations(evaluating, view.job_id, {"loans"}).evaluations
    assert loans.outcome == "failed", loans
    assert loans.judges == "the tenant's predictions (column granted)", loans
    verdict = evaluating.call(evaluating.service.get("team-a", view.job_id)).model
    assert verdict.startswith("rejected (loans on the tenant's predictions (granted): disparate_impact 0.6, wants"), (
        verdict
    )
    assert loans.message == "missed: disparate_impact = 0.6000, threshold >= 0.8 and <= 1.25", loans.message
