"""The job's folders on a real kubelet: whichever container the kubelet starts first, the sidecar can write them.

The kubelet goes on to the next container when one cannot start: a sidecar whose Secret it cannot read yet
leaves the learner to start first, and ``learner-run`` would then make ``/job/control`` its own, mode 0755.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client import CoreV1Api

from learnerkit.dev.k8scluster import LocalCluster
from learnerkit.pair.spec import SIDECAR_UID, PairSpec
from learnerkit.scheduler.backends.deployment import JobDeployment
from learnerkit.scheduler.backends.k8s_objects import LEARNER_CONTAINER, SIDECAR_CONTAINER, PodLayout, learner_pod
from tests.k8s.conftest import LEARNER_IMAGE, NAMESPACE
from tests.unit.scheduler.backends.test_k8s_objects import ENDPOINTS
from tests.waiting import wait_until

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(300)]

FOLDERS = ("control", "logs", "checkpoints", "results", "data", "model")


def _job(sidecar_image: str) -> JobDeployment:
    job_id = f"job-folders-{uuid.uuid4().hex[:6]}"
    pair = PairSpec(
        job_id=job_id,
        learner_id=1,
        num_learners=1,
        learner_image=LEARNER_IMAGE,
        sidecar_image=sidecar_image,
        command=("python", "/opt/learner/smoke/train.py"),
        sidecar_config={},
        endpoints=ENDPOINTS,  # never stored: the sidecar names a Secret that does not exist
        cpus=0.5,
        memory_bytes=512 << 20,
        namespace=NAMESPACE,
    )
    return JobDeployment(job_id, (pair,), namespace=NAMESPACE)


@pytest.fixture
def learner_first(k8s_api: Any, sidecar_image: str) -> Iterator[Any]:
    """A classic pod whose sidecar cannot start (its Secret is missing): the kubelet starts the learner alone."""
    job = _job(sidecar_image)
    core = CoreV1Api(k8s_api)
    pod = core.create_namespaced_pod(NAMESPACE, learner_pod(job, job.learners[0], PodLayout.CLASSIC))
    try:
        yield pod
    finally:
        core.delete_namespaced_pod(pod.metadata.name, NAMESPACE, grace_period_seconds=0)
        selector = f"learnerkit.io/job-id={job.job_id}"
        wait_until(lambda: not core.list_namespaced_pod(NAMESPACE, label_selector=selector).items, timeout=120)


def _states(core: CoreV1Api, name: str) -> dict[str, Any]:
    status = core.read_namespaced_pod(name, NAMESPACE).status
    return {item.name: item.state for item in status.container_statuses or []}


def test_the_learner_started_before_the_sidecar_finds_the_folders_the_sidecars_to_write(
    k8s_api: Any, k8s_cluster: LocalCluster, learner_first: Any
) -> None:
    core, name = CoreV1Api(k8s_api), learner_first.metadata.name
    states = wait_until(
        lambda: (found := _states(core, name)).get(LEARNER_CONTAINER) and found[LEARNER_CONTAINER].running and found,
        timeout=120,
        message=lambda: f"the learner to run alone: {_states(core, name)}",
    )
    waiting = states[SIDECAR_CONTAINER].waiting
    assert waiting is not None and waiting.reason == "CreateContainerConfigError", states[SIDECAR_CONTAINER]
    job = k8s_cluster.first.empty_dir(learner_first.metadata.uid, "job")
    for folder in FOLDERS:
        made = (job / folder).stat()
        assert (made.st_uid, made.st_gid, made.st_mode & 0o7777) == (SIDECAR_UID, 0, 0o775), folder
