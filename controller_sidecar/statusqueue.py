"""Ordered, durable status reporting: the final status of a learner is never lost to an etcd outage.

:meth:`StatusReporter.report` numbers a record, appends it to the queue and writes the queue to
``status-pending.json`` in the state folder (temp file, fsync, rename) before it returns. One task delivers
the records strictly in order, one at a time: a :class:`TransientError` is retried with backoff until it
succeeds or the reporter is closed, a :class:`PermanentError` drops the record (logged and counted). A record
leaves the file only once delivered, and a restarted sidecar continues both the queue and the numbering.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import random
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TypedDict

from controller_sidecar.atomicfile import write_json_atomic
from controller_sidecar.clock import SYSTEM_CLOCK, Clock
from controller_sidecar.errors import PermanentError, SidecarError, TransientError
from controller_sidecar.jobfiles import read_regular
from controller_sidecar.retry import Backoff, retry_async
from controller_sidecar.status import ErrorCode, Phase, RawStatus, StatusRecord

LOGGER = logging.getLogger(__name__)

Deliver = Callable[[StatusRecord], Awaitable[None]]
STATE_FILE = "status-pending.json"
DEFAULT_BACKOFF = Backoff(initial_s=0.2, maximum_s=5.0, max_attempts=None)
FLUSH_POLL_S = 0.05
"""flush() checks its deadline at least this often (on the reporter's clock, so fake clocks advance)."""


class RawState(TypedDict):
    """The state file's JSON."""

    next_sequence: int
    last: RawStatus | None
    pending: list[RawStatus]


class StatusReporter:
    def __init__(
        self,
        deliver: Deliver,
        *,
        learner_id: int,
        state_dir: Path,
        clock: Clock = SYSTEM_CLOCK,
        backoff: Backoff = DEFAULT_BACKOFF,
        first_sequence: int = 1,
    ) -> None:
        """``first_sequence`` numbers a fresh learner's first record (the scheduler gives each attempt of a
        job its own range, so a resumed job's records sort after, and never overwrite, the earlier ones)."""
        self._deliver = deliver
        self.learner_id = learner_id
        self.state_path = state_dir / STATE_FILE
        self._clock = clock
        # Delivery never gives up on a transient error: attempts and deadline of the given backoff are ignored.
        self._backoff = replace(backoff, max_attempts=None, deadline_s=None)
        self._rng = random.Random()  # noqa: S311 - jitter, not cryptography
        self._pending: deque[StatusRecord] = deque()
        self._next_sequence = first_sequence
        self._last: StatusRecord | None = None
        self._started = False
        self._wakeup = asyncio.Event()
        self._drained = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.delivered = 0
        self.retries = 0
        self.dropped = 0

    async def start(self) -> None:
        """Load the persisted numbering and pending records, and start delivering them."""
        if self._started:
            return
        self._load()
        self._started = True
        self._signal()
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"status reporter {self.learner_id}")
        self._task.add_done_callback(_log_crash)

    def report(
        self,
        phase: Phase,
        *,
        error_code: ErrorCode = ErrorCode.NONE,
        message: str = "",
        exit_code: int | None = None,
    ) -> StatusRecord:
        """Queue the next record; it is on disk when this returns."""
        if not self._started:
            raise RuntimeError("StatusReporter.report() before start(): the persisted sequence is not loaded")
        record = StatusRecord(
            phase=phase,
            timestamp=datetime.fromtimestamp(self._clock.wall(), UTC),
            learner_id=self.learner_id,
            sequence=self._next_sequence,
            error_code=error_code,
            message=message,
            exit_code=exit_code,
        )
        self._next_sequence += 1
        self._pending.append(record)
        self._last = record
        self._save()
        self._signal()
        return record

    @property
    def last(self) -> StatusRecord | None:
        """The last record reported (by this sidecar or, before a restart, a previous one)."""
        return self._last

    @property
    def pending(self) -> tuple[StatusRecord, ...]:
        return tuple(self._pending)

    async def flush(self, timeout_s: float) -> bool:
        """Wait until every queued record was delivered or dropped; False when ``timeout_s`` ran out first."""
        deadline = self._clock.monotonic() + timeout_s
        while self._pending:
            remaining = deadline - self._clock.monotonic()
            if remaining <= 0:
                return False
            drained = asyncio.ensure_future(self._drained.wait())
            tick = asyncio.ensure_future(self._clock.sleep(min(remaining, FLUSH_POLL_S)))
            try:
                await asyncio.wait({drained, tick}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                drained.cancel()
                tick.cancel()
        return True

    async def aclose(self) -> None:
        """Stop delivering; undelivered records stay in the state file for the next start."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            if not self._pending:
                await self._wakeup.wait()
                self._wakeup.clear()
                continue
            record = self._pending[0]
            try:
                await retry_async(
                    functools.partial(self._deliver, record),
                    self._backoff,
                    what=f"status #{record.sequence} ({record.phase})",
                    clock=self._clock,
                    rng=self._rng,
                    on_retry=self._count_retry,
                )
            except PermanentError as e:
                LOGGER.error("status #%d (%s) dropped: %s", record.sequence, record.phase, e)  # noqa: TRY400 - expected, no traceback
                self.dropped += 1
            else:
                self.delivered += 1
            self._pending.popleft()
            self._save()
            self._signal()

    def _count_retry(self, attempt: int, error: TransientError) -> None:
        self.retries += 1

    def _signal(self) -> None:
        if self._pending:
            self._drained.clear()
            self._wakeup.set()
        else:
            self._drained.set()

    def _load(self) -> None:
        try:
            text = read_regular(self.state_path)
        except FileNotFoundError:
            return
        except OSError as e:
            raise SidecarError(f"cannot read the status queue {self.state_path}: {e.strerror}") from e
        try:
            state: RawState = json.loads(text)
            pending = [StatusRecord.from_raw(raw) for raw in state["pending"]]
            last = StatusRecord.from_raw(state["last"]) if state["last"] else None
            next_sequence = int(state["next_sequence"])
        except (ValueError, KeyError, TypeError) as e:
            raise SidecarError(f"the status queue {self.state_path} is not valid: {e}") from e
        self._pending.extend(pending)
        self._last = last
        self._next_sequence = next_sequence
        LOGGER.info("status queue %s: %d pending, next #%d", self.state_path, len(pending), next_sequence)

    def _save(self) -> None:
        state = RawState(
            next_sequence=self._next_sequence,
            last=self._last.to_raw() if self._last else None,
            pending=[record.to_raw() for record in self._pending],
        )
        try:
            write_json_atomic(self.state_path, state)
        except OSError as e:
            raise SidecarError(f"cannot write the status queue {self.state_path}: {e.strerror}") from e


def _log_crash(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        LOGGER.error("status delivery stopped", exc_info=task.exception())
