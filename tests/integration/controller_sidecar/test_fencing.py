"""Fencing against a real etcd (docs/security.md, "Fencing"): a sidecar cut off from etcd stops writing before its
lease can expire, and once the scheduler fenced the job to its next attempt the old sidecar never takes a lease
again, its learner is halted and its status and metrics writes are refused by etcd's own compare.

The partition is the sidecar's alone: its gateway's calls fail while the scheduler's etcd connection works, as a
node cut off from the network would see it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from controller_sidecar import keys
from controller_sidecar.errors import TransientError
from controller_sidecar.etcdgateway import Json
from controller_sidecar.etcdstore import EtcdStore
from controller_sidecar.fence import Fence, FencedError, LeaseLapsedError
from controller_sidecar.status import Phase, StatusRecord
from learnerkit.scheduler.backends.protocol import NodeHealth
from learnerkit.scheduler.core.nodeloss import old_attempt_writes
from learnerkit.scheduler.jobs.store import JobStore
from tests.servers.etcd import EtcdServer
from tests.waiting import await_until

pytestmark = [pytest.mark.services, pytest.mark.timeout(90)]

TTL_S = 2


class Partition:
    """The sidecar's etcd calls fail as unanswered while ``cut`` (the store's gateway, wrapped in place)."""

    def __init__(self, store: EtcdStore) -> None:
        self.cut = False
        gateway = store._gateway
        real = gateway.call

        async def call(path: str, body: Mapping[str, Any], what: str) -> Json:
            if self.cut:
                raise TransientError(f"{what}: etcd at {gateway.endpoint} did not answer: partitioned (test)")
            return await real(path, body, what)

        gateway.call = call  # type: ignore[method-assign]


def writes(fence: Fence) -> bool:
    """Whether the sidecar's store writes would go now."""
    try:
        fence.check("s3://results/job/attempt-1/learner-1/x")
    except (FencedError, LeaseLapsedError):
        return False
    return True


def status(sequence: int, phase: Phase) -> StatusRecord:
    return StatusRecord(phase=phase, timestamp=datetime.now(UTC), learner_id=1, sequence=sequence)


async def first_time(predicate: Callable[[], Awaitable[bool]], timeout: float, message: str) -> float:
    """The monotonic time ``predicate`` first held (polled every 10 ms), within ``timeout``."""
    await await_until(predicate, timeout=timeout, interval=0.01, message=message)
    return time.monotonic()


def test_a_partitioned_sidecar_stops_writing_before_its_lease_expires_and_is_fenced_when_it_returns(
    etcd_server: EtcdServer, job_id: str
) -> None:
    alive = keys.learner_alive_key(job_id, 1)

    async def scenario() -> None:
        scheduler = await EtcdStore.connect(etcd_server.settings())
        sidecar = await EtcdStore.connect(etcd_server.settings())
        lost = asyncio.Event()
        fence = Fence(1, TTL_S, lost.set)
        partition = Partition(sidecar)
        try:
            async with sidecar.hold_alive(job_id, 1, TTL_S, fence=fence):
                await await_until(lambda: scheduler.get(alive), timeout=5, message="the alive key")
                await await_until(lambda: _writing(fence), timeout=5, message="writes allowed")
                await sidecar.put_status(job_id, status(1, Phase.PROCESSING), fence=fence)

                partition.cut = True
                refused = asyncio.create_task(
                    first_time(lambda: _refusing(fence), 3 * TTL_S, "the sidecar to stop writing")
                )
                await JobStore(scheduler).fence(job_id, 2)  # the scheduler moves the job on
                gone = await first_time(lambda: _absent(scheduler, alive), 5 * TTL_S, "the old lease to expire")
                assert await refused < gone, "the sidecar stopped writing before etcd let its lease go"

                partition.cut = False
                await asyncio.wait_for(lost.wait(), timeout=5 * TTL_S)
                assert "names attempt 2, not 1" in fence.reason
                assert await scheduler.get(alive) is None, "a fenced sidecar never takes a lease again"
                with pytest.raises(FencedError):
                    fence.check("s3://results/x")
                with pytest.raises(FencedError):
                    await sidecar.put_status(job_id, status(2, Phase.COMPLETED), fence=fence)
                with pytest.raises(FencedError):
                    await sidecar.put_metrics(job_id, 1, {"loss": 9.0}, fence=fence)
                stored = await scheduler.get(keys.learner_status_key(job_id, 1))
                assert stored is not None and StatusRecord.from_json(stored[0]).phase is Phase.PROCESSING
                assert await scheduler.get(keys.learner_metrics_key(job_id, 1)) is None

                await sidecar.put_status(job_id, status(1_000_000, Phase.PROCESSING), fence=Fence(2, TTL_S))
                stored = await scheduler.get(keys.learner_status_key(job_id, 1))
                assert stored is not None and StatusRecord.from_json(stored[0]).sequence == 1_000_000, (
                    "the attempt the fence names writes"
                )
        finally:
            await sidecar.close()
            await scheduler.close()

    asyncio.run(scenario())


def test_the_scheduler_moves_a_job_off_a_cut_off_node_only_once_its_old_learner_can_no_longer_write(
    etcd_server: EtcdServer, job_id: str
) -> None:
    """The node-loss step's question against real leases: the new attempt may start only once the old sidecar's
    lease is gone from etcd, and by then that sidecar refuses to write; a deleted node is not waited for."""
    lost_node = {"n1": NodeHealth(not_ready_since=0.0), "n2": NodeHealth()}
    deleted = {"n2": NodeHealth()}

    async def scenario() -> None:
        etcd = await EtcdStore.connect(etcd_server.settings())
        sidecar = await EtcdStore.connect(etcd_server.settings())
        fence, store = Fence(1, TTL_S), JobStore(etcd)
        partition = Partition(sidecar)
        try:
            async with sidecar.hold_alive(job_id, 1, TTL_S, fence=fence):
                await await_until(lambda: _writing(fence), timeout=5, message="writes allowed")
                partition.cut = True
                await store.fence(job_id, 2)
                assert await old_attempt_writes(store, job_id, ["n1"], lost_node), "its lease is held: wait"
                assert not await old_attempt_writes(store, job_id, ["n1"], deleted), "a deleted node runs nothing"
                await await_until(
                    lambda: _negated(old_attempt_writes(store, job_id, ["n1"], lost_node)),
                    timeout=5 * TTL_S,
                    interval=0.05,
                    message="the old attempt's lease to go",
                )
                assert not writes(fence), "the old sidecar had stopped writing when the scheduler may move on"
        finally:
            await sidecar.close()
            await etcd.close()

    asyncio.run(scenario())


def test_a_reachable_sidecar_sees_the_fence_at_its_next_refresh_and_gives_its_lease_up(
    etcd_server: EtcdServer, job_id: str
) -> None:
    """The scheduler then waits a third of the TTL, not all of it: the fenced sidecar revokes its own lease."""
    alive = keys.learner_alive_key(job_id, 1)

    async def scenario() -> None:
        scheduler = await EtcdStore.connect(etcd_server.settings())
        sidecar = await EtcdStore.connect(etcd_server.settings())
        lost = asyncio.Event()
        fence = Fence(3, 30, lost.set)
        try:
            async with sidecar.hold_alive(job_id, 1, 30, fence=fence):
                await await_until(lambda: scheduler.get(alive), timeout=5, message="the alive key")
                await JobStore(scheduler).fence(job_id, 4)
                await asyncio.wait_for(lost.wait(), timeout=15)
                await await_until(lambda: _absent(scheduler, alive), timeout=5, message="the revoked lease's key")
                assert not writes(fence)
        finally:
            await sidecar.close()
            await scheduler.close()

    asyncio.run(scenario())


def test_an_etcd_blip_past_the_ttl_suspends_writes_and_a_new_lease_resumes_them_while_the_fence_is_its_own(
    etcd_server: EtcdServer, job_id: str
) -> None:
    """Not moved on meanwhile, the sidecar takes a new lease and writes again: etcd away is a blip, not a loss."""
    alive = keys.learner_alive_key(job_id, 1)

    async def scenario() -> None:
        scheduler = await EtcdStore.connect(etcd_server.settings())
        sidecar = await EtcdStore.connect(etcd_server.settings())
        lost = asyncio.Event()
        fence = Fence(1, TTL_S, lost.set)
        partition = Partition(sidecar)
        try:
            await JobStore(scheduler).fence(job_id, 1)
            async with sidecar.hold_alive(job_id, 1, TTL_S, fence=fence):
                await await_until(lambda: _writing(fence), timeout=5, message="writes allowed")
                partition.cut = True
                await await_until(lambda: _absent(scheduler, alive), timeout=5 * TTL_S, message="the lease to expire")
                assert not writes(fence)
                partition.cut = False
                await await_until(lambda: scheduler.get(alive), timeout=5 * TTL_S, message="a new lease's key")
                await await_until(lambda: _writing(fence), timeout=5, message="writes again")
                assert not lost.is_set()
                await sidecar.put_status(job_id, status(1, Phase.PROCESSING), fence=fence)
        finally:
            await sidecar.close()
            await scheduler.close()

    asyncio.run(scenario())


async def _absent(store: EtcdStore, key: str) -> bool:
    return await store.get(key) is None


async def _writing(fence: Fence) -> bool:
    return writes(fence)


async def _refusing(fence: Fence) -> bool:
    return not writes(fence)


async def _negated(answer: Awaitable[bool]) -> bool:
    return not await answer
