"""The client side of `job provenance` and `job verify`: a job's provenance documents fetched through the API,
a job's files downloaded for verifying, and its evaluation data hashed again as the scheduler streams it."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from learnerkit.scheduler.client.download import FailedFile, download_all
from learnerkit.scheduler.client.http import SchedulerClient
from learnerkit.scheduler.errors import SchedulerError
from learnerkit.scheduler.facade import JobView, StoredFile
from learnerkit.scheduler.provenance.factsheet import FACTSHEET_JSON
from learnerkit.scheduler.provenance.verify import DataAnswer, DataLookup, NoProvenanceError

WRITTEN_WITHIN_S = 30.0
"""How long a job that ended may go without its provenance: the scheduler writes it just after the job's end."""
POLL_S = 0.5
ENDED_WITH_PROVENANCE = frozenset({"COMPLETED", "HALTED", "FAILED"})


class ProvenanceSource(Protocol):
    """What of :class:`SchedulerClient` finding a job's provenance uses."""

    def list_files(self, job_id: str, *, what: str = "all") -> list[StoredFile]: ...
    def get(self, job_id: str) -> JobView: ...


def provenance_files(
    client: ProvenanceSource,
    job_id: str,
    *,
    wait_s: float = WRITTEN_WITHIN_S,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
) -> list[StoredFile]:
    """The job's provenance documents. A job that has just ended gets up to ``wait_s`` for them to be written;
    NoProvenanceError when a job has none, saying whether it has not ended yet or its documents never came."""
    deadline = clock() + wait_s
    while not (files := client.list_files(job_id, what="provenance")):
        status = client.get(job_id).status
        if status not in ENDED_WITH_PROVENANCE:
            raise NoProvenanceError(
                f"job {job_id} is {status}: its provenance is written as it ends COMPLETED, HALTED or FAILED"
            )
        if clock() >= deadline:
            raise NoProvenanceError(
                f"job {job_id} ended {status} but its provenance was not written within {wait_s:g} s of asking "
                "(the scheduler writes it just after the job ends; its log says why it did not: no signing key, "
                "or the results store refused it)"
            )
        pause(POLL_S)
    return files


def job_factsheet(client: SchedulerClient, job_id: str) -> dict[str, Any]:
    provenance_files(client, job_id)
    pieces: list[bytes] = []
    client.copy_file(job_id, FACTSHEET_JSON, pieces.append)
    sheet: dict[str, Any] = json.loads(b"".join(pieces))
    return sheet


def download_for_verify(client: SchedulerClient, job_id: str, root: Path) -> list[FailedFile]:
    """Everything the job stored but its checkpoints (the provenance does not name them), under ``root``."""
    provenance_files(client, job_id)  # waits for a job that has just ended
    files = [item for item in client.list_files(job_id, what="all") if item.kind != "checkpoints"]
    return download_all(client, job_id, files, root, lambda _n: None)


def evaluation_data_hasher(client: SchedulerClient, job_id: str) -> DataLookup:
    """The SHA-256 of an evaluation data object as its store holds it now, streamed through the scheduler (which
    holds the job's account); a refusal or an unreachable store is the answer's problem."""

    def lookup(uri: str) -> DataAnswer:
        digest = hashlib.sha256()
        try:
            client.copy_evaluation_data(job_id, uri, digest.update)
        except SchedulerError as e:
            return DataAnswer(problem=str(e))
        return DataAnswer(digest.hexdigest())

    return lookup
