"""`learnerkit scheduler public-key`: the platform's public key as the API serves it (uvicorn on 127.0.0.1)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from click.testing import CliRunner

from learnerkit.cli import cli
from learnerkit.common.signing import create_signer, public_key_from_pem, public_pem
from learnerkit.scheduler.api.app import create_app
from tests.unit.scheduler.conftest import Tenants
from tests.unit.scheduler.fakefacade import FakeFacade
from tests.waiting import wait_until


def served(fake: FakeFacade, tenants: Tenants, public_key: str | None) -> Iterator[str]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = create_app(fake, tenants.path, public_key=public_key)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(lambda: server.started, timeout=10, message="uvicorn to start")
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()


@pytest.fixture
def pem(tmp_path: Path) -> str:
    return public_pem(create_signer(tmp_path / "signing-key.pem"))


@pytest.fixture
def url(fake: FakeFacade, tenants: Tenants, pem: str) -> Iterator[str]:
    yield from served(fake, tenants, pem)


def test_public_key_prints_the_pem_the_api_serves_without_a_token(url: str, pem: str) -> None:
    shown = CliRunner().invoke(cli, ["scheduler", "public-key"], env={"LEARNERKIT_SCHEDULER_URL": url})
    assert shown.exit_code == 0, shown.output
    assert shown.output == pem and public_key_from_pem(pem.encode(), "served").keyval["public"] == pem
    as_json = CliRunner().invoke(cli, ["scheduler", "public-key", "--url", url, "-o", "json"])
    assert json.loads(as_json.output) == {"url": url, "pem": pem}


def test_a_scheduler_without_a_key_answers_not_found(fake: FakeFacade, tenants: Tenants) -> None:
    for url in served(fake, tenants, None):
        shown = CliRunner().invoke(cli, ["scheduler", "public-key", "--url", url, "-o", "json"])
        assert shown.exit_code == 1
        assert json.loads(shown.output)["error"]


def test_a_scheduler_without_a_key_list_gives_its_one_key(url: str, pem: str) -> None:
    """A scheduler from before `key rotate` serves no ``/v1/keys``: `job verify` takes its one key."""
    from learnerkit.scheduler.client.http import SchedulerClient

    client = SchedulerClient.from_env(url, None)
    try:
        assert client.public_keys() == [pem]
    finally:
        client.close()
