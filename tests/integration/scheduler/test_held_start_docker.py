"""The preemptor's held start on the Docker backend, end to end: real pairs, etcd and S3.

The victim ignores the halt (a 45 s grace), so the hand-over lasts long enough to look at: the preemptor's pair is
deployed at the decision, its sidecar downloads and then waits for the release while the preemptor is still
QUEUED; its learner's command runs only after the victim has ended. A held preemptor that is cancelled leaves
nothing on the engine."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from typing import Any

import docker.errors
import pytest

from controller_sidecar.status import Phase
from learnerkit.common.engine import engine
from learnerkit.pair.docker import pairs_of
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.preemption.rules import PreemptionRules
from tests.integration.scheduler.conftest import TERMINAL, Harness, leftovers, manifest
from tests.integration.scheduler.test_preemption_docker import IGNORES_HALT, URGENT_EXTRA, running_with_metrics
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(600)]

TENANT = "team-a"
STUBBORN_EXTRA = "learnerkit:\n  priority: -10\n  halt_grace: 45\n  checkpoint_interval: 1\n"
"""A grace to look at the hand-over in: a held start took 10 s on this loaded 2-CPU machine."""
STAMPED = "echo BEGIN $(date +%s.%N)"
STUBBORN = IGNORES_HALT.replace("while step < 400:", "while step < 100000:")
"""Ignores the halt and never ends by itself: it ends only when killed at its grace's end."""


@pytest.fixture
def preempting(etcd_server: Any, service_options: SchedulerOptions, scheduler_buckets: Any) -> Iterator[Harness]:
    made = Harness(etcd_server, replace(service_options, preemption=PreemptionRules(min_run_s=1.0)))
    yield made
    made.kill()


def sidecar_log(job_id: str) -> str:
    handles = pairs_of(job_id)
    if not handles or not handles[0].sidecar:  # not made yet (the learner's container comes first)
        return ""
    try:
        return str(engine().containers.get(handles[0].sidecar).logs().decode(errors="replace"))
    except docker.errors.NotFound:  # removed between the listing and the read: the next poll tells
        return ""


def learner_phase(h: Harness, job_id: str) -> Phase | None:
    records, _, _ = h.call(h.service.shared.store.learner_records(job_id))
    return records[1].phase if 1 in records else None


def epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def stubborn_victim(h: Harness, s3: Any, buckets: Any) -> str:
    buckets.put_object(Bucket="sched-data", Key="stubborn/stubborn.py", Body=STUBBORN.encode())
    command = "python $DATA_DIR/stubborn.py"
    text = manifest(s3, command, data="stubborn", cpus=1.5, extra=STUBBORN_EXTRA)
    victim = h.call(h.service.submit(TENANT, text)).job_id
    running_with_metrics(h, victim)
    return victim


def test_the_preemptor_downloads_held_while_the_victim_halts_and_starts_after_it(
    preempting: Harness, s3_server: Any, scheduler_buckets: Any
) -> None:
    h = preempting
    victim = stubborn_victim(h, s3_server, scheduler_buckets)
    urgent = h.call(h.service.submit(TENANT, manifest(s3_server, STAMPED, cpus=1.5, extra=URGENT_EXTRA))).job_id
    wait_until(lambda: "held until" in sidecar_log(urgent), timeout=60, message="the held sidecar's downloads done")
    view, victim_view = h.call(h.service.get(TENANT, urgent)), h.call(h.service.get(TENANT, victim))
    assert view.status == "QUEUED", "held: no reservation while the victim holds the room"
    assert victim_view.status == "PROCESSING" and "preempted by" in victim_view.reason, victim_view
    assert learner_phase(h, urgent) is Phase.DOWNLOADING, "inputs in, the learner's command not started"
    assert h.service.shared.jobs[urgent].state.held

    assert h.wait_status(TENANT, urgent, TERMINAL).status == "COMPLETED"
    log = h.call(h.service.logs(TENANT, urgent)).read().decode()
    began = next(float(line.split()[1]) for line in log.splitlines() if line.startswith("BEGIN"))
    first = wait_until(
        lambda: v.attempts[0] if (v := h.call(h.service.get(TENANT, victim))).attempts[0].ended_at else None,
        timeout=60,
        message="the victim's first attempt ended",
    )
    assert first.ended_by == "PREEMPTED" and "halt grace" in first.reason, first
    assert first.ended_at is not None and began >= epoch(first.ended_at) - 1.0, "the command ran after the victim"
    h.call(h.service.cancel(TENANT, victim))
    assert leftovers(urgent) == []


def test_a_held_preemptor_cancelled_leaves_nothing_and_the_victim_resumes(
    preempting: Harness, s3_server: Any, scheduler_buckets: Any
) -> None:
    h = preempting
    victim = stubborn_victim(h, s3_server, scheduler_buckets)
    urgent = h.call(h.service.submit(TENANT, manifest(s3_server, STAMPED, cpus=1.5, extra=URGENT_EXTRA))).job_id
    wait_until(lambda: "held until" in sidecar_log(urgent), timeout=60, message="the held sidecar waiting")
    h.call(h.service.cancel(TENANT, urgent))
    assert leftovers(urgent) == []
    resumed = wait_until(
        lambda: v if len((v := h.call(h.service.get(TENANT, victim))).attempts) == 2 else None,
        timeout=120,
        message="the victim resumed in the room it left",
    )
    assert resumed.attempts[0].ended_by == "PREEMPTED"
    h.call(h.service.cancel(TENANT, victim))
    assert leftovers(victim) == []
