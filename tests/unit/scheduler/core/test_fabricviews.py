"""The Queue and Cluster views' data over a real preemption driven through the control loop (the preemption
tests' harness: a fake clock, an in-memory store, GPU nodes), and the usage analytics that `/metrics` exports."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from prometheus_client import generate_latest

from controller_sidecar.status import Phase
from learnerkit.scheduler.admission.admit import AdmissionState
from learnerkit.scheduler.admission.capacity import GIB, Node
from learnerkit.scheduler.core.analytics import as_of, usage_rows
from learnerkit.scheduler.core.fabricviews import queue_view
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.fabric import PreemptionView, usage_totals
from learnerkit.scheduler.jobs.attempts import Attempt, AttemptEnd, load_attempts
from learnerkit.scheduler.jobs.state import JobState
from learnerkit.scheduler.manifest.parser import parse_manifest
from tests.unit.scheduler.core.test_preemption import Harness, manifest


@pytest.mark.asyncio
async def test_a_preemption_is_in_both_tenants_logs_naming_only_their_own_jobs() -> None:
    h = Harness(nodes=1)
    low = h.submit("job-low", 0, tenant="team-b")
    await h.running(low)
    h.submit("job-urgent", 10, tenant="team-a")
    h.submit("job-later", 5, tenant="team-b")
    await h.step()
    h.report(low, Phase.HALTED)
    await h.step()
    first = (await load_attempts(h.store, "job-low"))[0]
    assert (first.ended_by, first.preempted_by) == (AttemptEnd.PREEMPTED, "job-urgent")

    scheduler = h.scheduler
    mine = await scheduler.queue("team-b")
    assert mine.preemptions == (
        PreemptionView(
            at=first.ended_at or "",
            victim="job-low",
            victim_own=True,
            preemptor="a job of priority 10 of another tenant",
            preemptor_own=False,
            attempt=1,
            steps_lost=None,
            work_lost_s=first.work_lost_s,
        ),
    )
    theirs = await scheduler.queue("team-a")
    assert [(p.victim, p.preemptor, p.preemptor_own) for p in theirs.preemptions] == [
        ("a job of priority 0 of another tenant", "job-urgent", True)
    ]
    # job-urgent runs now; team-b's two jobs wait, the later one of higher priority first.
    assert [(j.job_id, j.place_in_tenant, j.place_in_queue, j.others_ahead) for j in mine.jobs] == [
        ("job-later", 1, 1, 0),
        ("job-low", 2, 2, 0),
    ]
    assert mine.jobs[1].status == "PREEMPTED"
    assert mine.jobs[0].kind == "node fit" and mine.jobs[0].frees == "8 GPUs of any type more free on one node"
    assert mine.jobs[1].kind == "priority"
    assert theirs.jobs == () and theirs.queued_in_all == 2
    assert "job-low" not in repr(theirs) and "job-later" not in repr(theirs), "another tenant's jobs are never named"

    cluster = await scheduler.cluster()
    (node,) = cluster.nodes
    assert (node.name, node.gpus, node.gpus_used, node.drained) == ("n1", 8, 8, False)
    assert node.jobs == ("job-urgent",), "who holds the room, as `scheduler nodes` names it"
    use = {t.tenant: (t.gpus, t.jobs, t.queued) for t in cluster.tenants}
    assert use == {"team-a": (8, 1, 0), "team-b": (0, 0, 2)}


def tracked(job_id: str, tenant: str, submitted: str, *attempts: Attempt) -> Tracked:
    text = manifest(0).replace("gpus: 8", "gpus: 2").replace("learners: 1", "learners: 2")
    state = JobState(job_id, tenant, "j", datetime.fromisoformat(submitted).timestamp())
    job = Tracked(state, parse_manifest(text), text, "m.yml")
    job.attempts = list(attempts)
    return job


def test_usage_is_split_at_midnight_and_a_running_attempt_counted_to_the_minute() -> None:
    at = as_of(datetime(2026, 11, 29, 1, 30, 42, tzinfo=UTC).timestamp())
    assert at == datetime(2026, 11, 29, 1, 30, tzinfo=UTC)
    ended = Attempt(1, ("n1",), "2026-11-28T23:00:00Z").ended(AttemptEnd.PREEMPTED, "", "2026-11-29T00:30:00Z")
    running = Attempt(2, ("n1",), "2026-11-29T01:00:00Z")
    jobs = [
        tracked("job-1", "team-a", "2026-11-28T22:00:00+00:00", ended, running),
        tracked("job-2", "team-b", "2026-11-29T01:00:00+00:00"),
    ]
    rows = [(r.day, r.tenant, r.framework, r.jobs, r.cpu_seconds, r.gpu_seconds) for r in usage_rows(jobs, at)]
    # 2 learners of 1 CPU and 2 GPUs each: 2 CPUs and 4 GPUs per second of an attempt.
    assert rows == [
        ("2026-11-28", "team-a", "custom", 1, 2 * 3600.0, 4 * 3600.0),
        ("2026-11-29", "team-a", "custom", 0, 2 * 3600.0, 4 * 3600.0),
        ("2026-11-29", "team-b", "custom", 1, 0.0, 0.0),
    ]
    summed = usage_totals(usage_rows(jobs, at))
    assert (summed[("team-a", "custom")].cpu_seconds, summed[("team-a", "custom")].jobs) == (4 * 3600.0, 1)


@pytest.mark.asyncio
async def test_metrics_export_the_analytics_totals() -> None:
    h = Harness()
    job = h.submit("job-a", 0)
    job.attempts = [Attempt(1, ("n1",), "2025-12-31T23:00:00Z").ended(AttemptEnd.COMPLETED, "", "2026-01-01T00:00:00Z")]
    h.clock.now += 60  # the figures count up to the whole minute: the job was submitted a second past it
    metrics = h.scheduler.shared.metrics
    assert b"cpu_seconds" not in generate_latest(metrics.registry), "tenants' usage is an operator's to read"
    text = generate_latest(metrics.operator_registry).decode()
    labels = '{framework="custom",tenant="team-a"}'
    assert f"learnerkit_scheduler_cpu_seconds{labels} 3600.0" in text
    assert f"learnerkit_scheduler_gpu_seconds{labels} 28800.0" in text
    assert f"learnerkit_scheduler_jobs_submitted{labels} 1.0" in text


def test_a_job_moved_off_a_drained_node_waits_on_the_drain() -> None:
    moved = tracked("job-moved", "team-a", "2026-11-29T00:00:00+00:00")
    moved.attempts = [
        Attempt(1, ("n1",), "2026-11-29T00:00:00Z").ended(AttemptEnd.DRAINED, "node n1 drained", "2026-11-29T00:10:00Z")
    ]
    state = AdmissionState([Node("n1", 16.0, 64 * GIB, 8, "nvidia-a100")], closed=("n1",))
    state.requeue(moved.admission_job())
    state.schedule(now=0.0)
    (job,) = queue_view(state, {"job-moved": moved}, "team-a").jobs
    assert (job.kind, job.place_in_queue, job.others_ahead) == ("drain", 1, 0)
    assert job.frees == "each learner's share of the 4 GPUs of any type free on one open node"
