"""What a job stored in the object store, read back for its tenant: its files, and its metric history.

Everything lives under the job's prefix in the results container (docs/architecture.md, "Outputs in the
object store"): ``attempt-<k>/learner-<n>/{results,logs,checkpoints}/...`` from the sidecars, and the model
the job ran (an object or folder named ``model...`` directly under the job), and the job's signed provenance
under ``provenance/`` (docs/provenance.md), and each evaluation round's outputs under
``evaluations/round-<r>/<name>/{results,logs}/`` (docs/evaluations.md). A file is named by its path
below the job's prefix; only names that fall into one of these kinds are listed or served, so a request
can never reach past the job.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from typing import Literal, Protocol, get_args

from controller_sidecar.errors import UnsafePathError
from controller_sidecar.retry import HOST_CALLS, retry_sync
from controller_sidecar.s3objects import RemoteObject
from controller_sidecar.safepaths import relative_parts
from controller_sidecar.settings import S3Location
from learnerkit.scheduler.facade import FileStream, StoredFile

Kind = Literal["results", "logs", "checkpoints", "model", "provenance", "evaluations"]
KINDS: tuple[Kind, ...] = get_args(Kind)
WHAT = (*KINDS, "all")
"""What ``job download --what`` takes."""
METRICS_FILE = "metrics.jsonl"
"""Under a learner's ``logs/``: its own metrics.jsonl, then what the sidecar read (TensorBoard scalars)."""
_LEARNER_PATH = re.compile(r"^attempt-(\d+)/learner-(\d+)/(results|logs|checkpoints)/.+")
_EVALUATION_PATH = re.compile(r"^evaluations/round-\d+/[^/]+/(results|logs)/.+")
"""An evaluation's outputs: its reports and its evaluator's log (not its sidecar's record)."""


class ObjectStore(Protocol):
    """What of :class:`~controller_sidecar.s3store.S3Store` reading a job's outputs uses."""

    def list(self, location: S3Location) -> list[RemoteObject]: ...
    def read_range(self, bucket: str, key: str, first: int, last: int) -> Iterator[bytes]: ...


def kind_of(path: str) -> Kind | None:
    """The kind of a path below the job's prefix, or None when it is none of a job's outputs."""
    match = _LEARNER_PATH.match(path)
    if match is not None:
        return match.group(3)  # type: ignore[return-value]
    if path.startswith("provenance/"):
        return "provenance"
    if _EVALUATION_PATH.match(path):
        return "evaluations"
    return "model" if path.startswith("model") else None


def list_outputs(store: ObjectStore, job: S3Location, what: str = "all") -> list[StoredFile]:
    """The job's stored files of kind ``what`` (or ``all``), in key order."""
    if what not in WHAT:
        raise ValueError(f"what: one of {', '.join(WHAT)}, got {what!r}")
    found: list[StoredFile] = []
    for obj in _listed(store, job):
        path = obj.key[len(job.prefix) :]
        kind = kind_of(path)
        if kind is not None and what in ("all", kind):
            found.append(StoredFile(path, obj.size, kind, obj.etag))
    return found


def open_output(store: ObjectStore, job: S3Location, path: str) -> FileStream | None:
    """One stored file of the job, streamed; None when ``path`` names none (or names something else)."""
    try:
        relative_parts(path, what="path")
    except UnsafePathError:
        return None
    if kind_of(path) is None:
        return None
    return open_stored(store, job.bucket, job.key(path))


def open_stored(store: ObjectStore, bucket: str, key: str) -> FileStream | None:
    """The object ``key``, streamed; None where the store has none. The caller has checked the job may read it."""
    found = next((obj for obj in _listed(store, S3Location(bucket, key)) if obj.key == key), None)
    if found is None:
        return None
    if found.size == 0:
        return FileStream(iter(()), 0)
    # The request is sent now, so a store that does not answer is an error before the answer starts.
    opened = retry_sync(lambda: store.read_range(bucket, key, 0, found.size - 1), HOST_CALLS, what=key)
    return FileStream(opened, found.size)


def metrics_history(
    store: ObjectStore, job: S3Location, attempts: int, learner_id: int, *, first: int = 1
) -> FileStream:
    """The learner's stored metrics.jsonl of every attempt (from ``first``), oldest first, as one stream of JSON
    lines."""
    stored: list[RemoteObject] = []
    for attempt in range(first, attempts + 1):
        key = job.key(f"attempt-{attempt}/learner-{learner_id}/logs/{METRICS_FILE}")
        stored += [obj for obj in _listed(store, S3Location(job.bucket, key)) if obj.key == key]
    version = hashlib.sha256("\n".join(f"{o.key} {o.size} {o.etag}" for o in stored).encode()).hexdigest()
    return FileStream(_concatenated(store, job.bucket, stored), sum(obj.size for obj in stored), version)


def metrics_after(
    store: ObjectStore, job: S3Location, attempt: int, learner_id: int, offset: int
) -> tuple[bytes, int] | None:
    """What one attempt's stored metrics.jsonl holds past ``offset``, and the offset those bytes start at: ``offset``,
    or 0 when the object is now shorter (stored anew); None while none is stored. A reader that keeps its offset
    reads each byte once however long the history grows."""
    key = job.key(f"attempt-{attempt}/learner-{learner_id}/logs/{METRICS_FILE}")
    found = [obj for obj in _listed(store, S3Location(job.bucket, key)) if obj.key == key]
    if not found:
        return None
    size = found[0].size
    start = offset if size >= offset else 0
    if size == start:
        return b"", start
    chunks = retry_sync(lambda: store.read_range(job.bucket, key, start, size - 1), HOST_CALLS, what=key)
    return b"".join(chunks), start


def _listed(store: ObjectStore, location: S3Location) -> list[RemoteObject]:
    return retry_sync(lambda: store.list(location), HOST_CALLS, what=f"list {location}")


def _concatenated(store: ObjectStore, bucket: str, objects: list[RemoteObject]) -> Iterator[bytes]:
    for obj in objects:
        yield from _object_chunks(store, bucket, obj)


def _object_chunks(store: ObjectStore, bucket: str, obj: RemoteObject) -> Iterator[bytes]:
    if obj.size == 0:
        return
    yield from retry_sync(lambda: store.read_range(bucket, obj.key, 0, obj.size - 1), HOST_CALLS, what=obj.key)
