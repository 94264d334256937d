"""Two schedulers on one etcd root: the second is refused, naming the first, until the first stops."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

from learnerkit.common.signing import create_signer
from learnerkit.scheduler.config.settings import EtcdSettings, SchedulerSettings, SigningSettings
from learnerkit.scheduler.errors import SettingsError
from learnerkit.scheduler.factory import create_scheduler

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(300)]


def test_a_second_scheduler_on_one_etcd_root_is_refused(etcd_server: Any, tmp_path: Path) -> None:
    root = f"/learnerkit-lock-test-{uuid.uuid4().hex[:8]}/jobs"
    key = tmp_path / "signing-key.pem"
    create_signer(key)
    settings = SchedulerSettings(
        etcd=EtcdSettings(endpoints=(etcd_server.endpoint,), root=root), signing=SigningSettings(key=key)
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
