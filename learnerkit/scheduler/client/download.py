"""``job download``: a job's stored files, through the scheduler's REST API, onto disk.

Files are fetched :data:`WORKERS` at a time, each worker on a connection of its own, as the object store's
own client fetches parts in parallel (bench/download.py compares the two).

Each file is written to a temporary name in its destination folder and renamed into place once whole, so an
interrupted download leaves no half-written file under a real name. Paths come from the server's listing and
are checked again here: a path that would land outside the destination is refused. A file that cannot be
fetched or written is reported by its path and the others are still downloaded.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from controller_sidecar.errors import UnsafePathError
from controller_sidecar.safepaths import safe_destination
from learnerkit.common.errors import LearnerkitError
from learnerkit.scheduler.client.http import SchedulerClient
from learnerkit.scheduler.errors import SchedulerError
from learnerkit.scheduler.facade import StoredFile

WORKERS = 4


@dataclass
class DownloadSummary:
    job_id: str
    to: str
    files: list[StoredFile] = field(default_factory=list)
    bytes: int = 0
    skipped: list[str] = field(default_factory=list)
    """Kinds asked for that the job did not store (``model``), each with why."""
    failed: list[FailedFile] = field(default_factory=list)
    """Listed files not downloaded, each with the error."""


@dataclass(frozen=True)
class FailedFile:
    path: str
    error: str


def destination(root: Path, path: str) -> Path:
    """``root/path``, refusing a listed path that is empty, absolute, has ``.``/``..`` segments or leads through a
    link below ``root`` (the sidecar's own check of what it writes)."""
    try:
        return safe_destination(root, path, what="the scheduler's listing")
    except UnsafePathError as e:
        raise SchedulerError(f"refusing to write it: {e}") from e


def download_file(
    client: SchedulerClient, job_id: str, item: StoredFile, root: Path, on_bytes: Callable[[int], object]
) -> Path:
    """One file to ``root/<its path>``, via a temporary file renamed into place once complete."""
    target = destination(root, item.path)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed below, renamed or removed
        dir=target.parent, prefix=f".{target.name}.", suffix=".part", delete=False
    )
    temporary = Path(handle.name)
    received = 0

    def write(chunk: bytes) -> None:
        nonlocal received
        handle.write(chunk)
        received += len(chunk)
        on_bytes(len(chunk))

    try:
        with handle:
            client.copy_file(job_id, item.path, write)
        _check_size(item, received)
        temporary.replace(target)
    finally:
        temporary.unlink(missing_ok=True)  # gone once renamed; what a failure left
    return target


def _check_size(item: StoredFile, received: int) -> None:
    if received != item.size:
        raise SchedulerError(f"{item.path}: received {received} of {item.size} bytes")


def download_all(
    client: SchedulerClient,
    job_id: str,
    files: list[StoredFile],
    root: Path,
    on_bytes: Callable[[int], object],
    *,
    workers: int = WORKERS,
) -> list[FailedFile]:
    """Every file of ``files`` under ``root``, ``workers`` at a time; the files that failed, each with its
    error (the others are complete, none is left half-written)."""
    local = threading.local()
    clients: list[SchedulerClient] = []
    lock = threading.Lock()

    def fetch(item: StoredFile) -> None:
        own = getattr(local, "client", None)
        if own is None:
            own = local.client = client.copy()
            with lock:
                clients.append(own)
        download_file(own, job_id, item, root, on_bytes)

    failed: list[FailedFile] = []
    try:
        with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="download") as pool:
            futures = [(item, pool.submit(fetch, item)) for item in files]
            for item, future in futures:
                try:
                    future.result()
                except (LearnerkitError, OSError) as e:
                    failed.append(FailedFile(item.path, str(e)))
    finally:
        for own in clients:
            own.close()
    return failed
