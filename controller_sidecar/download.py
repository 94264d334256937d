"""Data in: every object under a prefix into a folder, in parallel, verified, resumable after a restart.

Each object's SHA-256 is taken as it streams in (no second read) and kept with it: the job's provenance names every
training data object by it (docs/provenance.md).

Resume: each completed object is recorded (key, size, ETag, SHA-256) in a JSON state file, rewritten atomically
(temp, fsync, rename) at most every :data:`STATE_FLUSH_S` and at the end. After a SIGKILL, objects recorded
there whose file is on disk with the recorded size and whose listing still shows the same size and ETag
are not fetched again; anything else is fetched again. Partial files a killed run left are removed.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from controller_sidecar.atomicfile import write_json_atomic
from controller_sidecar.errors import PermanentError, TransientError, UnsafeFileError, UnsafePathError
from controller_sidecar.jobfiles import read_regular
from controller_sidecar.retry import Backoff, retry_sync
from controller_sidecar.s3objects import PARTIAL_SUFFIX, HashedObject, RemoteObject
from controller_sidecar.safepaths import safe_destination
from controller_sidecar.settings import S3Location

if TYPE_CHECKING:
    from controller_sidecar.s3store import S3Store

LOGGER = logging.getLogger(__name__)
STATE_FLUSH_S = 0.5
"""How often, at most, the state file is rewritten while objects complete."""
STATE_VERSION = 2
"""2: each object's SHA-256 is recorded; a state of version 1 is fetched again."""


@dataclass(frozen=True)
class TransferStats:
    files: int
    """Objects fetched by this run."""
    bytes: int
    """Bytes fetched by this run."""
    skipped: int
    """Objects already complete from an earlier run."""
    retries: int
    seconds: float
    digests: dict[str, str] = field(default_factory=dict)
    """The SHA-256 of every object under the location, fetched or already here, by key."""
    objects: tuple[RemoteObject, ...] = ()
    """Every object under the location, as listed."""


@dataclass(frozen=True)
class _Planned:
    obj: RemoteObject
    path: Path


class ResumeState:
    """The completed objects of one location, as recorded in ``path``."""

    def __init__(self, path: Path, location: S3Location) -> None:
        self.path = path
        self.source = str(location)
        self.done: dict[str, RemoteObject] = {}
        self.digests: dict[str, str] = {}
        self.dirty = False

    @classmethod
    def load(cls, path: Path, location: S3Location) -> ResumeState:
        """The recorded state; empty when the file is missing, unreadable or for another location."""
        state = cls(path, location)
        try:
            raw = json.loads(read_regular(path))
        except FileNotFoundError:
            return state
        except (OSError, ValueError, UnsafeFileError) as error:
            LOGGER.warning("ignoring the unreadable download state %s: %s", path, error)
            return state
        if not isinstance(raw, Mapping) or raw.get("version") != STATE_VERSION or raw.get("source") != state.source:
            return state
        objects = raw.get("objects")
        if isinstance(objects, Mapping):
            for key, record in objects.items():
                if (
                    isinstance(record, Mapping)
                    and isinstance(record.get("size"), int)
                    and record.get("etag")
                    and isinstance(record.get("sha256"), str)
                ):
                    state.done[str(key)] = RemoteObject(str(key), int(record["size"]), str(record["etag"]))
                    state.digests[str(key)] = record["sha256"]
        return state

    def is_complete(self, obj: RemoteObject, path: Path) -> bool:
        """Recorded with the listing's size and ETag, and on disk (a regular file) with that size."""
        if self.done.get(obj.key) != obj:
            return False
        try:
            return path.is_file() and not path.is_symlink() and path.stat().st_size == obj.size
        except OSError:
            return False

    def record(self, fetched: HashedObject) -> None:
        self.done[fetched.key] = RemoteObject(fetched.key, fetched.size, fetched.etag)
        self.digests[fetched.key] = fetched.sha256
        self.dirty = True

    def save(self) -> None:
        """Rewrite the state file atomically: temp file, fsync, rename, fsync of the folder."""
        document = {
            "version": STATE_VERSION,
            "source": self.source,
            "objects": {
                key: {"size": o.size, "etag": o.etag, "sha256": self.digests[key]}
                for key, o in sorted(self.done.items())
            },
        }
        write_json_atomic(self.path, document)
        self.dirty = False


def plan_download(objects: list[RemoteObject], location: S3Location, dest: Path) -> list[_Planned]:
    """Where each object goes under ``dest``; raises UnsafePathError for the first key that would escape,
    or that would need another key's file as its folder (keys ``a`` and ``a/b``).

    Zero-byte keys ending in ``/`` are folder markers (as consoles create them) and are left out.
    """
    planned = []
    for obj in objects:
        relative = obj.key[len(location.prefix) :] if obj.key.startswith(location.prefix) else obj.key
        if relative.endswith("/") and obj.size == 0:
            continue
        where = f"s3://{location.bucket}/{obj.key}"
        planned.append(_Planned(obj, safe_destination(dest, relative, what=where)))
    files = {item.path: item.obj.key for item in planned}
    for item in planned:
        for folder in list(item.path.relative_to(dest).parents)[:-1]:  # the last one is dest itself
            other = files.get(dest / folder)
            if other is not None:
                raise UnsafePathError(
                    f"s3://{location.bucket}/{item.obj.key}: needs the folder {dest / folder}, "
                    f"which is the file of s3://{location.bucket}/{other} (a key cannot be a file and a folder)"
                )
    return planned


def remove_partials(dest: Path) -> int:
    """Delete the partial files an interrupted run left under ``dest``; returns how many."""
    removed = 0
    for current, _dirs, files in os.walk(dest):
        for name in files:
            if name.startswith(".") and name.endswith(PARTIAL_SUFFIX):
                Path(current, name).unlink(missing_ok=True)
                removed += 1
    return removed


def download_prefix(
    store: S3Store,
    location: S3Location,
    dest: Path,
    *,
    state_file: Path,
    concurrency: int,
    backoff: Backoff,
    on_bytes: Callable[[int], None] | None = None,
    on_retry: Callable[[], None] | None = None,
) -> TransferStats:
    """Download every object under ``location`` into ``dest``, keeping the key's path below the prefix.

    Every key is checked before anything is written (UnsafePathError). Each object is verified (size and
    ETag) and retried with ``backoff`` on TransientError; the first other error cancels what has not
    started and propagates (the state keeps what completed). ``on_bytes`` gets each completed object's size.
    """
    started = time.monotonic()
    lock = threading.Lock()
    retries = 0

    def count_retry(_attempt: int, _error: TransientError) -> None:
        nonlocal retries
        with lock:
            retries += 1
        if on_retry is not None:
            on_retry()

    objects = retry_sync(lambda: store.list(location), backoff, what=f"list {location}", on_retry=count_retry)
    planned = plan_download(objects, location, dest)
    dest.mkdir(parents=True, exist_ok=True)
    remove_partials(dest)
    state = ResumeState.load(state_file, location)
    pending = [item for item in planned if not state.is_complete(item.obj, item.path)]
    skipped = len(planned) - len(pending)
    fetched_files = fetched_bytes = 0

    def fetch(item: _Planned) -> HashedObject:
        def attempt() -> HashedObject:
            return store.download_hashed(location.bucket, item.obj, item.path)

        what = f"download s3://{location.bucket}/{item.obj.key}"
        try:
            return retry_sync(attempt, backoff, what=what, on_retry=count_retry)
        except OSError as error:
            raise PermanentError(f"{what}: cannot write {item.path}: {error.strerror or error}") from error

    pool = ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="download")
    futures: set[Future[HashedObject]] = {pool.submit(fetch, item) for item in pending}
    last_save = time.monotonic()
    try:
        while futures:
            finished, futures = wait(futures, timeout=STATE_FLUSH_S, return_when=FIRST_COMPLETED)
            for future in finished:
                fetched = future.result()
                state.record(fetched)
                fetched_files += 1
                fetched_bytes += fetched.size
                if on_bytes is not None:
                    on_bytes(fetched.size)
            if state.dirty and time.monotonic() - last_save >= STATE_FLUSH_S:
                state.save()
                last_save = time.monotonic()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        for future in futures:
            if future.done() and not future.cancelled() and future.exception() is None:
                state.record(future.result())
        if state.dirty or not state_file.exists():
            state.save()
    return TransferStats(
        files=fetched_files,
        bytes=fetched_bytes,
        skipped=skipped,
        retries=retries,
        seconds=time.monotonic() - started,
        digests={item.obj.key: state.digests[item.obj.key] for item in planned},
        objects=tuple(item.obj for item in planned),
    )
