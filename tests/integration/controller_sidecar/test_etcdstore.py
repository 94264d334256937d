"""EtcdStore and StatusReporter against a real etcd, including outages (the server is stopped and started)."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Callable, Coroutine, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from controller_sidecar import keys
from controller_sidecar.errors import PermanentError, TransientError
from controller_sidecar.etcdgateway import Gateway, Json, b64
from controller_sidecar.etcdstore import PAGE_SIZE, EtcdStore, WatchEvent, status_seq_key
from controller_sidecar.settings import EtcdSettings
from controller_sidecar.status import Phase, StatusRecord
from controller_sidecar.statusqueue import StatusReporter
from learnerkit.dev.etcd import etcd_binary
from tests.servers.etcd import EtcdServer
from tests.waiting import await_until, holds_for

pytestmark = [pytest.mark.services, pytest.mark.timeout(90)]

OUTAGE_S = 3.0


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


def record(sequence: int, phase: Phase, learner_id: int = 1) -> StatusRecord:
    return StatusRecord(phase=phase, timestamp=datetime.now(UTC), learner_id=learner_id, sequence=sequence)


async def outage(server: EtcdServer, seconds: float, during: Callable[[], object] = lambda: True) -> None:
    """Stop etcd for ``seconds`` (checking ``during`` holds all along) and start it again."""
    await asyncio.to_thread(server.stop)
    try:
        await holds_for(during, seconds, interval=0.1, message="the outage condition")
    finally:
        await asyncio.to_thread(server.start)


def test_put_get_delete_and_prefix(etcd_server: EtcdServer, job_id: str) -> None:
    prefix = keys.job_prefix(job_id)

    async def scenario() -> None:
        store = await EtcdStore.connect(etcd_server.settings())
        try:
            revision = await store.put(prefix + "spec", '{"name": "toy"}')
            assert await store.get(prefix + "spec") == (b'{"name": "toy"}', revision)
            await store.put(prefix + "halt", b"now")
            assert await store.get_prefix(prefix) == {prefix + "spec": b'{"name": "toy"}', prefix + "halt": b"now"}
            await store.delete(prefix + "halt")
            assert await store.get(prefix + "halt") is None
            await store.put_metrics(job_id, 1, {"loss": 0.5, "step": 10})
            metrics = await store.get(keys.learner_metrics_key(job_id, 1))
            assert metrics is not None and json.loads(metrics[0]) == {"loss": 0.5, "step": 10}
        finally:
            await store.close()

    run(scenario)


def test_a_prefix_larger_than_a_page_is_read_whole_at_one_revision(etcd_server: EtcdServer, job_id: str) -> None:
    prefix = keys.job_prefix(job_id)
    count = 2 * PAGE_SIZE + 7
    written = {f"{prefix}k{i:05d}": f"v{i}" for i in range(count)}

    async def scenario() -> None:
        store = await EtcdStore.connect(etcd_server.settings())
        try:
            items = list(written.items())
            for start in range(0, count, 100):  # etcd allows 128 operations per transaction
                await store.put_all(dict(items[start : start + 100]))
            await store.put(prefix + "empty", b"")
            found = await store.get_prefix(prefix)
            assert found == {**{k: v.encode() for k, v in written.items()}, prefix + "empty": b""}
            await store.delete_prefix(prefix)
            assert await store.get_prefix(prefix) == {}
        finally:
            await store.close()

    run(scenario)


def test_connect_takes_the_first_endpoint_that_answers(etcd_server: EtcdServer) -> None:
    async def scenario() -> None:
        store = await EtcdStore.connect(EtcdSettings(endpoints=("127.0.0.1:1", etcd_server.endpoint)))
        assert store.endpoint == etcd_server.endpoint
        await store.close()
        with pytest.raises(TransientError, match="no etcd endpoint answered"):
            await EtcdStore.connect(EtcdSettings(endpoints=("127.0.0.1:1",)))

    run(scenario)


def test_put_status_writes_status_and_history_in_one_transaction(etcd_server: EtcdServer, job_id: str) -> None:
    async def scenario() -> None:
        store = await EtcdStore.connect(etcd_server.settings())
        try:
            first = record(1, Phase.PENDING)
            await store.put_status(job_id, first)
            status = await store.get(keys.learner_status_key(job_id, 1))
            history = await store.get(keys.history_key(job_id, "001-0000000001"))
            assert status is not None and history is not None
            assert StatusRecord.from_json(status[0]) == first
            assert history[0] == status[0]
            assert status[1] == history[1], "status and history come from one revision: one transaction"
            assert await store.get(status_seq_key(job_id, 1)) == (b"0000000001", status[1])
        finally:
            await store.close()

    run(scenario)


def test_an_older_sequence_never_overwrites_a_newer_status(etcd_server: EtcdServer, job_id: str) -> None:
    async def scenario() -> None:
        store = await EtcdStore.connect(etcd_server.settings())
        try:
            newer = record(12, Phase.PROCESSING)
            await store.put_status(job_id, newer)
            await store.put_status(job_id, record(9, Phase.DOWNLOADING))
            await store.put_status(job_id, newer)  # a redelivery after an ambiguous failure
            status = await store.get(keys.learner_status_key(job_id, 1))
            assert status is not None and StatusRecord.from_json(status[0]) == newer
            history = await store.get_prefix(keys.history_prefix(job_id))
            assert sorted(history) == [
                keys.history_key(job_id, "001-0000000009"),
                keys.history_key(job_id, "001-0000000012"),
            ]
            await store.put_status(job_id, record(13, Phase.COMPLETED))
            status = await store.get(keys.learner_status_key(job_id, 1))
            assert status is not None and StatusRecord.from_json(status[0]).phase is Phase.COMPLETED
        finally:
            await store.close()

    run(scenario)


def test_alive_key_expires_when_its_holder_dies_and_goes_at_once_on_exit(etcd_server: EtcdServer, job_id: str) -> None:
    alive = keys.learner_alive_key(job_id, 1)

    async def scenario() -> None:
        observer = await EtcdStore.connect(etcd_server.settings())
        try:
            crashed = await EtcdStore.connect(etcd_server.settings())
            holder = crashed.hold_alive(job_id, 1, ttl_s=2)
            await holder.__aenter__()
            await await_until(lambda: observer.get(alive), timeout=5, message="the alive key")
            await crashed.close()  # like a crash: the lease is not revoked
            assert await observer.get(alive) is not None
            await await_until(_absent(observer, alive), timeout=8, message="the alive key to expire")
            await holder.__aexit__(None, None, None)

            async with observer.hold_alive(job_id, 1, ttl_s=30):
                await await_until(lambda: observer.get(alive), timeout=5, message="the alive key")
            assert await observer.get(alive) is None, "a clean exit revokes the lease"
        finally:
            await observer.close()

    run(scenario)


def test_alive_key_is_kept_across_an_etcd_restart(etcd_server: EtcdServer, job_id: str) -> None:
    alive = keys.learner_alive_key(job_id, 1)

    async def scenario() -> None:
        store = await EtcdStore.connect(etcd_server.settings())
        try:
            async with store.hold_alive(job_id, 1, ttl_s=2):
                await await_until(lambda: store.get(alive), timeout=5, message="the alive key")
                await outage(etcd_server, OUTAGE_S)
                await await_until(lambda: store.get(alive), timeout=10, message="the alive key after the restart")
                # No delete for more than two lease lifetimes: the holder refreshes the lease again.
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(_first_delete(store, alive), timeout=5)
                assert await store.get(alive) is not None
        finally:
            await store.close()

    run(scenario)


def test_a_lease_that_runs_out_before_its_put_is_granted_again(
    etcd_server: EtcdServer, job_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The lease goes between its grant (or refresh) and the put that names it, as when etcd stalls past its TTL
    there: etcd refuses the put (lease not found), and the keeper grants a new lease and puts the key again."""
    alive = keys.learner_alive_key(job_id, 1)

    async def scenario() -> None:
        store = await EtcdStore.connect(etcd_server.settings())
        revoked: list[int] = []
        call = store._gateway.call

        async def revoking_the_first_lease_before_its_put(path: str, body: Mapping[str, Any], what: str) -> Json:
            lease = _lease_of_put(body)
            if path == "kv/txn" and lease is not None and not revoked:
                revoked.append(lease)
                await call("lease/revoke", {"ID": lease}, "revoke the lease under the keeper")
            return await call(path, body, what)

        store._gateway.call = revoking_the_first_lease_before_its_put  # type: ignore[method-assign]
        try:
            async with store.hold_alive(job_id, 1, ttl_s=30):
                await await_until(lambda: store.get(alive), timeout=10, message="the alive key on a new lease")
                assert revoked, "the put never named a lease"
                lease = await call("kv/range", {"key": b64(alive)}, "read the alive key")
                assert int(lease["kvs"][0]["lease"]) != revoked[0]
            assert "expired; granting a new one" in caplog.text
        finally:
            await store.close()

    with caplog.at_level(logging.WARNING, logger="controller_sidecar.etcdstore"):
        run(scenario)


def _lease_of_put(body: Mapping[str, Any]) -> int | None:
    """The lease the first put of a transaction names, if any."""
    for operation in body.get("success", []):
        lease = operation.get("request_put", {}).get("lease")
        if lease:
            return int(lease)
    return None


def test_wait_for_key_survives_an_etcd_restart(etcd_server: EtcdServer, job_id: str) -> None:
    halt = keys.halt_key(job_id)

    async def scenario() -> None:
        store = await EtcdStore.connect(etcd_server.settings())
        try:
            waiter = asyncio.create_task(store.wait_for_key(halt))
            await holds_for(lambda: not waiter.done(), 0.5, message="waiting for the halt key")
            await outage(etcd_server, OUTAGE_S, during=lambda: not waiter.done())
            writer = await EtcdStore.connect(etcd_server.settings())
            await writer.put(halt, b"halt")
            await writer.close()
            assert await asyncio.wait_for(waiter, timeout=15) == b"halt"
            assert await store.wait_for_key(halt) == b"halt", "an existing key is returned at once"
        finally:
            await store.close()

    run(scenario)


def test_wait_for_key_with_a_wanted_value_waits_for_that_value(etcd_server: EtcdServer, job_id: str) -> None:
    release = keys.release_key(job_id)

    async def scenario() -> None:
        store = await EtcdStore.connect(etcd_server.settings())
        try:
            await store.put(release, b"1")
            waiter = asyncio.create_task(store.wait_for_key(release, b"2"))
            await holds_for(lambda: not waiter.done(), 0.5, message="waiting for attempt 2's release")
            await store.put(release, b"2")
            assert await asyncio.wait_for(waiter, timeout=15) == b"2"
            assert await store.wait_for_key(release, b"2") == b"2", "a key holding it already is returned at once"
        finally:
            await store.close()

    run(scenario)


def test_watch_prefix_survives_an_etcd_restart(etcd_server: EtcdServer, job_id: str) -> None:
    prefix = keys.job_prefix(job_id)
    seen: list[WatchEvent] = []

    async def collect(store: EtcdStore) -> None:
        async for event in store.watch_prefix(prefix):
            seen.append(event)

    async def scenario() -> None:
        store = await EtcdStore.connect(etcd_server.settings())
        watcher = asyncio.create_task(collect(store))
        try:
            await holds_for(lambda: not watcher.done(), 0.5, message="the watch")
            await store.put(prefix + "a", b"1")
            await await_until(_len_at_least(seen, 1), timeout=5, message="the first event")
            await outage(etcd_server, OUTAGE_S)
            await store.put(prefix + "b", b"2")
            await store.delete(prefix + "a")
            await await_until(_len_at_least(seen, 3), timeout=15, message="the events after the restart")
            assert [(e.key, e.value) for e in seen] == [
                (prefix + "a", b"1"),
                (prefix + "b", b"2"),
                (prefix + "a", None),
            ]
            assert [e.revision for e in seen] == sorted(e.revision for e in seen)
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
            await store.close()

    run(scenario)


def test_watch_from_a_compacted_revision_reads_the_keys_again(etcd_server: EtcdServer, job_id: str) -> None:
    prefix = keys.job_prefix(job_id)
    seen: list[WatchEvent] = []

    async def collect(store: EtcdStore, start: int) -> None:
        async for event in store.watch_prefix(prefix, start_revision=start):
            seen.append(event)

    async def scenario() -> None:
        store = await EtcdStore.connect(etcd_server.settings())
        try:
            first = await store.put(prefix + "a", b"1")
            await store.put(prefix + "b", b"2")
            latest = await store.put(prefix + "other-job-noise", b"x")
            await store.compact(latest)
            watcher = asyncio.create_task(collect(store, first))
            try:
                await await_until(_len_at_least(seen, 3), timeout=10, message="the re-read keys")
                await store.put(prefix + "c", b"3")
                await await_until(_len_at_least(seen, 4), timeout=10, message="the event after the re-read")
            finally:
                watcher.cancel()
                await asyncio.gather(watcher, return_exceptions=True)
            assert [(e.key, e.value) for e in seen] == [
                (prefix + "a", b"1"),
                (prefix + "b", b"2"),
                (prefix + "other-job-noise", b"x"),
                (prefix + "c", b"3"),
            ]

            key = prefix + "later"
            waiter = asyncio.create_task(store.wait_for_key(key))
            await holds_for(lambda: not waiter.done(), 0.3, message="waiting for the key")
            await store.compact(await store.put(prefix + "noise", b"y"))
            await store.put(key, b"here")
            assert await asyncio.wait_for(waiter, timeout=10) == b"here"
        finally:
            await store.close()

    run(scenario)


def test_statuses_reported_during_a_10s_outage_all_arrive_in_order(
    etcd_server: EtcdServer, job_id: str, tmp_path: Path
) -> None:
    phases = [Phase.PENDING, Phase.DOWNLOADING, Phase.PROCESSING, Phase.STORING, Phase.COMPLETED]

    async def scenario() -> None:
        store = await EtcdStore.connect(etcd_server.settings())
        reporter = StatusReporter(functools.partial(store.put_status, job_id), learner_id=1, state_dir=tmp_path)
        try:
            await reporter.start()
            reporter.report(phases[0])
            assert await reporter.flush(timeout_s=10)
            await asyncio.to_thread(etcd_server.stop)
            try:
                for phase in phases[1:]:
                    reporter.report(phase)
                    await holds_for(lambda: reporter.delivered == 1, 2.5, interval=0.1, message="no delivery")
                assert len(reporter.pending) == 4  # read while etcd is down: once it is up, they start to go
            finally:
                await asyncio.to_thread(etcd_server.start)
            assert await reporter.flush(timeout_s=30)
            history = await store.get_prefix(keys.history_prefix(job_id))
            records = [StatusRecord.from_json(history[k]) for k in sorted(history)]
            assert [(r.sequence, r.phase) for r in records] == list(enumerate(phases, start=1))
            status = await store.get(keys.learner_status_key(job_id, 1))
            assert status is not None and StatusRecord.from_json(status[0]).phase is Phase.COMPLETED
            assert (reporter.delivered, reporter.dropped) == (5, 0)
            assert reporter.retries > 0
        finally:
            await reporter.aclose()
            await store.close()

    run(scenario)


def test_credentials_are_used_and_renewed_after_an_etcd_restart(tmp_path: Path, job_id: str) -> None:
    """etcd's default (simple) tokens do not survive a restart: the store logs in again by itself."""
    server = EtcdServer(etcd_binary(), tmp_path / "data")
    server.start()
    try:
        run(functools.partial(_auth_scenario, server, job_id))
    finally:
        server.stop()


async def _auth_scenario(server: EtcdServer, job_id: str) -> None:
    admin = Gateway(server.endpoint, timeout_s=5)
    for path, body in (
        ("auth/role/add", {"name": "root"}),
        ("auth/user/add", {"name": "root", "password": "secret"}),
        ("auth/user/grant", {"user": "root", "role": "root"}),
        ("auth/enable", {}),
    ):
        await admin.call(path, body, "set up authentication")
    admin.close()
    settings = EtcdSettings(endpoints=(server.endpoint,), username="root", password="secret")
    with pytest.raises(PermanentError, match="refused the credentials"):
        await EtcdStore.connect(EtcdSettings(endpoints=(server.endpoint,), username="root", password="wrong"))
    with pytest.raises(PermanentError, match="user name is empty"):
        await (await EtcdStore.connect(server.settings())).get(keys.halt_key(job_id))
    store = await EtcdStore.connect(settings)
    try:
        await store.put(keys.spec_key(job_id), "{}")
        waiter = asyncio.create_task(store.wait_for_key(keys.halt_key(job_id)))
        await holds_for(lambda: not waiter.done(), 0.5, message="waiting for the halt key")
        await outage(server, 1.0)
        assert await store.get(keys.spec_key(job_id)) is not None
        await store.put(keys.halt_key(job_id), "halt")
        assert await asyncio.wait_for(waiter, timeout=15) == b"halt"
    finally:
        await store.close()


def _absent(store: EtcdStore, key: str) -> Callable[[], Coroutine[Any, Any, bool]]:
    async def check() -> bool:
        return await store.get(key) is None

    return check


def _len_at_least(items: list[WatchEvent], count: int) -> Callable[[], Coroutine[Any, Any, bool]]:
    async def check() -> bool:
        return len(items) >= count

    return check


async def _first_delete(store: EtcdStore, key: str) -> WatchEvent:
    async for event in store.watch_prefix(key):
        if event.value is None:
            return event
    raise AssertionError("the watch ended")
