"""A job with model code as the sidecars and learners get it: the archive's key, the index, PYTHONPATH; and
the submit options as etcd keeps them for a restart."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from controller_sidecar.requirements import PackageIndex
from controller_sidecar.settings import load_settings
from learnerkit.scheduler.backends.k8s_objects import job_objects
from learnerkit.scheduler.config.packageindex import sidecar_packages
from learnerkit.scheduler.config.settings import SchedulerSettings
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.core.planning import Platform, plan_job
from learnerkit.scheduler.core.scheduler import Scheduler
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.jobs.layout import model_location
from learnerkit.scheduler.jobs.state import JobState
from learnerkit.scheduler.jobs.submission import ModelObject, SubmitOptions
from learnerkit.scheduler.manifest.parser import parse_manifest
from tests.unit.scheduler.core.test_learner_ended import FakeBackend, MemoryStore
from tests.unit.scheduler.fakefacade import MANIFEST

PLATFORM = Platform(etcd_endpoints="127.0.0.1:2379", sidecar_image="learnerkit/sidecar:test")


def manifest() -> object:
    return parse_manifest(MANIFEST.format(gpus=0).replace("gpu_type: nvidia-a100\n", ""))


def test_the_model_lies_beside_the_jobs_attempts() -> None:
    assert model_location(manifest(), "job-abc") == ("results", "job-abc/model/model.zip")  # type: ignore[arg-type]


def test_a_model_with_requirements_reaches_the_sidecar_config_and_the_learners_pythonpath() -> None:
    state = JobState("job-abc", "team-a", "mnist", 0.0)
    options = SubmitOptions(model=ModelObject("results", "job-abc/model/model.zip", 10, requirements=True))
    index = PackageIndex("http://idx.local/simple", trusted_hosts=("idx.local",), python_version="3.11")
    plan = plan_job(manifest(), state, PLATFORM, "img:1", None, options, index)  # type: ignore[arg-type]
    for pair in plan.learners:
        assert pair.learner_env["PYTHONPATH"] == "/job/packages"
        assert pair.learner_env["TRAINING_ID"] == "job-abc"
        environ = {
            "LEARNERKIT_SIDECAR_CONFIG_JSON": json.dumps(pair.sidecar_config),
            "ETCD_ENDPOINTS": "127.0.0.1:2379",
            "JOB_ID": pair.job_id,
            "LEARNER_ID": str(pair.learner_id),
            "NUM_LEARNERS": str(pair.num_learners),
        }
        settings = load_settings(environ)
        assert settings.locations.model is not None
        assert (settings.locations.model.bucket, settings.locations.model.prefix) == (
            "results",
            "job-abc/model/model.zip",
        )
        assert settings.requirements == index
        assert settings.dirs.packages == Path("/job/packages")


def test_without_requirements_no_index_and_no_pythonpath() -> None:
    state = JobState("job-abc", "team-a", "mnist", 0.0)
    options = SubmitOptions(model=ModelObject("results", "job-abc/model/model.zip", 10, requirements=False))
    plan = plan_job(manifest(), state, PLATFORM, "img:1", None, options, PackageIndex())  # type: ignore[arg-type]
    assert "PYTHONPATH" not in plan.learners[0].learner_env
    assert "requirements" not in plan.learners[0].sidecar_config
    plain = plan_job(manifest(), state, PLATFORM, "img:1")  # type: ignore[arg-type]
    assert "model" not in plain.learners[0].sidecar_config


def test_submit_options_survive_their_stored_form() -> None:
    options = SubmitOptions(image="registry.local/x:1", model=ModelObject("b", "k/model/model.zip", 5, True))
    assert SubmitOptions.from_raw(options.to_raw()) == options
    assert SubmitOptions.from_raw(None) == SubmitOptions()
    assert SubmitOptions.from_raw(SubmitOptions().to_raw()) == SubmitOptions()


def test_the_plan_holds_the_images_lock_and_the_platforms_index_and_mounts() -> None:
    """What the loop plans for a job with requirements: the image's locked packages as pip's constraints, the
    platform's find-links and CA bundle, and the host files the sidecar sees them in, read-only."""
    mounts = {"/etc/learnerkit/pip/ca.pem": "/etc/ssl/proxy-ca.pem"}
    packages = PackageIndex(
        "https://idx.local/simple", find_links=("https://w.local/",), ca_bundle="/etc/learnerkit/pip/ca.pem"
    )
    options = SchedulerOptions(
        replace(PLATFORM, sidecar_mounts=mounts),
        catalog=None,
        resolve_image=lambda _: "img:1",
        packages=packages,
        python_of=lambda image: "3.11" if image == "img:1" else None,
        locked_of=lambda image: {"torch": "2.13.0+cpu"} if image == "img:1" else {},
    )
    scheduler = Scheduler(MemoryStore(), FakeBackend(), options)
    model = ModelObject("results", "job-abc/model/model.zip", 10, requirements=True)
    text = MANIFEST.format(gpus=0).replace("gpu_type: nvidia-a100\n", "")
    tracked = Tracked(
        JobState("job-abc", "team-a", "mnist", 0.0), parse_manifest(text), text, "m.yml", SubmitOptions(model=model)
    )
    plan = scheduler.loop._plan_for(tracked, "img:1")
    for pair in plan.learners:
        requirements = PackageIndex.from_config(pair.sidecar_config["requirements"])
        assert requirements == replace(packages, python_version="3.11", locked={"torch": "2.13.0+cpu"})
        assert pair.sidecar_mounts == mounts


@pytest.mark.parametrize("backend", ["docker", "kubernetes"])
def test_the_ca_bundle_reaches_the_sidecar_at_one_path_mounted_on_docker_and_as_content_on_kubernetes(
    backend: str, tmp_path: Path
) -> None:
    """Issue 40: on Docker the host's CA bundle is bind-mounted; on Kubernetes, whose nodes do not see the
    scheduler's host, its content travels with the job (the job's Secret, mounted read-only at the same path)."""
    pem = "-----BEGIN CERTIFICATE-----\nMIIBproxyCA\n-----END CERTIFICATE-----\n"
    (tmp_path / "ca.pem").write_text(pem)
    settings = SchedulerSettings.from_env({"LEARNERKIT_PIP_CA_BUNDLE": str(tmp_path / "ca.pem")}).packages
    packages = sidecar_packages(settings, {}, can_mount=backend == "docker")
    platform = replace(PLATFORM, sidecar_mounts=packages.mounts, sidecar_files=packages.files)
    state = JobState("job-abc", "team-a", "mnist", 0.0)
    options = SubmitOptions(model=ModelObject("results", "job-abc/model/model.zip", 10, requirements=True))
    plan = plan_job(manifest(), state, platform, "img:1", None, options, packages.index)  # type: ignore[arg-type]
    for pair in plan.learners:
        assert PackageIndex.from_config(pair.sidecar_config["requirements"]).ca_bundle == "/etc/learnerkit/pip/ca.pem"
        if backend == "docker":
            assert (pair.sidecar_mounts, pair.sidecar_files) == (
                {"/etc/learnerkit/pip/ca.pem": str(tmp_path / "ca.pem")},
                {},
            )
        else:
            assert (pair.sidecar_mounts, pair.sidecar_files) == ({}, {"/etc/learnerkit/pip/ca.pem": pem})
    if backend == "kubernetes":
        (secret,) = [obj for obj in job_objects(plan) if obj["kind"] == "Secret"]
        assert pem in secret["stringData"].values()
