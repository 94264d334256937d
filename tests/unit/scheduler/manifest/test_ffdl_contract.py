"""FfDL's learner contract: its variables reach every learner's command, and the learners of a job share a folder."""

from __future__ import annotations

import asyncio

import pytest

from learner.paths import SHARED_DIR
from learner.run.scrub import scrub_env
from learnerkit.pair.docker import learner_options
from learnerkit.scheduler.backends import docker as docker_backend
from learnerkit.scheduler.backends import k8s_objects as ko
from learnerkit.scheduler.backends.deployment import JobDeployment
from learnerkit.scheduler.config.policy import SubmitPolicy
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.core.planning import Platform, plan_job
from learnerkit.scheduler.core.scheduler import Scheduler
from learnerkit.scheduler.errors import ManifestError
from learnerkit.scheduler.jobs.state import JobState
from learnerkit.scheduler.jobs.store import JobStore
from learnerkit.scheduler.manifest.parser import parse_manifest
from tests.unit.scheduler.api.test_submit_parsing import Unreachable
from tests.unit.scheduler.backends.test_k8s_objects import env_of

MANIFEST = """\
name: two
memory: 1Gb
learners: {learners}
data_stores:
  - id: os
    type: mount_cos
    training_data: {{container: data}}
    training_results: {{container: results}}
    connection: {{auth_url: "http://127.0.0.1:8333", user_name: k, password: s}}
framework:
  name: pytorch
  version: latest
  command: >
    python3 train.py
      --steps 3
"""
PLATFORM = Platform("127.0.0.1:2379", "learnerkit/sidecar:0.1.0")


def plan(learners: int) -> JobDeployment:
    manifest = parse_manifest(MANIFEST.format(learners=learners))
    return plan_job(manifest, JobState("job-ab12", "team", manifest.name, 0.0), PLATFORM, "learnerkit/pytorch:2.13")


def test_every_learner_gets_ffdls_variables_and_learner_run_keeps_them() -> None:
    job = plan(3)
    second = job.learners[1]
    assert second.command == "python3 train.py   --steps 3"
    ffdl = {
        "TRAINING_ID": "job-ab12",
        "DLAAS_JOB_ID": "job-ab12",
        "LEARNER_NAME_PREFIX": "lk-job-ab12",
        "DOWNWARD_API_POD_NAME": "lk-job-ab12-2",
        "JOB_SHARED_DIR": "/job/shared",
        "NUM_LEARNERS": "3",
    }
    assert dict(second.learner_env) == ffdl
    assert second.name == ffdl["DOWNWARD_API_POD_NAME"]
    for env in (
        learner_options(second, docker_backend.placement(job, second), "vol")["environment"],
        env_of(ko.learner_container(job, second)),
    ):
        assert {**ffdl, "LEARNER_ID": "2"}.items() <= env.items()
        assert scrub_env(env).keys() >= {*ffdl, "LEARNER_ID", "GPU_COUNT", "JOB_ID"}


@pytest.mark.parametrize("learners", [1, 2])
def test_docker_learners_mount_the_jobs_volume_under_their_own_host_names(learners: int) -> None:
    job = plan(learners)
    for learner in job.learners:
        place = docker_backend.placement(job, learner)
        options = learner_options(learner, place, "pair-volume")
        # A single learner's job folder is a folder of its pair volume, made by its sidecar.
        shared = {"bind": SHARED_DIR, "mode": "rw"} if learners > 1 else None
        assert options["volumes"].get("lk-job-ab12-shared") == shared
        assert options["hostname"] == f"lk-job-ab12-{learner.learner_id}"
        # Learners of a multi-learner job reach each other by name; a single learner has no network at all.
        assert (options.get("network_mode") == "none") is (learners == 1)


def test_submit_refuses_what_validate_refuses_with_the_same_words() -> None:
    text = MANIFEST.format(learners=1).replace("    training_results: {container: results}\n", "")
    with pytest.raises(ManifestError) as validated:
        parse_manifest(text, "m.yml")
    options = SchedulerOptions(
        PLATFORM,
        catalog=None,
        resolve_image=lambda _: "image",
        submit_policy=SubmitPolicy(object_stores=("http://127.0.0.1:8333",)),
    )
    scheduler = Scheduler(JobStore(), Unreachable(), options)
    with pytest.raises(ManifestError) as submitted:
        asyncio.run(scheduler.submit("team", text, source="m.yml"))
    assert [str(p) for p in submitted.value.problems] == [str(p) for p in validated.value.problems]
    assert "no data store has training_results" in str(submitted.value)
