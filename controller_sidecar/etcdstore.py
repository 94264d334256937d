"""The sidecar's etcd access, over etcd's JSON gateway (:mod:`controller_sidecar.etcdgateway`).

Errors come translated from the gateway: an unreachable, restarting or slow etcd is a :class:`TransientError`,
a refused credential or permission a :class:`PermanentError`. While etcd is down every request fails at once
(connection refused), a running watch's stream breaks, and the next request after etcd is back succeeds. No
watch resumes by itself, so :meth:`EtcdStore.watch_prefix` and :meth:`EtcdStore.wait_for_key` re-watch from
the last seen revision + 1 with backoff, and re-read the keys when that revision has been compacted away.
Prefix reads come in pages of :data:`PAGE_SIZE` keys, all at the revision of the first page.

Status ordering: ``learners/<n>/status_seq`` holds the sequence of the record in ``learners/<n>/status`` as a
zero-padded decimal, so etcd's byte-wise value comparison is a numeric one. :meth:`EtcdStore.put_status` is
one transaction that writes status, status_seq and the history entry when no status_seq exists yet or the
stored one is smaller; otherwise it writes only the history entry, whose key is derived from the record, so a
redelivered record overwrites its own entry and an older record never replaces a newer status.

Fencing: with a guarded :class:`~controller_sidecar.fence.Fence`, the writes under ``learners/`` and ``history/``
(status, metrics, the alive key) are nested in a transaction that compares the job's ``fence`` key with the fence's
attempt, and the lease keeper reads that key at every refresh (docs/security.md, "Fencing").
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, aclosing, asynccontextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

from controller_sidecar import keys
from controller_sidecar.clock import SYSTEM_CLOCK, Clock
from controller_sidecar.errors import PermanentError, SidecarConfigError, TransientError
from controller_sidecar.etcdgateway import Gateway, Json, LeaseNotFound, RevisionCompacted, b64, unb64
from controller_sidecar.fence import UNGUARDED, Fence, FencedError
from controller_sidecar.retry import Backoff, Outage, retry_async
from controller_sidecar.settings import EtcdSettings
from controller_sidecar.status import StatusRecord

LOGGER = logging.getLogger(__name__)
T = TypeVar("T")

RECONNECT_BACKOFF = Backoff(initial_s=0.1, maximum_s=2.0, max_attempts=None)
"""Watches, reads for watches and the lease keeper retry this way until cancelled."""
SEQUENCE_DIGITS = 10
PAGE_SIZE = 1000
"""Keys per request of a prefix read."""


@dataclass(frozen=True)
class WatchEvent:
    key: str
    value: bytes | None
    """None: the key was deleted."""
    revision: int


class _Compacted(Exception):
    """Between the watch loop and its callers: the revision to resume from was compacted away."""

    def __init__(self, revision: int) -> None:
        super().__init__(f"revisions below {revision} were compacted")
        self.revision = revision


def _sequence_text(sequence: int) -> str:
    if not 0 <= sequence < 10**SEQUENCE_DIGITS:
        raise ValueError(f"status sequence {sequence} is outside 0..{10**SEQUENCE_DIGITS - 1}")
    return f"{sequence:0{SEQUENCE_DIGITS}d}"


def status_seq_key(job_id: str, learner_id: int, root: str = keys.ROOT) -> str:
    """The sequence of the record in ``learners/<n>/status``: the guard against older records."""
    return keys.learner_prefix(job_id, learner_id, root) + "status_seq"


def status_history_key(job_id: str, record: StatusRecord, root: str = keys.ROOT) -> str:
    """Deterministic, so that redelivering a record overwrites its entry; sorts by learner, then sequence."""
    return keys.history_key(job_id, f"{record.learner_id:03d}-{_sequence_text(record.sequence)}", root)


class EtcdStore:
    """One connection to etcd and the operations the sidecar needs; see the module docstring for the rules."""

    def __init__(self, gateway: Gateway, *, backoff: Backoff = RECONNECT_BACKOFF, clock: Clock = SYSTEM_CLOCK) -> None:
        self._gateway = gateway
        self.endpoint = gateway.endpoint
        self._backoff = backoff
        self._clock = clock
        self._rng = random.Random()  # noqa: S311 - jitter, not cryptography
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    @classmethod
    async def connect(cls, settings: EtcdSettings) -> EtcdStore:
        """Connect to the first endpoint that answers a status request."""
        if (settings.username is None) != (settings.password is None):
            raise SidecarConfigError("etcd: set both ETCD_USERNAME and ETCD_PASSWORD, or neither")
        failures: list[str] = []
        for endpoint in settings.endpoints:
            gateway = Gateway(
                endpoint, timeout_s=settings.request_timeout_s, username=settings.username, password=settings.password
            )
            try:
                await gateway.call("maintenance/status", {}, f"etcd {endpoint}")
            except TransientError as e:
                failures.append(str(e))
                gateway.close()
                continue
            except PermanentError:
                gateway.close()
                raise
            LOGGER.info("connected to etcd at %s", endpoint)
            return cls(gateway)
        raise TransientError("no etcd endpoint answered: " + "; ".join(failures))

    async def close(self) -> None:
        """Stop the background tasks (without revoking leases: their keys expire) and close the connection."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with suppress(asyncio.CancelledError):
                await task
        self._gateway.close()

    async def get(self, key: str) -> tuple[bytes, int] | None:
        answer = await self._gateway.call("kv/range", {"key": b64(key)}, f"get {key}")
        found = answer.get("kvs", [])
        return (_value(found[0]), int(found[0]["mod_revision"])) if found else None

    async def put(self, key: str, value: str | bytes) -> int:
        answer = await self._gateway.call("kv/put", {"key": b64(key), "value": b64(value)}, f"put {key}")
        return _revision(answer)

    async def delete(self, key: str) -> None:
        await self._gateway.call("kv/deleterange", {"key": b64(key)}, f"delete {key}")

    async def get_prefix(self, prefix: str) -> dict[str, bytes]:
        found, _ = await self._read_prefix(prefix)
        return {key: value for key, (value, _) in found.items()}

    async def iter_prefix(self, prefix: str, page: int = PAGE_SIZE) -> AsyncIterator[tuple[str, bytes]]:
        """Every key under ``prefix`` with its value, in key order, ``page`` keys per request, without holding
        them all: any amount of data passes the size limits of one answer."""
        end = b64(_prefix_end(prefix.encode()))
        request: Json = {"key": b64(prefix), "range_end": end, "limit": page}
        while True:
            answer = await self._gateway.call("kv/range", request, f"get {prefix}* (a page of {page})")
            found = answer.get("kvs", [])
            for kv in found:
                yield unb64(kv["key"]).decode(), _value(kv)
            if not answer.get("more") or not found:
                return
            request["key"] = b64(unb64(found[-1]["key"]) + b"\0")

    async def create_all(self, guard: str, items: Mapping[str, str | bytes]) -> bool:
        """Put every item in one transaction, only if ``guard`` does not exist; whether they were written."""
        txn = {"compare": [_version_is_zero(guard)], "success": [_put(k, v) for k, v in items.items()]}
        answer = await self._gateway.call("kv/txn", txn, f"create {guard}")
        return bool(answer.get("succeeded", False))

    async def put_all(self, items: Mapping[str, str | bytes], delete: tuple[str, ...] = ()) -> None:
        """Put every item and delete every key in ``delete``, in one transaction."""
        writes = [_put(key, value) for key, value in items.items()]
        writes += [{"request_delete_range": {"key": b64(key)}} for key in delete]
        await self._gateway.call("kv/txn", {"success": writes}, f"write {', '.join(items) or ', '.join(delete)}")

    async def delete_prefix(self, prefix: str) -> None:
        body = {"key": b64(prefix), "range_end": b64(_prefix_end(prefix.encode()))}
        await self._gateway.call("kv/deleterange", body, f"delete {prefix}*")

    async def compact(self, revision: int) -> None:
        """Drop the history below ``revision`` (maintenance; watches from older revisions must re-read)."""
        await self._gateway.call("kv/compaction", {"revision": revision}, f"compact to revision {revision}")

    async def put_status(
        self, job_id: str, record: StatusRecord, root: str = keys.ROOT, fence: Fence = UNGUARDED
    ) -> None:
        """Write the learner's status and its history entry in one transaction, never over a newer status, and
        only while the job's fence allows ``fence.attempt`` (`FencedError` otherwise)."""
        body = record.to_json()
        seq_key = status_seq_key(job_id, record.learner_id, root)
        history = _put(status_history_key(job_id, record, root), body)
        sequence = _sequence_text(record.sequence)
        write_all = [_put(keys.learner_status_key(job_id, record.learner_id, root), body), _put(seq_key, sequence)]
        write_all.append(history)
        if_newer = {
            "compare": [{"key": b64(seq_key), "target": "VALUE", "result": "LESS", "value": b64(sequence)}],
            "success": write_all,
            "failure": [history],
        }
        txn = {"compare": [_version_is_zero(seq_key)], "success": write_all, "failure": [{"request_txn": if_newer}]}
        what = f"put status {record.phase} #{record.sequence} of {job_id}/{record.learner_id}"
        answer = await self._fenced_txn(txn, keys.fence_key(job_id, root), fence, what)
        if not answer.get("succeeded") and not answer["responses"][0]["response_txn"].get("succeeded"):
            LOGGER.info(
                "status #%d of %s/%d is not newer than the stored one; written to history only",
                record.sequence,
                job_id,
                record.learner_id,
            )

    async def put_metrics(
        self,
        job_id: str,
        learner_id: int,
        values: Mapping[str, object],
        root: str = keys.ROOT,
        fence: Fence = UNGUARDED,
    ) -> None:
        text = json.dumps(dict(values), sort_keys=True, default=str)
        txn = {"success": [_put(keys.learner_metrics_key(job_id, learner_id, root), text)]}
        await self._fenced_txn(txn, keys.fence_key(job_id, root), fence, f"put the metrics of {job_id}/{learner_id}")

    async def put_boundary(
        self,
        job_id: str,
        learner_id: int,
        record: Mapping[str, object],
        root: str = keys.ROOT,
        fence: Fence = UNGUARDED,
    ) -> None:
        """The learner waits at its rung's budget (``record``: attempt, step, budget, metrics), while the fence
        allows this attempt."""
        text = json.dumps(dict(record), sort_keys=True)
        txn = {"success": [_put(keys.learner_boundary_key(job_id, learner_id, root), text)]}
        await self._fenced_txn(txn, keys.fence_key(job_id, root), fence, f"put the boundary of {job_id}/{learner_id}")

    async def _fenced_txn(self, txn: Json, fence_key: str, fence: Fence, what: str) -> Json:
        """Run ``txn`` (its answer returned) only while ``fence_key`` is absent or reads ``fence.attempt``, in one
        transaction: a write of an attempt the scheduler moved on from is refused by etcd itself, whatever the
        clocks say. `FencedError` (and ``fence`` lost) when refused."""
        if fence.fenced:
            fence.check(what)
        if not fence.guarded:
            return await self._gateway.call("kv/txn", txn, what)
        mine = {"key": b64(fence_key), "target": "VALUE", "result": "EQUAL", "value": b64(str(fence.attempt))}
        if_mine = {
            "compare": [mine],
            "success": [{"request_txn": txn}],
            "failure": [{"request_range": {"key": b64(fence_key)}}],
        }
        guarded = {
            "compare": [_version_is_zero(fence_key)],
            "success": [{"request_txn": txn}],
            "failure": [{"request_txn": if_mine}],
        }
        answer = await self._gateway.call("kv/txn", guarded, what)
        if answer.get("succeeded"):
            return dict(answer["responses"][0]["response_txn"])
        inner = answer["responses"][0]["response_txn"]
        if inner.get("succeeded"):
            return dict(inner["responses"][0]["response_txn"])
        kvs = inner["responses"][0]["response_range"].get("kvs", [])
        current = _value(kvs[0]).decode(errors="replace") if kvs else "?"
        fence.lose(f"the job's fence names attempt {current}, not {fence.attempt}")
        raise FencedError(f"{what}: refused by etcd, the job's fence names attempt {current}, not {fence.attempt}")

    def hold_alive(
        self, job_id: str, learner_id: int, ttl_s: int, root: str = keys.ROOT, fence: Fence = UNGUARDED
    ) -> AbstractAsyncContextManager[None]:
        """Keep ``learners/<n>/alive`` on a lease while the block runs; revoke the lease on exit. With a guarded
        ``fence``, tell it when the lease is held and when the job's fence names another attempt (then the lease is
        revoked and never taken again)."""
        alive = keys.learner_alive_key(job_id, learner_id, root)
        return self._holding_alive(alive, ttl_s, keys.fence_key(job_id, root), fence)

    @asynccontextmanager
    async def _holding_alive(self, key: str, ttl_s: int, fence_key: str, fence: Fence) -> AsyncIterator[None]:
        lease = _LeaseState()
        keeper = self._keep_alive(key, ttl_s, lease, fence_key, fence)
        task = asyncio.get_running_loop().create_task(keeper, name=f"alive {key}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        try:
            yield
        finally:
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task
            if lease.lease_id is not None and not self._closed:
                try:
                    await self._gateway.call("lease/revoke", {"ID": lease.lease_id}, f"revoke the lease of {key}")
                except TransientError as e:
                    LOGGER.warning("%s; the key expires after %ds", e, ttl_s)

    async def _keep_alive(self, key: str, ttl_s: int, lease: _LeaseState, fence_key: str, fence: Fence) -> None:
        """Grant, put and refresh until cancelled; after a failure refresh again, and re-grant if it expired, unless
        the job's fence names another attempt: then revoke the lease, lose the fence and stop. Nothing else ends
        it: a keeper that stopped would leave a running learner to be taken for lost once the lease ran out."""
        value = json.dumps({"pid": os.getpid(), "since": datetime.now(UTC).isoformat()})
        what = f"keep {key} alive"
        needs_put = True
        outage = Outage(what, self._clock.monotonic)
        while True:
            try:
                sent = self._clock.monotonic()
                if lease.lease_id is not None:
                    reply = await self._gateway.call("lease/keepalive", {"ID": lease.lease_id}, what)
                    if int(reply.get("result", {}).get("TTL", 0)) <= 0:
                        LOGGER.warning("the lease of %s expired; granting a new one", key)
                        fence.lapsed()
                        lease.lease_id = None
                if lease.lease_id is None:
                    granted = await self._gateway.call("lease/grant", {"TTL": ttl_s}, what)
                    lease.lease_id = int(granted["ID"])
                    needs_put = True
                if needs_put:  # the put compares the fence: a grant that races a new fence puts nothing
                    put = {"request_put": {"key": b64(key), "value": b64(value), "lease": lease.lease_id}}
                    await self._fenced_txn({"success": [put]}, fence_key, fence, what)
                    needs_put = False
                else:
                    await self._check_fence(fence_key, fence, what)
            except FencedError:
                await self._give_up_lease(lease, what)
                return
            except LeaseNotFound:
                # It ran out between its refresh and the put that names it (etcd slow or paused meanwhile).
                LOGGER.warning("the lease of %s expired; granting a new one", key)
                fence.lapsed()
                lease.lease_id = None
                continue
            except (TransientError, PermanentError) as e:
                outage.failed(e)
                needs_put = True
                await self._clock.sleep(self._backoff.delay(outage.failures, self._rng))
                continue
            outage.ended()
            fence.refreshed(sent)
            await self._clock.sleep(ttl_s / 3)

    async def _check_fence(self, fence_key: str, fence: Fence, what: str) -> None:
        """`FencedError` (and ``fence`` lost) where the job's fence names another attempt than ``fence``'s."""
        if not fence.guarded:
            return
        found = await self._gateway.call("kv/range", {"key": b64(fence_key)}, what)
        kvs = found.get("kvs", [])
        current = _value(kvs[0]).decode(errors="replace") if kvs else None
        if current is not None and current != str(fence.attempt):
            fence.lose(f"the job's fence names attempt {current}, not {fence.attempt}: the job moved on")
            raise FencedError(f"{what}: {fence.reason}")

    async def _give_up_lease(self, lease: _LeaseState, what: str) -> None:
        """Revoke a fenced sidecar's lease at once, so the scheduler waiting for it goes on (it expires otherwise)."""
        lease_id, lease.lease_id = lease.lease_id, None  # first: a cancel during the call must not revoke it again
        if lease_id is None:
            return
        try:
            await self._gateway.call("lease/revoke", {"ID": lease_id}, f"give up {what}")
        except TransientError as e:
            LOGGER.warning("%s; the lease expires by itself", e)

    @asynccontextmanager
    async def hold_lock(self, key: str, value: str, ttl_s: int) -> AsyncIterator[None]:
        """Create ``key`` on a lease and keep the lease alive while the block runs (revoked on exit), so the key
        goes when its holder stops, or within ``ttl_s`` when it dies. `LockHeldError` naming the holder (the
        key's value), holding nothing, when the key exists already."""
        what = f"take the lock {key}"
        lease = _LeaseState(int((await self._gateway.call("lease/grant", {"TTL": ttl_s}, what))["ID"]))
        put = {"request_put": {"key": b64(key), "value": b64(value), "lease": lease.lease_id}}
        txn = {"compare": [_version_is_zero(key)], "success": [put], "failure": [{"request_range": {"key": b64(key)}}]}
        answer = await self._gateway.call("kv/txn", txn, what)
        if not answer.get("succeeded"):
            await self._gateway.call("lease/revoke", {"ID": lease.lease_id}, f"give up {what}")
            kvs = answer["responses"][0]["response_range"].get("kvs", [])
            holder = _value(kvs[0]).decode(errors="replace") if kvs else "a holder that just left"
            raise LockHeldError(f"{key} is held by {holder}")
        task = asyncio.get_running_loop().create_task(self._keep_lock(key, ttl_s, lease), name=f"lock {key}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        try:
            yield
        finally:
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task
            if not self._closed:
                try:
                    await self._gateway.call("lease/revoke", {"ID": lease.lease_id}, f"release the lock {key}")
                except TransientError as e:
                    LOGGER.warning("%s; the lock expires after %ds", e, ttl_s)

    async def _keep_lock(self, key: str, ttl_s: int, lease: _LeaseState) -> None:
        """Refresh the lock's lease every third of its TTL; a lease that expired (etcd unreachable for longer) is
        reported, never silently taken again: another holder may have the key by then."""
        while True:
            await self._clock.sleep(ttl_s / 3)
            try:
                reply = await self._gateway.call("lease/keepalive", {"ID": lease.lease_id}, f"keep the lock {key}")
            except TransientError as e:
                LOGGER.warning("%s; retrying", e)
                continue
            if int(reply.get("result", {}).get("TTL", 0)) <= 0:
                LOGGER.error(
                    "the lock %s expired (etcd was unreachable for over %ds): it is no longer held", key, ttl_s
                )
                return

    async def wait_for_key(self, key: str, wanted: bytes | None = None) -> bytes:
        """The key's value as soon as it exists (and is ``wanted``, where given); survives etcd restarts and
        compaction."""
        raw = key.encode()
        while True:
            value, revision = await self._retrying(lambda: self._read_key(key), f"read {key}")
            if value is not None and wanted in (None, value):
                return value
            try:
                async with aclosing(self._resumable_watch(raw, None, revision + 1)) as events:
                    async for event in events:
                        if event.value is not None and wanted in (None, event.value):
                            return event.value
            except _Compacted:
                LOGGER.info("watch of %s fell behind a compaction; reading it again", key)

    def watch_prefix(self, prefix: str, start_revision: int | None = None) -> AsyncGenerator[WatchEvent, None]:
        """Every change under ``prefix`` from ``start_revision`` (default: from now), across etcd restarts."""
        raw = prefix.encode()
        return self._watch(raw, _prefix_end(raw), f"{prefix}*", start_revision)

    def watch_range(
        self, key: str, range_end: str, start_revision: int | None = None
    ) -> AsyncGenerator[WatchEvent, None]:
        """Every change of a key in [``key``, ``range_end``) from ``start_revision`` (default: from now), across etcd
        restarts: one watch, so one order of revisions, over the keys of prefixes side by side."""
        return self._watch(key.encode(), range_end.encode(), f"{key}..{range_end}", start_revision)

    async def _watch(
        self, raw: bytes, end: bytes, what: str, start_revision: int | None
    ) -> AsyncGenerator[WatchEvent, None]:
        """After a compaction the range is read again: changed keys come as puts and keys this watch saw and that
        are gone as deletes (a key created and deleted inside the compacted gap is not reported)."""
        present: set[str] = set()
        if start_revision is None:
            snapshot, revision = await self._retrying(lambda: self._read_range(raw, end), f"read {what}")
            present.update(snapshot)
            start_revision = revision + 1
        next_revision = start_revision
        while True:
            try:
                async with aclosing(self._resumable_watch(raw, end, next_revision)) as events:
                    async for event in events:
                        next_revision = event.revision + 1
                        _track(present, event)
                        yield event
            except _Compacted:
                LOGGER.info("watch of %s fell behind a compaction; reading the range again", what)
                snapshot, revision = await self._retrying(lambda: self._read_range(raw, end), f"read {what}")
                changed = sorted(
                    (WatchEvent(k, v, r) for k, (v, r) in snapshot.items() if r >= next_revision),
                    key=lambda e: (e.revision, e.key),
                )
                gone = [WatchEvent(k, None, revision) for k in sorted(present - snapshot.keys())]
                for event in [*changed, *gone]:
                    _track(present, event)
                    yield event
                next_revision = revision + 1

    async def _resumable_watch(
        self, key: bytes, range_end: bytes | None, start_revision: int
    ) -> AsyncGenerator[WatchEvent, None]:
        """Watch from ``start_revision``; on a lost connection re-watch from the last seen revision + 1.

        Raises _Compacted when the revision to resume from is gone.
        """
        what = f"watch {key.decode()}{'*' if range_end else ''}"
        next_revision = start_revision
        outage = Outage(what, self._clock.monotonic)
        while True:
            request: Json = {"key": b64(key), "start_revision": next_revision}
            if range_end is not None:
                request["range_end"] = b64(range_end)
            try:
                async with aclosing(self._gateway.stream("watch", {"create_request": request}, what)) as messages:
                    async for message in messages:
                        outage.ended()  # the first message (etcd's "created") says the watch is back
                        if message.get("canceled"):
                            if "compact_revision" in message:
                                raise _Compacted(int(message["compact_revision"]))
                            raise PermanentError(f"{what}: etcd cancelled the watch: {message.get('cancel_reason')}")
                        for raw in message.get("events", []):
                            event = _watch_event(raw)
                            next_revision = event.revision + 1
                            yield event
            except TransientError as e:
                outage.failed(e)
                await self._clock.sleep(self._backoff.delay(outage.failures, self._rng))

    async def _read_key(self, key: str) -> tuple[bytes | None, int]:
        """The value (None when absent) and the store's revision at the time of the read."""
        answer = await self._gateway.call("kv/range", {"key": b64(key)}, f"get {key}")
        found = answer.get("kvs", [])
        return (_value(found[0]) if found else None), _revision(answer)

    async def _read_prefix(self, prefix: str) -> tuple[dict[str, tuple[bytes, int]], int]:
        """Every key under ``prefix`` with its value and mod revision, as of one revision (returned too)."""
        return await self._read_range(prefix.encode(), _prefix_end(prefix.encode()))

    async def _read_range(self, key: bytes, range_end: bytes) -> tuple[dict[str, tuple[bytes, int]], int]:
        """Every key in [``key``, ``range_end``) with its value and mod revision, as of one revision (returned
        too)."""
        end, what = b64(range_end), f"get {key.decode()}..{range_end.decode(errors='replace')}"
        while True:
            found: dict[str, tuple[bytes, int]] = {}
            request: Json = {"key": b64(key), "range_end": end, "limit": PAGE_SIZE}
            try:
                while True:
                    answer = await self._gateway.call("kv/range", request, what)
                    request["revision"] = revision = _revision(answer)
                    for kv in answer.get("kvs", []):
                        found[unb64(kv["key"]).decode()] = (_value(kv), int(kv["mod_revision"]))
                    if not answer.get("more"):
                        return found, revision
                    request["key"] = b64(unb64(answer["kvs"][-1]["key"]) + b"\0")
            except RevisionCompacted:
                LOGGER.info("the revision of a paged read of %s was compacted; reading it again", what)

    async def _retrying(self, operation: Callable[[], Awaitable[T]], what: str) -> T:
        return await retry_async(operation, self._backoff, what=what, clock=self._clock, rng=self._rng)


class LockHeldError(PermanentError):
    """`EtcdStore.hold_lock`: the key is held by another holder."""


@dataclass
class _LeaseState:
    lease_id: int | None = None


def _put(key: str, value: str | bytes) -> Json:
    return {"request_put": {"key": b64(key), "value": b64(value)}}


def _version_is_zero(key: str) -> Json:
    """The compare "``key`` does not exist" (its version is 0)."""
    return {"key": b64(key), "target": "VERSION", "result": "EQUAL", "version": 0}


def _value(kv: Json) -> bytes:
    return unb64(kv.get("value", ""))


def _revision(answer: Json) -> int:
    return int(answer["header"]["revision"])


def _prefix_end(prefix: bytes) -> bytes:
    """The range end that covers every key starting with ``prefix``."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return b"\0"
    return trimmed[:-1] + bytes([trimmed[-1] + 1])


def _watch_event(raw: Json) -> WatchEvent:
    kv = raw["kv"]
    value = None if raw.get("type") == "DELETE" else _value(kv)
    return WatchEvent(unb64(kv["key"]).decode(), value, int(kv["mod_revision"]))


def _track(present: set[str], event: WatchEvent) -> None:
    if event.value is None:
        present.discard(event.key)
    else:
        present.add(event.key)
