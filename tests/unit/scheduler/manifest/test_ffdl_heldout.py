"""Held-out FfDL-style manifests, written as FfDL's users wrote them: without `cpus`, without
`training_results`, with every name FfDL's collector selection read for `evaluation_metrics.type`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from learnerkit.cli import cli
from learnerkit.dev.scheduler import fitting_defaults
from learnerkit.scheduler.config.settings import resource_defaults
from learnerkit.scheduler.errors import ManifestError
from learnerkit.scheduler.manifest.defaultresults import DEFAULT_RESULTS_STORE_ID, default_results
from learnerkit.scheduler.manifest.model import FFDL_DEFAULTS, ResourceDefaults
from learnerkit.scheduler.manifest.parser import parse_manifest

REPO = Path(__file__).resolve().parents[4]
CATALOG = {"tensorflow": {"2.21", "2.21-cpu"}, "pytorch": {"2.13", "2.13-cpu"}}

# FfDL's tf-model shape: no cpus, no memory, a store with training data only.
NO_RESULTS = """\
name: tf_convolutional_network_tutorial
description: Convolutional network model using tensorflow
version: "1.0"
gpus: 0
learners: 1
data_stores:
  - id: sl-internal-os
    type: mount_cos
    training_data:
      container: tf_training_data
    connection:
      auth_url: http://s3.default.svc.cluster.local
      user_name: test
      password: tenant-secret-1
framework:
  name: tensorflow
  version: latest
  command: python3 convolutional_network.py --trainImagesFile ${DATA_DIR}/train-images-idx3-ubyte.gz
"""
WITH_RESULTS = NO_RESULTS.replace(
    "      container: tf_training_data\n",
    "      container: tf_training_data\n    training_results:\n      container: tf_trained_model\n",
)
SMALL = ResourceDefaults(cpus=1.0, memory_bytes=2**30, results_bucket="lk-results")


def test_a_manifest_without_cpus_gets_the_schedulers_defaults() -> None:
    job = parse_manifest(WITH_RESULTS, catalog=CATALOG, defaults=SMALL)
    assert (job.resources.cpus, job.resources.memory_bytes) == (1.0, 2**30)
    assert job.resources.defaulted == ("cpus", "memory")
    assert default_results(job) is None  # the manifest's own results store
    assert job.training_results_store is not None and job.training_results_store.id == "sl-internal-os"


def test_a_manifest_without_storage_gets_the_schedulers_default_and_one_with_it_keeps_its_own() -> None:
    bounded = ResourceDefaults(cpus=1.0, memory_bytes=2**30, storage_bytes=10 * 2**30)
    job = parse_manifest(WITH_RESULTS, catalog=CATALOG, defaults=bounded)
    assert (job.resources.storage_bytes, job.resources.defaulted) == (10 * 2**30, ("cpus", "memory", "storage"))
    own = parse_manifest("storage: 1Gb\n" + WITH_RESULTS, catalog=CATALOG, defaults=bounded)
    assert (own.resources.storage_bytes, own.resources.defaulted) == (10**9, ("cpus", "memory"))
    unbounded = parse_manifest(WITH_RESULTS, catalog=CATALOG, defaults=SMALL)
    assert (unbounded.resources.storage_bytes, unbounded.resources.defaulted) == (None, ("cpus", "memory"))


def test_a_manifest_with_cpus_keeps_them() -> None:
    job = parse_manifest("cpus: 0.5\nmemory: 2Gb\n" + WITH_RESULTS, catalog=CATALOG, defaults=SMALL)
    assert (job.resources.cpus, job.resources.memory_bytes, job.resources.defaulted) == (0.5, 2 * 10**9, ())


def test_results_go_to_the_default_results_store_in_a_folder_per_tenant() -> None:
    a = parse_manifest(NO_RESULTS, catalog=CATALOG, defaults=SMALL, tenant="team-a")
    b = parse_manifest(NO_RESULTS, catalog=CATALOG, defaults=SMALL, tenant="team-b")
    store = a.training_results_store
    assert store is not None and store.id == DEFAULT_RESULTS_STORE_ID and store.scheduler_default
    assert default_results(a) == "lk-results/tenants/team-a"
    assert default_results(b) == "lk-results/tenants/team-b"
    # On the training data's object store, under its credentials: the sidecar holds one set.
    data = a.training_data_store
    assert (store.type, dict(store.connection), dict(store.credentials)) == (
        data.type,
        dict(data.connection),
        dict(data.credentials),
    )
    assert a.to_dict()["data_stores"][1]["scheduler_default"] is True
    assert "tenant-secret-1" not in json.dumps(a.to_dict())


def test_without_a_default_results_store_the_refusal_names_the_setting() -> None:
    with pytest.raises(ManifestError) as caught:
        parse_manifest(NO_RESULTS, catalog=CATALOG, defaults=FFDL_DEFAULTS)
    assert "no data store has training_results" in str(caught.value)
    assert "LEARNERKIT_RESULTS_BUCKET" in str(caught.value)


def test_results_on_a_host_mount_stay_refused_with_the_default_store_on() -> None:
    text = NO_RESULTS.replace("type: mount_cos", "type: mount_volume").replace(
        "      auth_url: http://s3.default.svc.cluster.local\n      user_name: test\n      password: tenant-secret-1\n",
        "      type: host_mount\n      path: /data\n",
    )
    hosted = text.replace(
        "      container: tf_training_data\n",
        "      container: tf_training_data\n    training_results:\n      container: tf_trained_model\n",
    )
    with pytest.raises(ManifestError) as caught:
        parse_manifest(hosted, catalog=CATALOG, defaults=SMALL)
    assert "data_stores[0].training_results" in str(caught.value)
    assert "serves training data only" in str(caught.value)


@pytest.mark.parametrize(
    ("written", "collector"),
    [
        (None, "simple_log_collector"),
        ("logger", "simple_log_collector"),
        ("none", "simple_log_collector"),
        ("null", "simple_log_collector"),
        ("nil", "simple_log_collector"),
        ("tensorboard_extractor", "tensorboard"),
        ("optivist", "emetrics_file"),
        ("file", "emetrics_file"),
        ("emetrics_file", "emetrics_file"),
    ],
)
def test_ffdls_collector_names_are_accepted_and_mapped(written: str | None, collector: str) -> None:
    section = "evaluation_metrics:\n" + (f"  type: {written}\n" if written else "  in: $JOB_STATE_DIR/logs\n")
    if collector == "tensorboard":
        section += "  in: $JOB_STATE_DIR/logs/tb\n"
    job = parse_manifest(WITH_RESULTS + section, catalog=CATALOG)
    assert job.evaluation_metrics is not None and job.evaluation_metrics["type"] == collector


def test_an_unknown_collector_is_refused_naming_the_field() -> None:
    with pytest.raises(ManifestError) as caught:
        parse_manifest(WITH_RESULTS + "evaluation_metrics:\n  type: grafana\n", catalog=CATALOG)
    assert "evaluation_metrics.type" in str(caught.value) and "'grafana'" in str(caught.value)


def test_the_dev_environment_fits_its_defaults_to_a_small_node() -> None:
    two_cores = resource_defaults(fitting_defaults(2, 4 * 2**30))
    assert (two_cores.cpus, two_cores.memory_bytes, two_cores.results_bucket) == (1.0, 2 * 2**30, "training-results")
    large = resource_defaults(fitting_defaults(64, 512 * 2**30))
    assert (large.cpus, large.memory_bytes) == (FFDL_DEFAULTS.cpus, FFDL_DEFAULTS.memory_bytes)


def test_validate_says_which_defaults_it_applied_and_where_they_came_from(tmp_path: Path) -> None:
    path = tmp_path / "manifest.yml"
    path.write_text(NO_RESULTS.replace("version: latest", 'version: "2.21"'), encoding="utf-8")
    env = {
        "LEARNERKIT_DEFAULT_CPUS": "0.5",
        "LEARNERKIT_DEFAULT_STORAGE": "10GiB",
        "LEARNERKIT_RESULTS_BUCKET": "lk-results",
        "COLUMNS": "300",
    }
    runner = CliRunner()
    result = runner.invoke(cli, ["job", "validate", str(path), "--root", str(REPO), "--output", "json"], env=env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["defaults_applied"] == {
        "cpus": 0.5,
        "memory_bytes": 12 * 2**30,
        "storage_bytes": 10 * 2**30,
        "training_results": "lk-results/tenants/default",
    }
    text = runner.invoke(cli, ["job", "validate", str(path), "--root", str(REPO)], env=env)
    assert text.exit_code == 0, text.output
    applied = (
        "cpus 0.5 (LEARNERKIT_DEFAULT_CPUS), memory 12GiB (FfDL's default), storage 10GiB (LEARNERKIT_DEFAULT_STORAGE)"
    )
    assert applied in text.output, text.output
    assert "training_results lk-results/tenants/default (LEARNERKIT_RESULTS_BUCKET)" in text.output, text.output


def _validate(path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(
        cli, ["job", "validate", str(path), "--root", str(REPO), *args], env={"COLUMNS": "300"} | (env or {})
    )
    return result.exit_code, result.stdout, result.stderr


def test_offline_validate_accepts_a_manifest_without_training_results_and_says_submit_decides(tmp_path: Path) -> None:
    """FfDL accepted it, and a scheduler with a default results store runs it: offline, validate cannot know
    whether the scheduler has one, so it says where the results go on one that has, and that submit decides."""
    path = tmp_path / "manifest.yml"
    path.write_text(NO_RESULTS.replace("version: latest", 'version: "2.21"'), encoding="utf-8")
    code, out, _ = _validate(path, "--output", "json", env={"LEARNERKIT_RESULTS_BUCKET": ""})
    assert code == 0, out
    body = json.loads(out)
    assert body["valid"] is True
    assert body["defaults_applied"]["training_results"] == "<the scheduler's results bucket>/tenants/default"
    assert body["left_to_submit"] == {
        "training_results": "the manifest names no training_results: a scheduler with a default results store "
        "(LEARNERKIT_RESULTS_BUCKET) keeps the results in its bucket under tenants/default, on the training data's "
        "object store; one without refuses the manifest at submit"
    }
    code, out, _ = _validate(path)
    assert code == 0, out
    flat = " ".join(out.split())
    assert "one without refuses the manifest at submit" in flat, out
    assert "validate cannot know the scheduler's settings" in flat, out

    code, out, _ = _validate(path, "--results-bucket", "lk-results", "--output", "json")
    body = json.loads(out)
    assert body["defaults_applied"]["training_results"] == "lk-results/tenants/default"
    assert "left_to_submit" not in body
    code, out, _ = _validate(path, "--results-bucket", "lk-results", "--tenant", "team-a")
    assert "training_results lk-results/tenants/team-a (--results-bucket)" in out, out
    code, _, err = _validate(path, "--results-bucket", "Not_A_Bucket")
    assert code == 1 and "--results-bucket 'Not_A_Bucket': expected an S3 bucket name" in err


def test_offline_validate_still_refuses_results_nowhere_an_object_store_could_hold_them(tmp_path: Path) -> None:
    hosted = NO_RESULTS.replace("type: mount_cos", "type: mount_volume").replace(
        "      auth_url: http://s3.default.svc.cluster.local\n      user_name: test\n      password: tenant-secret-1\n",
        "      type: host_mount\n      path: /data\n",
    )
    path = tmp_path / "manifest.yml"
    path.write_text(hosted.replace("version: latest", 'version: "2.21"'), encoding="utf-8")
    code, _, err = _validate(path)
    assert code == 1
    assert "no data store has training_results" in err, err
