"""A job with model code as the sidecars and learners get it: the archive's key, the index, PYTHONPATH; and
the submit options as etcd keeps them for a restart."""

from __future__ import annotations

import json
from pathlib import Path

from controller_sidecar.requirements import PackageIndex
from controller_sidecar.settings import load_settings
from learnerkit.scheduler.core.planning import Platform, plan_job
from learnerkit.scheduler.jobs.layout import model_location
from learnerkit.scheduler.jobs.state import JobState
from learnerkit.scheduler.jobs.submission import ModelObject, SubmitOptions
from learnerkit.scheduler.manifest.parser import parse_manifest
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
