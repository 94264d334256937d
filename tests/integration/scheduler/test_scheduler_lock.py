"""Two schedulers on one etcd root: the second is refused, naming the first, until the first stops."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from controller_sidecar.etcdstore import EtcdStore
from learnerkit.common.signing import create_signer
from learnerkit.dev.ports import free_port
from learnerkit.scheduler.api.auth import add_token
from learnerkit.scheduler.config.settings import BackendSettings, EtcdSettings, SchedulerSettings, SigningSettings
from learnerkit.scheduler.errors import SettingsError
from learnerkit.scheduler.factory import create_scheduler
from tests.integration.conftest import REPO
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(300)]


def test_a_second_scheduler_on_one_etcd_root_is_refused(etcd_server: Any, tmp_path: Path) -> None:
    root = f"/learnerkit-lock-test-{uuid.uuid4().hex[:8]}/jobs"
    key = tmp_path / "signing-key.pem"
    create_signer(key)
    settings = SchedulerSettings(
        etcd=EtcdSettings(endpoints=(etcd_server.endpoint,), root=root),
        signing=SigningSettings(key=key),
        backend=BackendSettings(sidecar_image=f"sha256:{'0' * 64}"),  # pinned already: no image needed
    )
    first, second = create_scheduler(settings), create_scheduler(settings)
    assert first.lifespan is not None and second.lifespan is not None

    async def run() -> str:
        async with first.lifespan():
            with pytest.raises(SettingsError) as refused:
                async with second.lifespan():
                    pytest.fail("two schedulers serve one etcd root")
        async with second.lifespan():  # the first stopped: its lock went with it
            pass
        return str(refused.value)

    message = asyncio.run(run())
    assert f"another scheduler serves the etcd root {root}" in message
    assert f"{root}.lock is held by" in message and '"pid"' in message
    assert "LEARNERKIT_ETCD_ROOT" in message


def test_a_second_scheduler_serve_stops_with_one_line_and_exit_code_1(etcd_server: Any, tmp_path: Path) -> None:
    root = f"/learnerkit-lock-test-{uuid.uuid4().hex[:8]}/jobs"
    tokens = tmp_path / "tokens.json"
    add_token(tokens, "team-a")
    key = tmp_path / "signing-key.pem"
    create_signer(key)
    env = {
        **os.environ,
        "ETCD_ENDPOINTS": etcd_server.endpoint,
        "LEARNERKIT_ETCD_ROOT": root,
        "LEARNERKIT_SCHEDULER_TOKENS": str(tokens),
        "LEARNERKIT_SIDECAR_IMAGE": f"sha256:{'0' * 64}",
        "LEARNERKIT_SIGNING_KEY": str(key),
        "LEARNERKIT_SCHEDULER_HOST": "127.0.0.1",
        "NO_COLOR": "1",
    }
    serve = [sys.executable, "-m", "learnerkit", "scheduler", "serve"]
    first_port, second_port = free_port(), free_port()
    log = (tmp_path / "first.log").open("wb")
    first = subprocess.Popen([*serve, "--port", str(first_port)], env=env, cwd=REPO, stdout=log, stderr=log)
    try:
        wait_until(
            lambda: first.poll() is not None or healthy(first_port),
            timeout=120,
            message=lambda: (tmp_path / "first.log").read_text(),
        )
        assert first.poll() is None, (tmp_path / "first.log").read_text()
        second = subprocess.run(
            [*serve, "--port", str(second_port)], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
        )
    finally:
        first.terminate()
        first.wait(timeout=60)
        log.close()
    assert first.returncode == -signal.SIGTERM, (tmp_path / "first.log").read_text()
    assert asyncio.run(stored(etcd_server, f"{root}.lock")) is None, "a stopped scheduler leaves the root free"
    output = second.stdout + second.stderr
    assert second.returncode == 1, output
    assert "Traceback" not in output, output
    [error] = [line for line in output.splitlines() if line.startswith("error:")]
    assert f"another scheduler serves the etcd root {root}" in error and "LEARNERKIT_ETCD_ROOT" in error, output


async def stored(etcd_server: Any, key: str) -> tuple[bytes, int] | None:
    etcd = await EtcdStore.connect(etcd_server.settings())
    try:
        return await etcd.get(key)
    finally:
        await etcd.close()


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False
