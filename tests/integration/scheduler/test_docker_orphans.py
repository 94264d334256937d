"""What a scheduler that died mid-deploy left on the Docker engine is found again by the next one's orphan sweep."""

from __future__ import annotations

import uuid

import pytest

from controller_sidecar.endpoints import Endpoints
from learnerkit.pair import docker as pair_docker
from learnerkit.pair.spec import PairSpec
from learnerkit.scheduler.backends import docker as docker_backend
from learnerkit.scheduler.backends.deployment import JobDeployment
from learnerkit.scheduler.backends.docker import DockerBackend
from learnerkit_build.builds.sidecarimage import build_sidecar
from learnerkit_build.recipes.render import BuildInputs
from tests.integration.conftest import REPO
from tests.integration.scheduler.conftest import leftovers

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


class Crash(BaseException):
    """The scheduler's process dying between two engine calls: nothing of it cleans up."""


def job_of(learners: int, sidecar: str, instance: str) -> JobDeployment:
    job_id = f"job-{uuid.uuid4().hex[:12]}"
    endpoints = Endpoints("127.0.0.1:1")
    pairs = tuple(
        PairSpec(
            job_id=job_id,
            learner_id=n,
            num_learners=learners,
            learner_image="learnerkit/pytorch:2.13-cpu-py3.11",
            sidecar_image=sidecar,
            command=("true",),
            sidecar_config={},
            endpoints=endpoints,
        )
        for n in range(1, learners + 1)
    )
    return JobDeployment(job_id, pairs, instance=instance)


@pytest.mark.parametrize("learners", [1, 2])
def test_what_a_crash_left_before_the_containers_is_the_instances_orphan(
    build_inputs: BuildInputs, monkeypatch: pytest.MonkeyPatch, learners: int
) -> None:
    """Two learners: their shared volume and network, and the first pair's volume; one: that pair's volume."""
    built = build_sidecar(REPO, build_inputs, lambda line: None)
    instance = f"lk-test-{uuid.uuid4().hex[:8]}"
    job = job_of(learners, built.immutable_reference or built.reference, instance)
    backend = DockerBackend()

    def crash(*args: object) -> None:
        raise Crash

    monkeypatch.setattr(pair_docker, "learner_options", crash)  # after the pair's volume, before its containers
    try:
        with pytest.raises(Crash):
            backend.deploy(job)
        left = [f"{job.learners[0].name}-job"]
        if learners > 1:
            left += [job.shared_name, docker_backend.network_name(job.job_id)]
        assert sorted(leftovers(job.job_id)) == sorted(left)
        assert backend.job_ids(instance) == {job.job_id}
        assert backend.job_ids(f"{instance}-other") == set(), "another instance's leftovers are not this one's"
        backend.teardown(job.job_id)
        assert leftovers(job.job_id) == [] and backend.job_ids(instance) == set()
    finally:
        backend.teardown(job.job_id)
