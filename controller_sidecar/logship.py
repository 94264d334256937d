"""Shipping ``learner.log`` to the object store in numbered parts, with no loss and no duplicate bytes.

The log is shipped as raw bytes, exactly as the learner wrote them (the learner contract never decodes it):
parts ``learner.log.part-000001``, ``-000002``, ... under the learner's ``logs/`` prefix; concatenated in
number order they are the log. A part is shipped every interval, or as soon as ``chunk_bytes`` have
accumulated, so no part is larger than ``chunk_bytes``.

Progress (the file offset and inode after the last shipped part, and the next part number) is recorded in a
state file under ``/job/control`` only after the sink confirmed the part, written temp + fsync + rename. A
sidecar that restarts continues from there: a part shipped but not yet recorded is shipped again under the
same name, from the same offset, so it replaces itself (possibly grown) and no byte is lost or doubled.

Lines reach ``on_lines`` (stdout and the regex metrics) once, a batch per read: before a batch goes out, the
offset where it ends is recorded in ``<state>-emitted.json`` (atomic, without fsync: it guards against a
sidecar restart, not a host crash). A restarted sidecar reads again from the shipped offset to ship those bytes,
but hands ``on_lines`` only what lies past the emitted one. A sidecar killed between recording and emitting
loses that batch from stdout; the shipped log still has every byte.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from controller_sidecar.atomicfile import write_atomic
from controller_sidecar.clock import SYSTEM_CLOCK, Clock
from controller_sidecar.errors import PermanentError, TransientError
from controller_sidecar.jobfiles import read_regular
from controller_sidecar.logtail import FileTailer, FileWakeup, LineSplitter
from controller_sidecar.retry import Backoff, retry_async

LOGGER = logging.getLogger(__name__)

Sink = Callable[[str, bytes], Awaitable[None]]
"""Stores one part: (name relative to the learner's ``logs/`` prefix, bytes); raises TransientError to be retried."""
LinesHook = Callable[[list[bytes]], None]
"""Gets the complete lines of one read at once: a learner that logs every step costs one call per read, not one per
line (the sidecar writes them to its stdout in one write)."""
"""Gets each line with its ``\\n``; a line without one continues in the next call (a piece of an over-long line)."""
RetryHook = Callable[[int, TransientError], None]

PART_PREFIX = "learner.log.part-"
_PART_NAME = re.compile(r"(?:^|/)learner\.log\.part-(\d{6,})$")
MAX_LINE_BYTES = 64 << 10
"""Lines longer than this reach ``on_lines`` in pieces (the shipped bytes are never cut)."""
POLL_INTERVAL_S = 0.25
"""What the learner appends is read this often (a new or rotated log at once): a line reaches the sidecar's
stdout and the log's metric rules within this."""
UNBOUNDED_RETRY = Backoff(initial_s=0.2, maximum_s=10.0, max_attempts=None)
"""The store may be away for long; the shutdown deadline, not the attempt count, ends the retries."""


def part_name(number: int) -> str:
    return f"{PART_PREFIX}{number:06d}"


def part_number(name: str) -> int:
    """The number of the part ``name`` (which may carry a prefix); ValueError when it is not a part."""
    match = _PART_NAME.search(name)
    if match is None:
        raise ValueError(f"{name!r} is not a log part (expected {PART_PREFIX}NNNNNN)")
    return int(match.group(1))


@dataclass(frozen=True)
class ShipState:
    """What the state file records: where the shipped bytes end, and the next part's number."""

    offset: int = 0
    inode: int | None = None
    next_part: int = 1
    bytes_shipped: int = 0

    @classmethod
    def load(cls, path: Path) -> ShipState:
        try:
            raw = json.loads(read_regular(path))
            state = cls(
                offset=int(raw["offset"]),
                inode=None if raw["inode"] is None else int(raw["inode"]),
                next_part=int(raw["next_part"]),
                bytes_shipped=int(raw["bytes_shipped"]),
            )
        except FileNotFoundError:
            return cls()
        except (ValueError, TypeError, KeyError) as error:
            # Starting over would ship every byte twice; a person has to look.
            raise PermanentError(
                f"{path}: log shipping state is unreadable ({error!r}); remove it to ship again"
            ) from error
        if state.offset < 0 or state.next_part < 1:
            raise PermanentError(f"{path}: log shipping state is out of range: {raw!r}")
        return state

    def save(self, path: Path) -> None:
        write_atomic(path, json.dumps(dataclasses.asdict(self)).encode())


@dataclass(frozen=True)
class Emitted:
    """Where the lines already handed to ``on_lines`` end, in the file with this inode."""

    inode: int | None
    offset: int

    @classmethod
    def load(cls, path: Path) -> Emitted | None:
        """None when absent or unreadable (then lines after the shipped offset may be emitted twice)."""
        try:
            raw = json.loads(path.read_bytes())
            return cls(inode=raw["inode"], offset=int(raw["offset"]))
        except FileNotFoundError:
            return None
        except (ValueError, TypeError, KeyError) as error:
            LOGGER.warning("%s is unreadable (%r); lines after the shipped offset may be emitted again", path, error)
            return None

    def save(self, path: Path) -> None:
        write_atomic(path, json.dumps(dataclasses.asdict(self)).encode(), durable=False)


class LogShipper:
    """Tails ``log_path`` and ships it through ``sink`` in numbered parts; see the module docstring."""

    def __init__(
        self,
        log_path: Path,
        state_file: Path,
        sink: Sink,
        *,
        interval_s: float,
        chunk_bytes: int = 8 << 20,
        on_lines: LinesHook | None = None,
        clock: Clock = SYSTEM_CLOCK,
        backoff: Backoff = UNBOUNDED_RETRY,
        on_retry: RetryHook | None = None,
        max_line_bytes: int = MAX_LINE_BYTES,
        poll_interval_s: float = POLL_INTERVAL_S,
    ) -> None:
        if interval_s <= 0 or chunk_bytes < 1:
            raise ValueError(f"interval_s must be > 0 and chunk_bytes >= 1, got {interval_s}, {chunk_bytes}")
        self._log_path = log_path
        self._state_file = state_file
        self._sink = sink
        self._interval_s = interval_s
        self._chunk_bytes = chunk_bytes
        self._on_lines = on_lines
        self._clock = clock
        self._backoff = backoff
        self._on_retry = on_retry
        self._poll_interval_s = poll_interval_s
        self._state = ShipState.load(state_file)
        self._tailer = FileTailer(log_path, self._state.offset, inode=self._state.inode)
        self._splitter = LineSplitter(max_line_bytes)
        self._pending = bytearray()
        """Read but not yet shipped; never more than ``chunk_bytes``, and it ends at the tailer's offset."""
        self._emitted_file = state_file.with_name(f"{state_file.stem}-emitted.json")
        emitted = Emitted.load(self._emitted_file)
        self._skip = emitted if emitted is not None and emitted.offset > self._state.offset else None
        """Lines up to this offset went to ``on_lines`` before a restart: not again."""
        self._unsplit = 0
        """Bytes read but still in the splitter (the start of a line that has not ended yet)."""
        self._lock = asyncio.Lock()

    @property
    def state(self) -> ShipState:
        """The progress recorded in the state file."""
        return self._state

    async def run(self, stop: asyncio.Event) -> None:
        """Ship until ``stop`` is set, then ship everything that is left (the final flush)."""
        async with FileWakeup([self._log_path], clock=self._clock) as wakeup:
            due = self._clock.monotonic() + self._interval_s
            while not stop.is_set():
                got = await self._pull()
                now = self._clock.monotonic()
                full = len(self._pending) >= self._chunk_bytes
                if full or (now >= due and self._pending):
                    await self._ship_pending()
                if now >= due:
                    due = now + self._interval_s
                if got or full:
                    await asyncio.sleep(0)  # more may be waiting: read again before sleeping
                    continue
                await _first_of(stop.wait(), wakeup.wait(min(self._poll_interval_s, max(0.0, due - now))))
        await self.flush()

    async def flush(self) -> None:
        """Read the log to its end and ship all of it; then pass the unterminated last line to ``on_lines``."""
        while True:
            if len(self._pending) >= self._chunk_bytes:
                await self._ship_pending()
            if not await self._pull():
                break
        await self._ship_pending()
        self._deliver(self._splitter.flush())

    async def _pull(self) -> int:
        """Read what fits in the pending buffer; pass its complete lines on. Returns the number of bytes read."""
        room = self._chunk_bytes - len(self._pending)
        if room <= 0:
            return 0
        data = await asyncio.to_thread(self._tailer.read_new, room)
        if data:
            self._pending += data
            self._unsplit += len(data)
            self._deliver(self._splitter.feed(data))
        return len(data)

    def _deliver(self, lines: list[bytes]) -> None:
        """Hand ``lines`` (which end ``_unsplit`` bytes before the tailer's offset) to ``on_lines``, once."""
        self._unsplit -= sum(map(len, lines))
        end = max(0, self._tailer.offset - self._unsplit)
        fresh = self._not_emitted(lines, end)
        if self._on_lines is None or not fresh:
            return
        Emitted(self._tailer.inode, end).save(self._emitted_file)
        self._on_lines(fresh)

    def _not_emitted(self, lines: list[bytes], end: int) -> list[bytes]:
        """``lines`` less what a previous sidecar emitted already (in the same file, read without a reset)."""
        skip = self._skip
        if skip is None:
            return lines
        if skip.inode != self._tailer.inode or self._tailer.resets:
            self._skip = None
            return lines
        if end >= skip.offset:
            self._skip = None
        position = end - sum(map(len, lines))
        fresh = []
        for line in lines:
            already = min(len(line), max(0, skip.offset - position))
            position += len(line)
            if already < len(line):
                fresh.append(line[already:])
        return fresh

    async def _ship_pending(self) -> None:
        async with self._lock:
            if not self._pending:
                return
            data = bytes(self._pending)
            name = part_name(self._state.next_part)

            async def put() -> None:
                await self._sink(name, data)

            await retry_async(put, self._backoff, what=f"ship {name}", clock=self._clock, on_retry=self._on_retry)
            self._pending.clear()
            state = ShipState(
                offset=self._tailer.offset,
                inode=self._tailer.inode,
                next_part=self._state.next_part + 1,
                bytes_shipped=self._state.bytes_shipped + len(data),
            )
            await asyncio.to_thread(state.save, self._state_file)
            self._state = state
            LOGGER.debug("shipped %s (%d bytes, log offset %d)", name, len(data), state.offset)


async def _first_of(*waits: Awaitable[object]) -> None:
    """Wait until the first of ``waits`` finishes; cancel the others."""
    tasks = [asyncio.ensure_future(wait) for wait in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


def structured_line(job_id: str, learner_id: int, line: bytes, *, ts: float | None = None) -> str:
    """One JSON line for the sidecar's stdout carrying one learner line.

    ``truncated`` is true for a piece of an over-long line (the line goes on in the next record) and for an
    unterminated last line.
    """
    truncated = not line.endswith(b"\n")
    text = line.removesuffix(b"\n").removesuffix(b"\r").decode("utf-8", errors="replace")
    moment = datetime.fromtimestamp(ts, UTC) if ts is not None else datetime.now(UTC)
    record = {
        "ts": moment.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "job_id": job_id,
        "learner_id": learner_id,
        "source": "learner",
        "line": text,
        "truncated": truncated,
    }
    return json.dumps(record, ensure_ascii=False)


def assemble_log(parts: Iterable[tuple[str, bytes]]) -> bytes:
    """The log from its parts ``(name, bytes)`` in any order; names may carry a prefix (``.../logs/``).

    Raises ValueError for a name that is not a part, a number given twice, or a missing number.
    """
    numbered: dict[int, bytes] = {}
    for name, data in parts:
        number = part_number(name)
        if number in numbered:
            raise ValueError(f"log part {number} is given twice ({name!r})")
        numbered[number] = data
    missing = sorted(set(range(1, len(numbered) + 1)) - numbered.keys())
    if missing:
        raise ValueError(f"log parts are missing: {part_name(missing[0])} (and {len(missing) - 1} more)")
    return b"".join(numbered[number] for number in sorted(numbered))
