"""A held sidecar (a preemptor's pair deployed while its victims checkpoint) starts its learner only once the job's
release key reads its attempt; a halt or its own termination first ends it HALTED without the learner starting."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from controller_sidecar import keys
from controller_sidecar.errors import SidecarError
from controller_sidecar.etcdstore import EtcdStore
from controller_sidecar.runtime import Sidecar
from controller_sidecar.settings import load_settings
from controller_sidecar.status import ErrorCode, Phase

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(20)]
ENV = {"ETCD_ENDPOINTS": "127.0.0.1:2379", "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}


class ReleaseKey(EtcdStore):
    """The one key a held sidecar waits on, in memory: ``wait_for_key`` answers once it holds the wanted value."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}
        self.changed = asyncio.Event()
        self.broken: SidecarError | None = None

    def put_value(self, key: str, value: bytes) -> None:
        self.values[key] = value
        self.changed.set()

    async def wait_for_key(self, key: str, wanted: bytes | None = None) -> bytes:
        while True:
            if self.broken is not None:
                raise self.broken
            value = self.values.get(key)
            if value is not None and wanted in (None, value):
                return value
            self.changed.clear()
            await self.changed.wait()


def held_sidecar(tmp_path: Path) -> Sidecar:
    doc = {
        "job_id": "job-1",
        "learner_id": 1,
        "results": {"bucket": "results"},
        "data": {"mode": "mount"},
        "job_dir": str(tmp_path / "job"),
        "held": {"attempt": 2},
    }
    return Sidecar(load_settings({**ENV, "LEARNERKIT_SIDECAR_CONFIG_JSON": json.dumps(doc)}), asyncio.Event())


async def test_it_waits_for_the_release_of_its_own_attempt(tmp_path: Path) -> None:
    sidecar, etcd = held_sidecar(tmp_path), ReleaseKey()
    waiting = asyncio.create_task(sidecar._await_release(etcd, 2))
    etcd.put_value(keys.release_key("job-1"), b"1")  # an earlier attempt's release: not this one
    for _ in range(50):  # every task of the wait gets its turns
        await asyncio.sleep(0)
    assert not waiting.done()
    etcd.put_value(keys.release_key("job-1"), b"2")
    assert await asyncio.wait_for(waiting, 5) is None


async def test_a_halt_while_held_ends_it_halted_before_the_learner_starts(tmp_path: Path) -> None:
    sidecar, etcd = held_sidecar(tmp_path), ReleaseKey()
    waiting = asyncio.create_task(sidecar._await_release(etcd, 2))
    sidecar.halted.set()
    outcome = await asyncio.wait_for(waiting, 5)
    assert outcome is not None and (outcome.phase, outcome.error_code) == (Phase.HALTED, ErrorCode.NONE)
    assert "before the learner started" in outcome.message


async def test_its_termination_while_held_ends_it_halted(tmp_path: Path) -> None:
    sidecar, etcd = held_sidecar(tmp_path), ReleaseKey()
    waiting = asyncio.create_task(sidecar._await_release(etcd, 2))
    sidecar.terminate.set()
    outcome = await asyncio.wait_for(waiting, 5)
    assert outcome is not None and outcome.phase is Phase.HALTED


async def test_etcd_that_cannot_say_fails_it_naming_the_wait(tmp_path: Path) -> None:
    sidecar, etcd = held_sidecar(tmp_path), ReleaseKey()
    etcd.broken = SidecarError("etcd refused the watch")
    outcome = await asyncio.wait_for(sidecar._await_release(etcd, 2), 5)
    assert outcome is not None and outcome.phase is Phase.FAILED
    assert "release of a held start" in outcome.message and "etcd refused the watch" in outcome.message
