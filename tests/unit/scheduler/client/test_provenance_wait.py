"""`job provenance` and `job verify` asked just after a job ended: the provenance is written just after the end, so
they wait for it (with a deadline) instead of saying the job has none."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from learnerkit.scheduler.client.provenance import POLL_S, provenance_files
from learnerkit.scheduler.facade import JobView, StoredFile
from learnerkit.scheduler.provenance.verify import NoProvenanceError

DOCUMENT = StoredFile("provenance/provenance.intoto.json", 100, "provenance")


@dataclass
class Scheduler:
    """The API as a job's provenance comes: none for ``empty_listings`` listings, then the documents."""

    status: str
    empty_listings: int
    listings: int = 0

    def list_files(self, job_id: str, *, what: str = "all") -> list[StoredFile]:
        assert what == "provenance"
        self.listings += 1
        return [] if self.listings <= self.empty_listings else [DOCUMENT]

    def get(self, job_id: str) -> JobView:
        return JobView(job_id, "team-a", "mnist", self.status)


@dataclass
class Clock:
    """Time that moves only as the waiter pauses."""

    now: float = 0.0
    pauses: list[float] = field(default_factory=list)

    def __call__(self) -> float:
        return self.now

    def pause(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


def test_a_job_that_has_just_completed_gets_its_provenance_once_written() -> None:
    scheduler, clock = Scheduler("COMPLETED", empty_listings=3), Clock()
    assert provenance_files(scheduler, "job-7", clock=clock, pause=clock.pause) == [DOCUMENT]
    assert clock.pauses == [POLL_S] * 3


def test_a_job_still_running_is_said_to_be_running_at_once() -> None:
    scheduler, clock = Scheduler("PROCESSING", empty_listings=1), Clock()
    with pytest.raises(NoProvenanceError, match="job job-7 is PROCESSING: its provenance is written as it ends"):
        provenance_files(scheduler, "job-7", clock=clock, pause=clock.pause)
    assert clock.pauses == []


def test_a_provenance_never_written_is_reported_after_the_deadline() -> None:
    scheduler, clock = Scheduler("COMPLETED", empty_listings=1000), Clock()
    with pytest.raises(NoProvenanceError, match=r"ended COMPLETED but its provenance was not written within 5 s"):
        provenance_files(scheduler, "job-7", wait_s=5.0, clock=clock, pause=clock.pause)
    assert clock.now == pytest.approx(5.0)
