"""The service's settings from the environment and options, and `scheduler serve` before the service exists."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from learnerkit.common.errors import ConfigError
from learnerkit.common.signing import create_signer, load_signer, public_pem
from learnerkit.pair.jobdisk import JobDiskSettings
from learnerkit.pair.spec import PidsLimits
from learnerkit.scheduler import cli_scheduler
from learnerkit.scheduler.api import server
from learnerkit.scheduler.api.connections import ConnectionLimits
from learnerkit.scheduler.api.hosting import SchedulerFactory
from learnerkit.scheduler.config.settings import BackendKind, SchedulerSettings
from learnerkit.scheduler.errors import SchedulerError, SettingsError
from learnerkit.scheduler.factory import create_scheduler
from learnerkit.scheduler.manifest.model import ResourceDefaults


def test_defaults_listen_on_loopback() -> None:
    settings = SchedulerSettings.from_env({})
    assert (settings.api.host, settings.api.port) == ("127.0.0.1", 8080)
    assert settings.etcd.endpoints == ("127.0.0.1:2379",)
    assert settings.backend.kind is BackendKind.DOCKER


def test_from_env_reads_each_group() -> None:
    settings = SchedulerSettings.from_env(
        {
            "LEARNERKIT_SCHEDULER_PORT": "9000",
            "LEARNERKIT_SCHEDULER_TOKENS": "/srv/tokens.json",
            "ETCD_ENDPOINTS": "http://10.0.0.1:2379, 10.0.0.2:2379",
            "ETCD_PASSWORD": "etcd-secret",
            "S3_ENDPOINT_URL": "http://127.0.0.1:8333",
            "AWS_SECRET_ACCESS_KEY": "s3-secret",
            "LEARNERKIT_SCHEDULER_BACKEND": "kubernetes",
            "LEARNERKIT_SCHEDULER_HOST": "",
        }
    )
    assert settings.api.port == 9000
    assert settings.api.host == "127.0.0.1", "an empty variable counts as unset"
    assert settings.api.tokens == Path("/srv/tokens.json")
    assert settings.etcd.endpoints == ("10.0.0.1:2379", "10.0.0.2:2379")
    assert settings.s3.endpoint_url == "http://127.0.0.1:8333"
    assert settings.backend.kind is BackendKind.KUBERNETES
    assert "secret" not in repr(settings)


def test_the_connection_limits_have_defaults_and_come_from_the_environment() -> None:
    default = ConnectionLimits.from_settings(SchedulerSettings.from_env({}))
    assert (default.head_timeout_s, default.max_per_address, default.max_total) == (30.0, 64, 512)
    assert (default.body_idle_s, default.body_total_s) == (65.0, 3605.0), "5 s after the submit's own timeouts"
    limits = ConnectionLimits.from_settings(
        SchedulerSettings.from_env(
            {
                "LEARNERKIT_API_HEAD_TIMEOUT_S": "7.5",
                "LEARNERKIT_API_MAX_CONNECTIONS": "100",
                "LEARNERKIT_API_MAX_CONNECTIONS_PER_ADDRESS": "10",
                "LEARNERKIT_UPLOAD_IDLE_S": "20",
                "LEARNERKIT_UPLOAD_TOTAL_S": "600",
            }
        )
    )
    assert limits == ConnectionLimits(
        head_timeout_s=7.5, body_idle_s=25.0, body_total_s=605.0, max_per_address=10, max_total=100
    )


def test_limits_and_trust_come_from_the_environment() -> None:
    settings = SchedulerSettings.from_env(
        {
            "S3_ENDPOINT_URL": "http://127.0.0.1:8333",
            "LEARNERKIT_OBJECT_STORES": "https://S3.internal, http://127.0.0.1:8333/",
            "LEARNERKIT_HOST_PATHS": "/srv/datasets",
            "LEARNERKIT_IMAGE_ALLOWLIST": "learnerkit/*:*",
            "LEARNERKIT_MAX_LEARNERS": "8",
            "LEARNERKIT_MANIFEST_PARSE_BUDGET_S": "0.5",
            "LEARNERKIT_SCHEDULER_INSTANCE": "lk-a",
        }
    )
    assert settings.trust.allowed_stores(settings.s3) == ("https://s3.internal:443", "http://127.0.0.1:8333")
    assert (settings.trust.host_paths, settings.trust.images) == (("/srv/datasets",), ("learnerkit/*:*",))
    assert (settings.limits.max_learners, settings.limits.parse_budget_s) == (8, 0.5)
    assert settings.limits.max_manifest_bytes == 256 * 1024
    assert settings.trust.instance == "lk-a"


def test_pids_limits_have_defaults_and_come_from_the_environment() -> None:
    assert SchedulerSettings.from_env({}).limits.pids == PidsLimits(learner=4096, sidecar=512)
    settings = SchedulerSettings.from_env(
        {"LEARNERKIT_LEARNER_PIDS_LIMIT": "200", "LEARNERKIT_SIDECAR_PIDS_LIMIT": "64"}
    )
    assert settings.limits.pids == PidsLimits(learner=200, sidecar=64)


def test_the_job_disk_settings_have_defaults_and_come_from_the_environment() -> None:
    assert SchedulerSettings.from_env({}).backend.job_disk == JobDiskSettings(Path("/var/lib/learnerkit/job-disks"))
    env = {"LEARNERKIT_JOB_DISK_DIR": "/srv/disks", "LEARNERKIT_JOB_DISK_UNBOUNDED": "1"}
    assert SchedulerSettings.from_env(env).backend.job_disk == JobDiskSettings(Path("/srv/disks"), unbounded=True)


def test_resource_defaults_and_the_shared_claim_come_from_the_environment() -> None:
    assert SchedulerSettings.from_env({}).limits.defaults == ResourceDefaults(cpus=5.0, memory_bytes=12 * 2**30)
    settings = SchedulerSettings.from_env(
        {
            "LEARNERKIT_DEFAULT_CPUS": "0.5",
            "LEARNERKIT_DEFAULT_MEMORY": "2GiB",
            "LEARNERKIT_DEFAULT_STORAGE": "20GiB",
            "LEARNERKIT_K8S_SHARED_STORAGE_CLASS": "nfs-client",
            "LEARNERKIT_K8S_SHARED_SIZE": "50Gi",
        }
    )
    assert settings.limits.defaults == ResourceDefaults(cpus=0.5, memory_bytes=2 * 2**30, storage_bytes=20 * 2**30)
    assert (settings.backend.shared_storage_class, settings.backend.shared_size) == ("nfs-client", "50Gi")


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({"LEARNERKIT_SCHEDULER_PORT": "http"}, "LEARNERKIT_SCHEDULER_PORT='http'"),
        ({"LEARNERKIT_SCHEDULER_PORT": "70000"}, "LEARNERKIT_SCHEDULER_PORT='70000'"),
        ({"ETCD_ENDPOINTS": "etcd"}, "'etcd' is not host:port"),
        ({"ETCD_ENDPOINTS": " , "}, "at least one host:port"),
        ({"LEARNERKIT_SCHEDULER_BACKEND": "slurm"}, "docker, kubernetes"),
        ({"LEARNERKIT_MAX_LEARNERS": "0"}, "LEARNERKIT_MAX_LEARNERS='0': expected a number above 0"),
        ({"LEARNERKIT_MAX_MANIFEST_BYTES": "lots"}, "LEARNERKIT_MAX_MANIFEST_BYTES='lots'"),
        ({"LEARNERKIT_OBJECT_STORES": "s3.internal:8333"}, "'s3.internal:8333' is not an http(s) URL"),
        ({"LEARNERKIT_HOST_PATHS": "data"}, "'data' is not an absolute folder"),
        ({"LEARNERKIT_DEFAULT_CPUS": "five"}, "LEARNERKIT_DEFAULT_CPUS='five': expected a number above 0"),
        ({"LEARNERKIT_DEFAULT_MEMORY": "12"}, "LEARNERKIT_DEFAULT_MEMORY: '12' has no unit"),
        ({"LEARNERKIT_DEFAULT_STORAGE": "12"}, "LEARNERKIT_DEFAULT_STORAGE: '12' has no unit"),
        ({"LEARNERKIT_DEFAULT_STORAGE": "0GiB"}, "LEARNERKIT_DEFAULT_STORAGE: '0GiB' must be more than 0 bytes"),
        ({"LEARNERKIT_LEARNER_PIDS_LIMIT": "many"}, "LEARNERKIT_LEARNER_PIDS_LIMIT='many': expected a number above"),
        ({"LEARNERKIT_SIDECAR_PIDS_LIMIT": "8"}, "LEARNERKIT_SIDECAR_PIDS_LIMIT='8': expected at least 16"),
        ({"LEARNERKIT_JOB_DISK_UNBOUNDED": "yes"}, "LEARNERKIT_JOB_DISK_UNBOUNDED='yes': expected 0 or 1"),
        ({"LEARNERKIT_NODE_LOST_GRACE_S": "0"}, "LEARNERKIT_NODE_LOST_GRACE_S='0': expected a number above 0"),
        ({"LEARNERKIT_API_HEAD_TIMEOUT_S": "0"}, "LEARNERKIT_API_HEAD_TIMEOUT_S='0': expected a number above 0"),
        ({"LEARNERKIT_API_MAX_CONNECTIONS": "all"}, "LEARNERKIT_API_MAX_CONNECTIONS='all'"),
    ],
)
def test_bad_values_are_named(environ: dict[str, str], named: str) -> None:
    with pytest.raises(SettingsError, match=re.escape(named)):
        SchedulerSettings.from_env(environ)


def test_options_override_the_environment_and_none_keeps_it() -> None:
    base = SchedulerSettings.from_env({"LEARNERKIT_SCHEDULER_PORT": "9000", "LEARNERKIT_S3_BUCKET": "jobs"})
    settings = base.with_overrides(api={"port": 9100, "host": None}, s3={"bucket": None})
    assert (settings.api.port, settings.api.host, settings.s3.bucket) == (9100, "127.0.0.1", "jobs")


def test_serve_is_handed_the_real_factory(monkeypatch: pytest.MonkeyPatch) -> None:
    handed: list[tuple[SchedulerSettings, SchedulerFactory]] = []
    monkeypatch.setattr(server, "serve", lambda settings, factory: handed.append((settings, factory)))
    result = CliRunner().invoke(cli_scheduler.scheduler_group, ["serve", "--port", "9100"], env={})
    assert result.exit_code == 0, result.output
    [(settings, factory)] = handed
    assert settings.api.port == 9100 and factory is create_scheduler


def test_the_factory_builds_the_real_service_and_refuses_a_backend_it_cannot_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from learnerkit.scheduler.backends.deployment import Egress
    from learnerkit.scheduler.factory import egress_from

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    from learnerkit.scheduler.core.scheduler import Scheduler

    key = tmp_path / "signing-key.pem"
    pem = public_pem(create_signer(key))
    hosted = create_scheduler(SchedulerSettings.from_env({"LEARNERKIT_SIGNING_KEY": str(key)}))
    assert isinstance(hosted.facade, Scheduler) and hosted.registry is hosted.facade.shared.metrics.registry
    assert hosted.public_key == pem
    no_cluster = {
        "LEARNERKIT_SCHEDULER_BACKEND": "kubernetes",
        "KUBECONFIG": str(tmp_path / "none"),
        "LEARNERKIT_SIGNING_KEY": str(key),
    }
    with pytest.raises(SchedulerError, match="no Kubernetes configuration"):
        create_scheduler(SchedulerSettings.from_env(no_cluster))
    with pytest.raises(SchedulerError, match=r"LEARNERKIT_K8S_EGRESS: 'etcd:2379' is not CIDR:port"):
        egress_from(("etcd:2379",))
    assert egress_from(("10.0.0.0/8:2379",)) == (Egress("10.0.0.0/8", 2379),)


@pytest.mark.parametrize("content", [None, b"not a key", b""])
def test_the_factory_refuses_to_start_without_a_readable_signing_key(tmp_path: Path, content: bytes | None) -> None:
    key = tmp_path / "signing-key.pem"
    if content is not None:
        key.write_bytes(content)
    with pytest.raises(ConfigError, match=rf"LEARNERKIT_SIGNING_KEY={re.escape(str(key))}"):
        create_scheduler(SchedulerSettings.from_env({"LEARNERKIT_SIGNING_KEY": str(key)}))


def test_the_factory_refuses_a_key_that_is_not_p256(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = tmp_path / "signing-key.pem"
    other = ec.generate_private_key(ec.SECP384R1())
    key.write_bytes(
        other.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    with pytest.raises(ConfigError, match=r"LEARNERKIT_SIGNING_KEY=.* is not an ECDSA P-256 private key"):
        create_scheduler(SchedulerSettings.from_env({"LEARNERKIT_SIGNING_KEY": str(key)}))


def test_key_create_makes_a_key_once_and_keeps_it(tmp_path: Path) -> None:
    key = tmp_path / "keys" / "signing-key.pem"
    first = CliRunner().invoke(cli_scheduler.scheduler_group, ["key", "create", "--key", str(key), "-o", "json"])
    assert first.exit_code == 0, first.output
    made = json.loads(first.output)
    assert made["pem"] == public_pem(load_signer(key)) == (tmp_path / "keys" / "signing-key.pub").read_text()
    assert key.stat().st_mode & 0o777 == 0o600
    again = CliRunner().invoke(cli_scheduler.scheduler_group, ["key", "create", "--key", str(key)])
    assert again.exit_code != 0 and "a key is there already; it is kept" in again.output
    assert public_pem(load_signer(key)) == made["pem"]


def test_the_node_lost_grace_is_read() -> None:
    assert SchedulerSettings.from_env({}).limits.node_lost_grace_s == 60.0
    assert SchedulerSettings.from_env({"LEARNERKIT_NODE_LOST_GRACE_S": "120"}).limits.node_lost_grace_s == 120.0
