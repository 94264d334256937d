"""A sidecar that dies before it can report says why in its job's reason: its log's last line, read from the
engine (a tier failure said only "its sidecar exited with status 1" and the pair was gone before anyone looked).
Its restarts are counted on the container, so a scheduler restarted in between does not start counting again."""

from __future__ import annotations

import uuid

import pytest

from controller_sidecar.endpoints import Endpoints
from learnerkit.pair.spec import PairSpec
from learnerkit.scheduler.backends.deployment import JobDeployment
from learnerkit.scheduler.backends.docker import DockerBackend
from learnerkit.scheduler.backends.protocol import SidecarStates
from learnerkit.scheduler.core.liveness import LivenessTimes, lost_learners
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.jobs.state import JobState
from learnerkit.scheduler.manifest.parser import parse_manifest
from learnerkit_build.builds.sidecarimage import build_sidecar
from learnerkit_build.recipes.render import BuildInputs
from tests.integration.conftest import REPO
from tests.unit.scheduler.backends.test_k8s_evicted import MANIFEST
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def dying_pair(build_inputs: BuildInputs) -> JobDeployment:
    """One pair whose sidecar exits at once on a bad setting (status 2), however often it is made again."""
    built = build_sidecar(REPO, build_inputs, lambda line: None)
    job_id = f"job-{uuid.uuid4().hex[:12]}"
    pair = PairSpec(
        job_id=job_id,
        learner_id=1,
        num_learners=1,
        learner_image="learnerkit/pytorch:2.13-cpu-py3.11",
        sidecar_image=built.immutable_reference or built.reference,
        command=("sleep", "60"),
        sidecar_config={"data": {"mode": "stream"}},
        endpoints=Endpoints("127.0.0.1:1"),
    )
    return JobDeployment(job_id, (pair,))


def ended(backend: DockerBackend, job_id: str) -> SidecarStates:
    return wait_until(
        lambda: (states := backend.sidecars(job_id)).exited and states,
        timeout=60,
        interval=0.2,
        message="the sidecar to exit on its bad setting",
    )


def test_a_sidecar_dead_on_a_bad_setting_is_lost_with_its_last_log_line(build_inputs: BuildInputs) -> None:
    job = dying_pair(build_inputs)
    job_id = job.job_id
    backend = DockerBackend()
    backend.deploy(job)
    try:
        sidecars = ended(backend, job_id)
        assert sidecars.exited == {1: 2}
        tracked = Tracked(JobState(job_id, "team", "j", 0.0), parse_manifest(MANIFEST), MANIFEST, "m.yml")
        lost = lost_learners(tracked, sidecars, LivenessTimes(1.0, 1.0, 0.0), lease_ttl_s=10.0, renewal_grace_s=30.0)
        assert lost == {
            1: "its sidecar exited with status 2 before reporting a final status; its log ends: controller-sidecar: "
            "$LEARNERKIT_SIDECAR_CONFIG_JSON: data.mode must be 'copy' or 'mount', got 'stream'"
        }
    finally:
        backend.teardown(job_id)


def test_a_sidecar_made_again_carries_its_restart_count(build_inputs: BuildInputs) -> None:
    job = dying_pair(build_inputs)
    backend = DockerBackend()
    backend.deploy(job)
    try:
        assert ended(backend, job.job_id).restarts == {}
        for count in (1, 2):
            assert backend.restart_sidecar(job.job_id, 1)
            assert ended(backend, job.job_id).restarts == {1: count}
    finally:
        backend.teardown(job.job_id)
