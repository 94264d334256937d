"""The sidecar's etcd access: the only module that imports ``aetcd``.

Errors are translated here: an unreachable, restarting or slow etcd is a :class:`TransientError`, a refused
credential or permission a :class:`PermanentError`. Measured with aetcd 1.0 against etcd 3.4: while etcd is
down every request fails at once with ``ConnectionFailedError`` (gRPC UNAVAILABLE), a running watch ends with
the same error, and the same client works again as soon as etcd is back. No watch resumes by itself, so
:meth:`EtcdStore.watch_prefix` and :meth:`EtcdStore.wait_for_key` re-watch from the last seen revision + 1
with backoff, and re-read the keys when that revision has been compacted away.

Status ordering: ``learners/<n>/status_seq`` holds the sequence of the record in ``learners/<n>/status`` as a
zero-padded decimal, so etcd's byte-wise value comparison is a numeric one. :meth:`EtcdStore.put_status` is
one transaction that writes status, status_seq and the history entry when no status_seq exists yet or the
stored one is smaller; otherwise it writes only the history entry, whose key is derived from the record, so a
redelivered record overwrites its own entry and an older record never replaces a newer status.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, aclosing, asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import aetcd
from aetcd import rpc

from controller_sidecar import keys
from controller_sidecar.clock import SYSTEM_CLOCK, Clock
from controller_sidecar.errors import PermanentError, SidecarConfigError, TransientError
from controller_sidecar.retry import Backoff, retry_async
from controller_sidecar.settings import EtcdSettings
from controller_sidecar.status import StatusRecord

LOGGER = logging.getLogger(__name__)
T = TypeVar("T")

RECONNECT_BACKOFF = Backoff(initial_s=0.1, maximum_s=2.0, max_attempts=None)
"""Watches, reads for watches and the lease keeper retry this way until cancelled."""
SEQUENCE_DIGITS = 10
PAGE_KEYS = 256
"""Keys per request of :meth:`EtcdStore.iter_prefix`."""
PAGE_TIMEOUT_S = 30.0
_CHANNEL_OPTIONS = {
    # gRPC's own reconnect backoff grows to 120 s; after a long outage that would keep the channel failing
    # well after etcd is back. Our loops already back off, so let the channel retry quickly.
    "grpc.initial_reconnect_backoff_ms": 100,
    "grpc.min_reconnect_backoff_ms": 100,
    "grpc.max_reconnect_backoff_ms": 1000,
}
_TRANSIENT_CODES = frozenset(
    {
        rpc.StatusCode.UNAVAILABLE,
        rpc.StatusCode.DEADLINE_EXCEEDED,
        rpc.StatusCode.RESOURCE_EXHAUSTED,
        rpc.StatusCode.ABORTED,
    }
)
_PERMANENT_CODES = frozenset({rpc.StatusCode.UNAUTHENTICATED, rpc.StatusCode.PERMISSION_DENIED})


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


def _grpc_code(error: BaseException) -> Any:
    for candidate in (error, error.__cause__):
        if isinstance(candidate, rpc.AioRpcError):
            return candidate.code()
    return None


@contextmanager
def _translated(what: str) -> Iterator[None]:
    """Turn aetcd and gRPC errors into the sidecar's, chained; compaction passes through for the watch loop."""
    try:
        yield
    except aetcd.RevisionCompactedError:
        raise
    except (aetcd.ConnectionFailedError, aetcd.ConnectionTimeoutError, aetcd.WatchTimeoutError, TimeoutError) as e:
        raise TransientError(f"{what}: etcd did not answer: {e}") from e
    except aetcd.exceptions.UnauthenticatedError as e:
        raise PermanentError(f"{what}: etcd refused the credentials: {e}") from e
    except (aetcd.ClientError, rpc.AioRpcError) as e:
        code = _grpc_code(e)
        if code in _TRANSIENT_CODES:
            raise TransientError(f"{what}: etcd answered {code.name}: {e}") from e
        if code in _PERMANENT_CODES:
            raise PermanentError(f"{what}: etcd denied access ({code.name}): {e}") from e
        raise PermanentError(f"{what}: etcd failed: {e!r}") from e


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

    def __init__(
        self,
        client: Any,
        endpoint: str,
        *,
        backoff: Backoff = RECONNECT_BACKOFF,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._client = client
        self.endpoint = endpoint
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
            host, _, port = endpoint.rpartition(":")
            client = aetcd.Client(
                host=host,
                port=int(port),
                username=settings.username,
                password=settings.password,
                timeout=settings.request_timeout_s,
                options=_CHANNEL_OPTIONS,
            )
            try:
                with _translated(f"etcd {endpoint}"):
                    await client.connect()
                    await client.status()
            except TransientError as e:
                failures.append(str(e))
                await client.close()
                continue
            except PermanentError:
                await client.close()
                raise
            LOGGER.info("connected to etcd at %s", endpoint)
            return cls(client, endpoint)
        raise TransientError("no etcd endpoint answered: " + "; ".join(failures))

    async def close(self) -> None:
        """Stop the background tasks (without revoking leases: their keys expire) and close the connection."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with suppress(asyncio.CancelledError):
                await task
        await self._client.close()

    async def get(self, key: str) -> tuple[bytes, int] | None:
        with _translated(f"get {key}"):
            found = await self._client.get(key.encode())
        return None if found is None else (found.value, found.mod_revision)

    async def put(self, key: str, value: str | bytes) -> int:
        with _translated(f"put {key}"):
            written = await self._client.put(key.encode(), _bytes(value))
        revision: int = written.header.revision
        return revision

    async def delete(self, key: str) -> None:
        with _translated(f"delete {key}"):
            await self._client.delete(key.encode())

    async def get_prefix(self, prefix: str) -> dict[str, bytes]:
        with _translated(f"get {prefix}*"):
            found = await self._client.get_prefix(prefix.encode())
        return {kv.key.decode(): kv.value for kv in found}

    async def iter_prefix(self, prefix: str, page: int = PAGE_KEYS) -> AsyncIterator[tuple[str, bytes]]:
        """Every key under ``prefix`` with its value, in key order, read ``page`` keys per request: any amount
        of data passes the client's 4 MiB message limit (a page too large for it is read again, halved)."""
        start, end = prefix.encode(), _prefix_end(prefix.encode())
        while True:
            # aetcd's range calls take no limit: the request is made here, on aetcd's own connection.
            request = rpc.RangeRequest(key=start, range_end=end, limit=page)
            try:
                with _translated(f"get {prefix}* (a page of {page})"):
                    response = await self._client.kvstub.Range(
                        request, timeout=PAGE_TIMEOUT_S, metadata=self._client.metadata
                    )
            except TransientError as e:
                if page > 1 and _grpc_code(e.__cause__ or e) is rpc.StatusCode.RESOURCE_EXHAUSTED:
                    page = max(1, page // 2)
                    continue
                raise
            for kv in response.kvs:
                yield kv.key.decode(), kv.value
            if not response.more or not response.kvs:
                return
            start = response.kvs[-1].key + b"\0"

    async def create_all(self, guard: str, items: Mapping[str, str | bytes]) -> bool:
        """Put every item in one transaction, only if ``guard`` does not exist; whether they were written."""
        ops = self._client.transactions
        with _translated(f"create {guard}"):
            succeeded, _ = await self._client.transaction(
                compare=[ops.version(guard.encode()) == 0],
                success=[ops.put(key.encode(), _bytes(value)) for key, value in items.items()],
                failure=[],
            )
        return bool(succeeded)

    async def put_all(self, items: Mapping[str, str | bytes], delete: tuple[str, ...] = ()) -> None:
        """Put every item and delete every key in ``delete``, in one transaction."""
        ops = self._client.transactions
        writes = [ops.put(key.encode(), _bytes(value)) for key, value in items.items()]
        writes += [ops.delete(key.encode()) for key in delete]
        with _translated(f"write {', '.join(items) or ', '.join(delete)}"):
            await self._client.transaction(compare=[], success=writes, failure=[])

    async def delete_prefix(self, prefix: str) -> None:
        with _translated(f"delete {prefix}*"):
            await self._client.delete_prefix(prefix.encode())

    async def compact(self, revision: int) -> None:
        """Drop the history below ``revision`` (maintenance; watches from older revisions must re-read)."""
        with _translated(f"compact to revision {revision}"):
            await self._client.compact(revision)

    async def put_status(self, job_id: str, record: StatusRecord, root: str = keys.ROOT) -> None:
        """Write the learner's status and its history entry in one transaction, never over a newer status."""
        body = record.to_json().encode()
        status_key = keys.learner_status_key(job_id, record.learner_id, root).encode()
        seq_key = status_seq_key(job_id, record.learner_id, root).encode()
        history_key = status_history_key(job_id, record, root).encode()
        sequence = _sequence_text(record.sequence).encode()
        ops = self._client.transactions
        write_all = [ops.put(status_key, body), ops.put(seq_key, sequence), ops.put(history_key, body)]
        if_newer = ops.txn(
            compare=[ops.value(seq_key) < sequence],
            success=write_all,
            failure=[ops.put(history_key, body)],
        )
        with _translated(f"put status {record.phase} #{record.sequence} of {job_id}/{record.learner_id}"):
            first, responses = await self._client.transaction(
                compare=[ops.version(seq_key) == 0], success=write_all, failure=[if_newer]
            )
        if not first and not responses[0].response_txn.succeeded:
            LOGGER.info(
                "status #%d of %s/%d is not newer than the stored one; written to history only",
                record.sequence,
                job_id,
                record.learner_id,
            )

    async def put_metrics(
        self, job_id: str, learner_id: int, values: Mapping[str, object], root: str = keys.ROOT
    ) -> None:
        text = json.dumps(dict(values), sort_keys=True, default=str)
        await self.put(keys.learner_metrics_key(job_id, learner_id, root), text)

    def hold_alive(
        self, job_id: str, learner_id: int, ttl_s: int, root: str = keys.ROOT
    ) -> AbstractAsyncContextManager[None]:
        """Keep ``learners/<n>/alive`` on a lease while the block runs; revoke the lease on exit."""
        return self._holding_alive(keys.learner_alive_key(job_id, learner_id, root), ttl_s)

    @asynccontextmanager
    async def _holding_alive(self, key: str, ttl_s: int) -> AsyncIterator[None]:
        lease = _LeaseState()
        task = asyncio.get_running_loop().create_task(self._keep_alive(key, ttl_s, lease), name=f"alive {key}")
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
                    with _translated(f"revoke the lease of {key}"):
                        await self._client.revoke_lease(lease.lease_id)
                except TransientError as e:
                    LOGGER.warning("%s; the key expires after %ds", e, ttl_s)

    async def _keep_alive(self, key: str, ttl_s: int, lease: _LeaseState) -> None:
        """Grant, put and refresh until cancelled; after a failure refresh again, and re-grant if it expired."""
        value = json.dumps({"pid": os.getpid(), "since": datetime.now(UTC).isoformat()}).encode()
        needs_put = True
        failures = 0
        while True:
            try:
                with _translated(f"keep {key} alive"):
                    if lease.lease_id is not None:
                        reply = await self._client.refresh_lease(lease.lease_id)
                        if reply is None or reply.TTL <= 0:
                            LOGGER.warning("the lease of %s expired; granting a new one", key)
                            lease.lease_id = None
                    if lease.lease_id is None:
                        granted = await self._client.lease(ttl_s)
                        lease.lease_id = granted.id
                        needs_put = True
                    if needs_put:
                        await self._client.put(key.encode(), value, lease=lease.lease_id)
                        needs_put = False
            except TransientError as e:
                failures += 1
                needs_put = True
                delay = self._backoff.delay(failures, self._rng)
                LOGGER.warning("%s; retrying in %.1fs", e, delay)
                await self._clock.sleep(delay)
                continue
            failures = 0
            await self._clock.sleep(ttl_s / 3)

    async def wait_for_key(self, key: str) -> bytes:
        """The key's value as soon as it exists; survives etcd restarts and compaction."""
        raw = key.encode()
        while True:
            value, revision = await self._retrying(lambda: self._read_key(raw), f"read {key}")
            if value is not None:
                return value
            try:
                async with aclosing(self._resumable_watch(raw, None, revision + 1)) as events:
                    async for event in events:
                        if event.value is not None:
                            return event.value
            except _Compacted:
                LOGGER.info("watch of %s fell behind a compaction; reading it again", key)

    async def watch_prefix(self, prefix: str, start_revision: int | None = None) -> AsyncIterator[WatchEvent]:
        """Every change under ``prefix`` from ``start_revision`` (default: from now), across etcd restarts.

        After a compaction the prefix is read again: changed keys come as puts and keys this watch saw and
        that are gone as deletes (a key created and deleted inside the compacted gap is not reported).
        """
        raw = prefix.encode()
        range_end = _prefix_end(raw)
        present: set[str] = set()
        if start_revision is None:
            snapshot, revision = await self._retrying(lambda: self._read_prefix(raw), f"read {prefix}*")
            present.update(snapshot)
            start_revision = revision + 1
        next_revision = start_revision
        while True:
            try:
                async with aclosing(self._resumable_watch(raw, range_end, next_revision)) as events:
                    async for event in events:
                        next_revision = event.revision + 1
                        _track(present, event)
                        yield event
            except _Compacted:
                LOGGER.info("watch of %s* fell behind a compaction; reading the prefix again", prefix)
                snapshot, revision = await self._retrying(lambda: self._read_prefix(raw), f"read {prefix}*")
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
        next_revision = start_revision
        failures = 0
        while True:
            try:
                with _translated(f"watch {key.decode()}{'*' if range_end else ''}"):
                    watch = await self._client.watch(key, range_end=range_end, start_revision=next_revision)
                    try:
                        async for raw in watch:
                            failures = 0
                            next_revision = raw.kv.mod_revision + 1
                            yield _watch_event(raw)
                    finally:
                        await watch.cancel()
            except aetcd.RevisionCompactedError as e:
                raise _Compacted(e.compacted_revision) from e
            except TransientError as e:
                failures += 1
                delay = self._backoff.delay(failures, self._rng)
                LOGGER.warning("%s; watching again from revision %d in %.1fs", e, next_revision, delay)
                await self._clock.sleep(delay)

    async def _read_key(self, key: bytes) -> tuple[bytes | None, int]:
        """The value (None when absent) and the store's revision at the time of the read."""
        with _translated(f"get {key.decode()}"):
            found = await self._client.get_range(key, key + b"\0")
        revision: int = found.header.revision
        return (next(iter(found)).value if found else None), revision

    async def _read_prefix(self, prefix: bytes) -> tuple[dict[str, tuple[bytes, int]], int]:
        with _translated(f"get {prefix.decode()}*"):
            found = await self._client.get_prefix(prefix)
        revision: int = found.header.revision
        return {kv.key.decode(): (kv.value, kv.mod_revision) for kv in found}, revision

    async def _retrying(self, operation: Callable[[], Awaitable[T]], what: str) -> T:
        return await retry_async(operation, self._backoff, what=what, clock=self._clock, rng=self._rng)


@dataclass
class _LeaseState:
    lease_id: int | None = None


def _bytes(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else value


def _prefix_end(prefix: bytes) -> bytes:
    """The range end that covers every key starting with ``prefix``."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return b"\0"
    return trimmed[:-1] + bytes([trimmed[-1] + 1])


def _watch_event(raw: Any) -> WatchEvent:
    deleted = raw.kind == aetcd.EventKind.DELETE
    return WatchEvent(raw.kv.key.decode(), None if deleted else raw.kv.value, raw.kv.mod_revision)


def _track(present: set[str], event: WatchEvent) -> None:
    if event.value is None:
        present.discard(event.key)
    else:
        present.add(event.key)
