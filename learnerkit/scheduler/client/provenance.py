"""The client side of `job provenance` and `job verify`: a job's provenance documents fetched through the API,
a job's files downloaded for verifying, and the local engine asked what it holds under an image reference."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from learnerkit.common.engine import EngineError, image_id
from learnerkit.scheduler.client.download import FailedFile, download_all
from learnerkit.scheduler.client.http import SchedulerClient
from learnerkit.scheduler.facade import StoredFile
from learnerkit.scheduler.provenance.verify import NoProvenanceError
from learnerkit.scheduler.provenance.writer import FACTSHEET_JSON


def provenance_files(client: SchedulerClient, job_id: str) -> list[StoredFile]:
    """The job's provenance documents; NoProvenanceError when it has none (yet)."""
    files = client.list_files(job_id, what="provenance")
    if not files:
        raise NoProvenanceError(
            f"job {job_id} has no provenance: it is written as the job ends COMPLETED, HALTED or FAILED"
        )
    return files


def job_factsheet(client: SchedulerClient, job_id: str) -> dict[str, Any]:
    provenance_files(client, job_id)
    pieces: list[bytes] = []
    client.copy_file(job_id, FACTSHEET_JSON, pieces.append)
    sheet: dict[str, Any] = json.loads(b"".join(pieces))
    return sheet


def download_for_verify(client: SchedulerClient, job_id: str, root: Path) -> list[FailedFile]:
    """Everything the job stored but its checkpoints (the provenance does not name them), under ``root``."""
    files = [item for item in client.list_files(job_id, what="all") if item.kind != "checkpoints"]
    if not any(item.kind == "provenance" for item in files):
        provenance_files(client, job_id)
    return download_all(client, job_id, files, root, lambda _n: None)


def engine_digest(reference: str) -> str | None:
    """The ID of the image the local engine holds under ``reference``; None where it has none or none answers."""
    try:
        return image_id(reference)
    except EngineError:
        return None
