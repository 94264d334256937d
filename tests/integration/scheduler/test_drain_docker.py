"""A drain on the Docker backend, end to end: real learner pairs, etcd and S3, and the operator's command.

The engine's host is the backend's one node (``local``): a drain halts its jobs onto their checkpoint and requeues
them, and they wait in the queue until the node is undrained, then resume from that checkpoint by themselves."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from click.testing import CliRunner

from controller_sidecar import keys
from learnerkit.cli import cli
from learnerkit.scheduler.backends.docker import NODE_NAME
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.facade import JobView
from learnerkit.scheduler.nodes.marks import nodes_prefix
from tests.integration.scheduler.conftest import TERMINAL, Harness, leftovers, manifest
from tests.integration.scheduler.test_preemption_docker import running_with_metrics, steps_in_history
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(900)]

TENANT = "team-a"
ROOT = keys.ROOT
"""The sidecars' root too; the fixture removes the drain mark whatever the test's end, so no other test's
scheduler finds the node drained."""
JOB = "SMOKE_MIN_STEP_SECONDS=0.1 python /opt/learner/smoke/train.py --steps 120 --checkpoint-every 10"


@pytest.fixture
def draining(etcd_server: Any, service_options: SchedulerOptions, scheduler_buckets: Any) -> Iterator[Harness]:
    """A scheduler that reads the nodes and the drain marks every half second."""
    made = Harness(etcd_server, replace(service_options, nodes_interval_s=0.5), root=ROOT)
    try:
        yield made
    finally:
        made.call(made.service.shared.store.etcd.delete(f"{nodes_prefix(ROOT)}drained/{NODE_NAME}"))
        made.kill()


def operator(etcd_server: Any, *args: str) -> tuple[int, Any]:
    env = {"ETCD_ENDPOINTS": etcd_server.endpoint, "LEARNERKIT_ETCD_ROOT": ROOT}
    result = CliRunner().invoke(cli, ["scheduler", *args, "--output", "json"], env=env)
    return result.exit_code, json.loads(result.output)


def test_a_drained_nodes_job_waits_for_it_and_resumes_without_recomputing_a_step(
    draining: Harness, s3_server: Any, etcd_server: Any
) -> None:
    h = draining
    job = h.call(h.service.submit(TENANT, manifest(s3_server, JOB)))
    running_with_metrics(h, job.job_id)

    code, listed = operator(etcd_server, "nodes")
    assert code == 0 and [(n["node"], n["state"]) for n in listed] == [(NODE_NAME, "ready")], listed
    assert [j["job_id"] for j in listed[0]["jobs"]] == [job.job_id]
    code, answer = operator(etcd_server, "drain", "no-such-node")
    assert code == 1 and answer["error"] == "UnknownNodeError", answer
    assert "'no-such-node'" in answer["message"] and f"the known nodes: {NODE_NAME}" in answer["message"]
    assert operator(etcd_server, "drain", NODE_NAME) == (0, {"node": NODE_NAME, "drained": True, "changed": True})

    def moved_off() -> JobView | None:
        view = h.call(h.service.get(TENANT, job.job_id))
        return view if view.status == "QUEUED" and view.attempts and view.attempts[0].ended_by else None

    queued = wait_until(moved_off, timeout=120, message="the job back in the queue, its first attempt ended")
    assert queued is not None
    assert (queued.attempts[0].ended_by, queued.attempts[0].reason) == ("DRAINED", f"node {NODE_NAME} drained")
    # Requeued once its learners ended; its containers are removed beside the loop, soon after.
    wait_until(lambda: leftovers(job.job_id) == [], timeout=60, message="the first attempt's containers removed")
    assert h.call(h.service.shared.marks.drained()) == frozenset({NODE_NAME})
    assert h.call(h.service.get(TENANT, job.job_id)).status == "QUEUED"  # the only node takes no new learner
    assert operator(etcd_server, "nodes") == (0, [{"node": NODE_NAME, "state": "drained", "jobs": []}])

    assert operator(etcd_server, "undrain", NODE_NAME) == (0, {"node": NODE_NAME, "drained": False, "changed": True})
    final = h.wait_status(TENANT, job.job_id, TERMINAL)
    assert final.status == "COMPLETED", final
    second = final.attempts[1]
    assert (second.number, second.resumed_from, second.ended_by) == (2, 1, "COMPLETED")
    assert steps_in_history(h, job.job_id) == list(range(1, 121)), "each step once over both attempts"
    assert leftovers(job.job_id) == []
