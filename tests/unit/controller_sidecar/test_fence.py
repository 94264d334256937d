"""The sidecar's fence (docs/security.md, "Fencing"): writes go only while its lease is known held by its own clock,
wait while it may have lapsed, and stop for good once the job is fenced to another attempt; a lost fence halts the
learner as a halt key would, and the sidecar's store refuses every write before sending it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from controller_sidecar.control import EXIT_FILE, HALT_FILE
from controller_sidecar.fence import HELD_FRACTION, Fence, FencedError, LeaseLapsedError
from controller_sidecar.runtime import Sidecar, _open_store
from controller_sidecar.settings import load_settings

pytestmark = pytest.mark.timeout(20)
ENV = {"ETCD_ENDPOINTS": "127.0.0.1:2379", "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
TTL_S = 9.0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_writes_go_from_a_refresh_until_two_thirds_of_the_ttl_after_it_was_sent() -> None:
    clock = Clock()
    fence = Fence(2, TTL_S, clock=clock)
    with pytest.raises(LeaseLapsedError):
        fence.check("s3://r/k")  # no lease yet
    sent = clock.now
    clock.now += 1.0  # the answer came a second later: the TTL counts from the sending, the earlier
    fence.refreshed(sent)
    fence.check("s3://r/k")
    clock.now = sent + TTL_S * HELD_FRACTION - 0.01
    fence.check("s3://r/k")
    clock.now = sent + TTL_S * HELD_FRACTION
    with pytest.raises(LeaseLapsedError, match="s3://r/k: waiting"):
        fence.check("s3://r/k")
    fence.refreshed(clock.now)
    fence.check("s3://r/k")
    fence.lapsed()  # etcd said it expired
    with pytest.raises(LeaseLapsedError):
        fence.check("s3://r/k")


def test_a_lost_fence_refuses_for_good_and_says_so_once() -> None:
    clock, calls = Clock(), []
    fence = Fence(2, TTL_S, lambda: calls.append("lost"), clock)
    fence.refreshed(clock.now)
    fence.lose("the job's fence names attempt 3, not 2")
    fence.lose("again")
    fence.refreshed(clock.now)  # a refresh in flight as it was lost gives nothing back
    with pytest.raises(FencedError, match=r"s3://r/k: refused, this attempt is fenced \(the job's fence names"):
        fence.check("s3://r/k")
    assert calls == ["lost"]


def test_a_sidecar_without_an_attempt_is_not_guarded() -> None:
    fence = Fence(None, TTL_S)
    assert not fence.guarded
    fence.check("s3://r/k")  # sidecar run-local: no scheduler moves its job


def sidecar(tmp_path: Path) -> Sidecar:
    doc = {
        "job_id": "job-1",
        "learner_id": 1,
        "results": {"bucket": "results", "prefix": "job-1/attempt-2/learner-1/"},
        "data": {"mode": "mount"},
        "job_dir": str(tmp_path / "job"),
        "timing": {"poll_interval_s": 0.01},
    }
    (tmp_path / "job" / "control").mkdir(parents=True)
    return Sidecar(load_settings({**ENV, "LEARNERKIT_SIDECAR_CONFIG_JSON": json.dumps(doc)}), asyncio.Event())


def test_a_lost_fence_halts_the_learner(tmp_path: Path) -> None:
    side = sidecar(tmp_path)
    control = side.settings.dirs.control
    assert side.fence.attempt == 2

    async def scenario() -> None:
        waiting = asyncio.create_task(side._await_exit())
        await asyncio.sleep(0.05)
        assert not (control / HALT_FILE).exists()
        side.fence.lose("the job's fence names attempt 3, not 2")
        async with asyncio.timeout(10):
            while not (control / HALT_FILE).exists():
                await asyncio.sleep(0.01)
        (control / EXIT_FILE).write_text(json.dumps({"exit_code": 0, "reason": "halted"}))
        record, halt_sent = await asyncio.wait_for(waiting, 10)
        assert (record.reason, halt_sent) == ("halted", True)

    asyncio.run(scenario())


def test_a_fenced_sidecars_store_refuses_a_write_before_sending_it(tmp_path: Path) -> None:
    side = sidecar(tmp_path)
    store = _open_store(side.settings.s3, side.fence)  # no store answers here: a write sent would fail otherwise
    side.fence.lose("the job's fence names attempt 3, not 2")
    with pytest.raises(FencedError, match="s3://results/job-1/attempt-2/learner-1/x: refused"):
        store.put_bytes("results", "job-1/attempt-2/learner-1/x", b"late")
    with pytest.raises(FencedError):
        store.start_multipart("results", "job-1/attempt-2/learner-1/y")
