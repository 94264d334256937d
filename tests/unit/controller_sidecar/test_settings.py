"""Sidecar settings: every bad value is refused with the variable or field named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller_sidecar.endpoints import Endpoints
from controller_sidecar.errors import SidecarConfigError
from controller_sidecar.settings import load_settings

ENV = {"ETCD_ENDPOINTS": "127.0.0.1:2379", "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
DOC = {
    "job_id": "job-1",
    "learner_id": 1,
    "data": {"bucket": "training-data", "prefix": "mnist"},
    "model": {"bucket": "models", "key": "job-1/model.zip"},
    "results": {"bucket": "results", "prefix": "job-1/learner-1"},
    "timing": {"halt_grace_s": 5, "checkpoint_interval_s": 60},
}


def settings_from(doc: dict[str, object], tmp_path: Path, **env: str) -> object:
    path = tmp_path / "sidecar.json"
    path.write_text(json.dumps(doc))
    return load_settings({**ENV, **env}, config_path=path)


def test_valid_config_and_secrets_from_environment(tmp_path: Path) -> None:
    settings = load_settings({**ENV, "LEARNERKIT_SIDECAR_CONFIG_JSON": json.dumps(DOC)})
    assert settings.job_id == "job-1" and settings.etcd.endpoints == ("127.0.0.1:2379",)
    assert settings.locations.data is not None and settings.locations.data.prefix == "mnist/"
    assert settings.locations.checkpoint_files.prefix == "job-1/learner-1/checkpoints/"
    assert settings.timing.halt_grace_s == 5 and settings.s3.secret_key == "s"


def test_secret_keys_are_not_in_repr() -> None:
    settings = load_settings(
        {**ENV, "AWS_SECRET_ACCESS_KEY": "TOPSECRET", "LEARNERKIT_SIDECAR_CONFIG_JSON": json.dumps(DOC)}
    )
    assert "TOPSECRET" not in repr(settings)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"job_id": "bad id!"}, "job_id"),
        ({"learner_id": 0}, "learner_id"),
        ({"learner_id": 3, "num_learners": 2}, "num_learners"),
        ({"data": {"bucket": "NO_SUCH", "prefix": ""}}, "data.bucket"),
        ({"results": None}, "results.bucket"),
        ({"model": {"bucket": "models"}}, "model.key"),
        ({"timing": {"halt_grace_s": -1}}, "timing.halt_grace_s"),
        ({"data": {"bucket": "training-data", "prefix": "a/../b"}}, "data.prefix"),
        ({"data": {"mode": "sideways"}}, "data.mode"),
    ],
)
def test_bad_values_name_their_field(tmp_path: Path, change: dict[str, object], named: str) -> None:
    with pytest.raises(SidecarConfigError, match=named.replace(".", r"\.")):
        settings_from({**DOC, **change}, tmp_path)


def test_missing_etcd_endpoints_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(SidecarConfigError, match="ETCD_ENDPOINTS"):
        settings_from(DOC, tmp_path, ETCD_ENDPOINTS="")


def test_unreadable_config_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(SidecarConfigError, match=r"nowhere\.yaml"):
        load_settings(ENV, config_path=tmp_path / "nowhere.yaml")


def test_mount_mode_needs_no_data_bucket(tmp_path: Path) -> None:
    settings = settings_from({**DOC, "data": {"mode": "mount"}}, tmp_path)
    assert settings.locations.data is None and settings.locations.data_mode == "mount"


def test_what_a_producer_puts_in_endpoints_is_what_the_sidecar_reads() -> None:
    endpoints = Endpoints(
        etcd_endpoints="10.0.0.1:2379,10.0.0.2:2379",
        etcd_username="job-1",
        etcd_password="etcd-pw",
        s3_endpoint_url="http://s3.local:8333",
        s3_access_key="AK",
        s3_secret_key="SK",
    )
    environ = {**endpoints.env(), "LEARNERKIT_SIDECAR_CONFIG_JSON": json.dumps(DOC)}
    settings = load_settings(environ)
    assert settings.etcd.endpoints == ("10.0.0.1:2379", "10.0.0.2:2379")
    assert (settings.etcd.username, settings.etcd.password) == ("job-1", "etcd-pw")
    assert (settings.s3.endpoint_url, settings.s3.access_key, settings.s3.secret_key) == (
        "http://s3.local:8333",
        "AK",
        "SK",
    )


def test_endpoints_leave_unset_values_out_of_the_environment() -> None:
    assert Endpoints("127.0.0.1:2379").env() == {"ETCD_ENDPOINTS": "127.0.0.1:2379"}
