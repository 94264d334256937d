"""The sidecars' records of a job's attempts as read from etcd (:mod:`controller_sidecar.recordchannel`), checked
against the learners the job ran: a learner without a readable record is named, never dropped in silence."""

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


def missing_records(read: RecordsRead, attempts: Iterable[int], learners: int) -> tuple[MissingRecord, ...]:
    """Each learner of each attempt without a readable record, and why."""
    missing = []
    for attempt in sorted(set(attempts)):
        for learner in range(1, learners + 1):
            if (attempt, learner) in read.records:
                continue
            reason = read.unreadable.get((attempt, learner), "its sidecar put no record in etcd")
            missing.append(MissingRecord(attempt, learner, reason))
    return tuple(missing)


def result_digests(records: Mapping[tuple[int, int], SidecarRecord]) -> tuple[Digested, ...]:
    """Every result file, named by its path below the job's prefix, in attempt and learner order."""
    return tuple(
        Digested(f"attempt-{a}/learner-{n}/{r.name}", r.sha256, r.size)
        for (a, n), record in sorted(records.items())
        for r in record.results
    )
