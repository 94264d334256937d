"""A job stopped from outside the scheduler resumes by itself from its checkpoint (issue 21): its sidecar's container
stopped with ``docker stop`` (SIGTERM, as a Kubernetes eviction or ``kubectl delete pod`` sends) halts the learner
through the usual path; nobody asked for that halt, so the attempt ends INTERRUPTED and the job is not HALTED.
Real learner pairs, etcd and S3."""

from __future__ import annotations

from typing import Any

import pytest

from learnerkit.common import engine
from learnerkit.pair.docker import JOB_LABEL, ROLE_LABEL
from tests.integration.scheduler.conftest import TERMINAL, Harness, leftovers, manifest
from tests.integration.scheduler.test_preemption_docker import running_with_metrics, steps_in_history

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(600)]

TENANT = "team-a"
STEPS = 120
JOB = f"SMOKE_MIN_STEP_SECONDS=0.1 python /opt/learner/smoke/train.py --steps {STEPS} --checkpoint-every 10"


def test_a_sidecar_stopped_from_outside_resumes_its_job_from_the_checkpoint_with_each_step_once(
    harness: Harness, s3_server: Any, scheduler_buckets: Any
) -> None:
    job = harness.call(harness.service.submit(TENANT, manifest(s3_server, JOB)))
    running_with_metrics(harness, job.job_id)
    filters = {"label": [f"{JOB_LABEL}={job.job_id}", f"{ROLE_LABEL}=sidecar"]}
    [sidecar] = engine.engine().containers.list(filters=filters)
    sidecar.stop(timeout=60)  # SIGTERM; SIGKILL only past the halt

    final = harness.wait_status(TENANT, job.job_id, TERMINAL, timeout=300)
    assert final.status == "COMPLETED", final
    first, second = final.attempts
    assert first.ended_by == "INTERRUPTED", first
    assert first.reason.startswith("stopped from outside the scheduler (learner 1 halted"), first.reason
    assert (second.number, second.resumed_from, second.ended_by) == (2, 1, "COMPLETED"), second
    assert steps_in_history(harness, job.job_id) == list(range(1, STEPS + 1)), "each step once over both attempts"
    assert leftovers(job.job_id) == []
