"""HTTPS: `cert create` makes a CA and a server certificate, the `serve` configuration serves them on 127.0.0.1,
and the CLI verifies them against ``$LEARNERKIT_SCHEDULER_CA``, refusing any other certificate."""

from __future__ import annotations

import json
import socket
import ssl
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from click.testing import CliRunner

from learnerkit.cli import cli
from learnerkit.common.errors import ConfigError
from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.api.certificates import CertificateFiles, create_certificates
from learnerkit.scheduler.api.hsts import HSTS_HEADER
from learnerkit.scheduler.api.server import check_tls_files, uvicorn_config
from learnerkit.scheduler.client.http import SchedulerClient
from learnerkit.scheduler.config.settings import SchedulerSettings
from learnerkit.scheduler.errors import SchedulerUnreachableError, SettingsError
from tests.unit.scheduler.conftest import Tenants
from tests.unit.scheduler.fakefacade import FakeFacade
from tests.waiting import wait_until

PEM = "-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----\n"


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> CertificateFiles:
    return create_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def stranger(tmp_path_factory: pytest.TempPathFactory) -> CertificateFiles:
    """Another CA's files, for the same host names."""
    return create_certificates(tmp_path_factory.mktemp("stranger"))


@pytest.fixture
def https_url(fake: FakeFacade, tenants: Tenants, certificates: CertificateFiles) -> Iterator[str]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = create_app(fake, tenants.path, public_key=PEM)
    config = uvicorn_config(app, "127.0.0.1", port, "error", tls=(certificates.cert, certificates.key))
    running = uvicorn.Server(config)
    thread = threading.Thread(target=running.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(lambda: running.started, timeout=10, message="uvicorn to start")
    yield f"https://127.0.0.1:{port}"
    running.should_exit = True
    thread.join(timeout=10)
    sock.close()


def test_the_cli_verifies_the_certificate_against_the_ca_named(https_url: str, certificates: CertificateFiles) -> None:
    env = {"LEARNERKIT_SCHEDULER_URL": https_url, "LEARNERKIT_SCHEDULER_CA": str(certificates.ca)}
    result = CliRunner().invoke(cli, ["scheduler", "public-key", "--output", "json"], env=env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"url": https_url, "pem": PEM}
    assert "plain HTTP" not in result.stderr


def test_a_certificate_from_another_ca_is_refused(https_url: str, stranger: CertificateFiles) -> None:
    env = {"LEARNERKIT_SCHEDULER_URL": https_url, "LEARNERKIT_SCHEDULER_CA": str(stranger.ca)}
    result = CliRunner().invoke(cli, ["scheduler", "public-key", "--output", "json"], env=env)
    assert result.exit_code == 1, result.output
    assert "certificate is not trusted" in result.output
    assert str(stranger.ca) in result.output


def test_without_a_ca_file_the_local_ca_is_not_trusted(https_url: str) -> None:
    client = SchedulerClient(https_url, None)
    with pytest.raises(SchedulerUnreachableError, match=r"not trusted.*the system's CAs"):
        client.public_key()


def test_answers_over_https_carry_hsts(https_url: str, certificates: CertificateFiles) -> None:
    context = ssl.create_default_context(cafile=certificates.ca)
    port = int(https_url.rsplit(":", 1)[1])
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as conn,
    ):
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert b"%s: %s" % HSTS_HEADER in answer.lower()


def test_plain_http_to_another_host_is_warned_about() -> None:
    assert SchedulerClient("http://127.0.0.1:8080", None).plain_http_warning() is None
    assert SchedulerClient("http://localhost:8080", None).plain_http_warning() is None
    assert SchedulerClient("https://sched.example:8443", None).plain_http_warning() is None
    warning = SchedulerClient("http://sched.example:8080", None).plain_http_warning()
    assert warning is not None and "in clear" in warning and "https://" in warning


def test_cert_create_keeps_keys_private_and_never_replaces(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["scheduler", "cert", "create", "--dir", str(tmp_path), "--host", "sched.example", "--output", "json"]
    )
    assert result.exit_code == 0, result.output
    made = json.loads(result.stdout)
    assert made["hosts"] == ["sched.example"]
    for key in (made["key"], made["ca_key"]):
        assert stat.S_IMODE(Path(key).stat().st_mode) == 0o600
    before = Path(made["cert"]).read_bytes()
    again = CliRunner().invoke(cli, ["scheduler", "cert", "create", "--dir", str(tmp_path)])
    assert again.exit_code == 1
    assert "already there and kept" in again.stderr
    assert Path(made["cert"]).read_bytes() == before
    with pytest.raises(ConfigError, match="at least one host"):
        create_certificates(tmp_path / "none", ())


def test_serve_refuses_a_key_that_is_not_the_certificates(
    certificates: CertificateFiles, stranger: CertificateFiles
) -> None:
    with pytest.raises(SettingsError, match="cannot serve HTTPS"):
        check_tls_files(certificates.cert, stranger.key)
    with pytest.raises(SettingsError, match="give both"):
        SchedulerSettings.from_env({"LEARNERKIT_SCHEDULER_TLS_CERT": str(certificates.cert)}).api.tls()
