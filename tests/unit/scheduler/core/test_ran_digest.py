"""The loop asks a backend that reports it (Kubernetes) which learner image digest the job's learners run, once
they run, and keeps it for the job's provenance; a backend that does not report one is not asked."""

from __future__ import annotations

import pytest

from controller_sidecar.status import Phase
from learnerkit.scheduler.errors import BackendError
from tests.unit.scheduler.core.test_learner_ended import FakeBackend, Harness

pytestmark = pytest.mark.asyncio

RAN = "sha256:" + "4" * 64


class ClusterBackend(FakeBackend):
    """Reports the digest as a cluster does: none until a learner has started; it may fail to answer."""

    def __init__(self) -> None:
        super().__init__()
        self.digest = ""
        self.asked_digest = 0
        self.failing = False

    def learner_image_digest(self, job_id: str) -> str:
        self.asked_digest += 1
        if self.failing:
            raise BackendError("listing Pods in training: 503")
        return self.digest


def running(backend: FakeBackend) -> Harness:
    harness = Harness(backend=backend)
    for n in (1, 2):
        harness.store.report(n, Phase.PROCESSING)
    return harness


async def test_the_digest_is_read_once_the_cluster_reports_it_and_then_kept() -> None:
    backend = ClusterBackend()
    harness = running(backend)
    backend.failing = True
    await harness.step_at(0)
    backend.failing = False
    await harness.step_at(1)
    assert harness.tracked.ran_digest == ""
    backend.digest = RAN
    await harness.step_at(2)
    assert harness.tracked.ran_digest == RAN
    await harness.step_at(3)
    assert backend.asked_digest == 3, "not asked again once known"


async def test_a_new_attempt_reads_it_again() -> None:
    backend = ClusterBackend()
    harness = running(backend)
    backend.digest = RAN
    await harness.step_at(0)
    harness.tracked.new_attempt()
    assert harness.tracked.ran_digest == ""


async def test_a_backend_that_reports_none_leaves_it_empty() -> None:
    harness = running(FakeBackend())
    await harness.step_at(0)
    assert harness.tracked.ran_digest == ""
