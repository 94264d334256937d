"""The explainability and uncertainty kinds through the scheduler on Docker, each added as one evaluator folder: a
job trains, both evaluations run in their own images, the verdicts are in the job's status and the round's signed
statement names each kind, verdict and report (the chart among them)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from learnerkit.common.signing import create_signer
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.factory import describe_image
from learnerkit.scheduler.images.gate import ImageGate
from learnerkit.scheduler.provenance.writer import ProvenanceWriter
from learnerkit_build.recipes.render import BuildInputs
from tests.integration.scheduler.conftest import RESULTS_BUCKET, TERMINAL, Harness, leftovers, manifest
from tests.integration.scheduler.test_evaluations_docker import FOLDER, built, evaluated_data, settled_evaluations
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(900)]
__all__ = ["evaluated_data"]  # the module fixture that uploads the evaluation data and the training script

EVALUATORS = (("explainability", "0.9"), ("uncertainty", "1.0"))
EVALUATIONS = """\
evaluations:
  - name: explained
    kind: explainability
    data: {file: eval.csv, label: label}
    methods: [integrated_gradients, kernel_shap]
    watch: [x1]
    samples: 32
    thresholds:
      - {method: kernel_shap, max_share: 0.3}
  - name: uncertain
    kind: uncertainty
    data: {file: eval.csv, label: label}
    rejection_rates: [0.1]
    thresholds:
      coverage: {min: 0.5}
"""


@pytest.fixture
def evaluating(
    etcd_server: Any,
    service_options: SchedulerOptions,
    evaluated_data: None,
    build_inputs: BuildInputs,
    tmp_path: Path,
) -> Iterator[Harness]:
    """A scheduler with both evaluators and a platform signing key: without a key no round's statement is signed."""
    evaluators = {kind: built(f"{kind}:{version}-cpu", build_inputs) for kind, version in EVALUATORS}
    signer = create_signer(tmp_path / "platform.pem")
    writer = ProvenanceWriter(signer, describe_image(ImageGate(("*",), ())), service_options.platform.sidecar_image)
    options = replace(service_options, resolve_evaluator=evaluators.__getitem__, provenance=writer)
    made = Harness(etcd_server, options)
    yield made
    made.kill()


def test_both_kinds_run_after_training_with_their_verdicts_in_status_and_provenance(
    evaluating: Harness, s3_server: Any, scheduler_buckets: Any, learner_image: str
) -> None:
    """The model decides by comparing x0 with x1, so x1 holds about half the importance: over 0.3."""
    text = manifest(s3_server, "python /job/data/train.py", data=FOLDER, extra=EVALUATIONS)
    view = evaluating.call(evaluating.service.submit("team-a", text, image=learner_image))
    assert evaluating.wait_status("team-a", view.job_id, TERMINAL).status == "COMPLETED"
    settled = settled_evaluations(evaluating, view.job_id, {"explained", "uncertain"})
    outcomes = {e.name: e for e in settled.evaluations}
    explained, uncertain = outcomes["explained"], outcomes["uncertain"]
    assert explained.outcome == "failed" and "feature_share" in explained.message, explained
    assert "feature x1" in explained.message and "threshold <= 0.3" in explained.message, explained.message
    assert uncertain.outcome == "passed", uncertain
    assert settled.model.startswith("rejected (explained: feature_share "), settled.model
    prefix = f"{view.job_id}/evaluations/round-1"
    chart = scheduler_buckets.get_object(
        Bucket=RESULTS_BUCKET, Key=f"{prefix}/uncertain/results/evaluations/uncertain-reliability.png"
    )
    assert chart["Body"].read()[:4] == b"\x89PNG"

    def statement() -> dict[str, Any] | None:
        key = f"{view.job_id}/provenance/evaluation-round-1.intoto.json"
        try:
            envelope = json.loads(scheduler_buckets.get_object(Bucket=RESULTS_BUCKET, Key=key)["Body"].read())
        except scheduler_buckets.exceptions.NoSuchKey:
            return None
        return dict(json.loads(base64.b64decode(envelope["payload"])))

    signed = wait_until(statement, timeout=60, interval=0.2, message="the round's signed statement")
    found = {e["name"]: e for e in signed["predicate"]["evaluations"]}
    assert {(n, e["kind"], e["verdict"]) for n, e in found.items()} == {
        ("explained", "explainability", "failed"),
        ("uncertain", "uncertainty", "passed"),
    }
    assert found["explained"]["failures"][0]["at"] == {"method": "kernel_shap", "feature": "x1"}
    reports = {r["name"].rsplit("/", 1)[-1] for r in found["explained"]["reports"]}
    assert {"explained.json", "explained.txt", "explained-importance.png"} <= reports, reports
    for n in (1, 2):
        assert leftovers(f"{view.job_id}-ev1-{n}") == []
