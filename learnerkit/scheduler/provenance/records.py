"""The sidecars' records of a job's attempts (``attempt-<k>/learner-<n>/provenance/sidecar.json``), read back."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Protocol

from controller_sidecar.provenancerecord import RECORD_KEY, Digested, RecordError, SidecarRecord

LOGGER = logging.getLogger(__name__)


class RecordStore(Protocol):
    def get_bytes(self, bucket: str, key: str) -> bytes: ...


def attempt_records(
    store: RecordStore, bucket: str, prefix: str, keys: Iterable[str], job_id: str
) -> dict[tuple[int, int], SidecarRecord]:
    """Each readable record among ``keys`` by (attempt, learner); an unreadable one is logged and left out."""
    records: dict[tuple[int, int], SidecarRecord] = {}
    for key in sorted(keys):
        parts = key[len(prefix) :].split("/", 2)
        if len(parts) == 3 and parts[2] == RECORD_KEY and parts[0].startswith("attempt-"):
            attempt, learner = int(parts[0].removeprefix("attempt-")), int(parts[1].removeprefix("learner-"))
            try:
                records[(attempt, learner)] = SidecarRecord.from_json(store.get_bytes(bucket, key), key)
            except RecordError as e:
                LOGGER.warning("job %s: %s", job_id, e)
    return records


def result_digests(records: Mapping[tuple[int, int], SidecarRecord]) -> tuple[Digested, ...]:
    """Every result file, named by its path below the job's prefix, in attempt and learner order."""
    return tuple(
        Digested(f"attempt-{a}/learner-{n}/{r.name}", r.sha256, r.size)
        for (a, n), record in sorted(records.items())
        for r in record.results
    )
