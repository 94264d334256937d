"""The sidecars' records of a job's attempts as read from etcd (:mod:`controller_sidecar.recordchannel`): a learner
whose sidecar opened its record and left none readable is named, never dropped in silence."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from controller_sidecar.provenancerecord import Digested, SidecarRecord
from controller_sidecar.recordchannel import RecordsRead


@dataclass(frozen=True)
class MissingRecord:
    attempt: int
    learner: int
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "learner": self.learner, "reason": self.reason}


def missing_records(read: RecordsRead, attempts: Iterable[int]) -> tuple[MissingRecord, ...]:
    """Each learner of the attempts whose sidecar opened its record and left none readable, and why."""
    wanted = set(attempts)
    return tuple(
        MissingRecord(attempt, learner, reason)
        for (attempt, learner), reason in sorted(read.unreadable.items())
        if attempt in wanted
    )


def result_digests(records: Mapping[tuple[int, int], SidecarRecord]) -> tuple[Digested, ...]:
    """Every result file, named by its path below the job's prefix, in attempt and learner order."""
    return tuple(
        Digested(f"attempt-{a}/learner-{n}/{r.name}", r.sha256, r.size)
        for (a, n), record in sorted(records.items())
        for r in record.results
    )
