"""Preemption on the Docker backend, end to end: real learner pairs, etcd and S3.

The engine's host is one node of 2 CPUs here; two jobs of 1.5 CPUs never run together, so a queued job of higher
priority can run only by preempting the other."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest

from controller_sidecar.provenancerecord import RECORD_KEY
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.facade import JobView
from learnerkit.scheduler.jobs.layout import outputs_prefix
from learnerkit.scheduler.preemption.rules import PreemptionRules
from tests.integration.scheduler.conftest import TERMINAL, Harness, leftovers, manifest
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(900)]

TENANT = "team-a"
VICTIM = "SMOKE_MIN_STEP_SECONDS=0.1 python /opt/learner/smoke/train.py --steps 120 --checkpoint-every 10"
VICTIM_EXTRA = "learnerkit:\n  priority: -10\n  halt_grace: 120\n"
URGENT_EXTRA = "learnerkit:\n  priority: 0\n"
IGNORES_HALT = """\
import signal, time
import learner
signal.signal(signal.SIGTERM, signal.SIG_IGN)
step = learner.latest_checkpoint().step if learner.latest_checkpoint() else 0
while step < 400:
    step += 1
    learner.log_metrics(step, loss=1.0 / step)
    if step % 10 == 0:
        with learner.new_checkpoint(step) as d:
            (d / "step").write_text(str(step))
    time.sleep(0.1)
"""


@pytest.fixture
def preempting(etcd_server: Any, service_options: SchedulerOptions, scheduler_buckets: Any) -> Iterator[Harness]:
    """A scheduler whose jobs may be preempted one second after they run."""
    made = Harness(etcd_server, replace(service_options, preemption=PreemptionRules(min_run_s=1.0)))
    yield made
    made.kill()


def running_with_metrics(harness: Harness, job_id: str) -> None:
    harness.wait_status(TENANT, job_id, {"PROCESSING"})
    wait_until(
        lambda: harness.call(harness.service.get(TENANT, job_id)).learners[0].metrics,
        timeout=120,
        message="metrics in etcd",
    )


def preempted(harness: Harness, job_id: str) -> JobView:
    def seen() -> JobView | None:
        view = harness.call(harness.service.get(TENANT, job_id))
        return view if "preempted by" in view.reason else None

    return wait_until(
        seen,
        timeout=60,
        message=f"{job_id} to be preempted",
    )


def steps_in_history(harness: Harness, job_id: str) -> list[int]:
    stream = harness.call(harness.service.metrics_history(TENANT, job_id))
    return [json.loads(line)["step"] for line in stream.read().splitlines() if line.strip()]


def split_at_resume(harness: Harness, job_id: str, resumed_at: str) -> tuple[int, int] | None:
    """The first attempt's last step and the step the second resumed after (the record before its first), split
    at the second attempt's deploy; None until the second has a record."""
    stream = harness.call(harness.service.metrics_history(TENANT, job_id))
    records = [json.loads(line) for line in stream.read().splitlines() if line.strip()]
    second = datetime.fromisoformat(resumed_at.replace("Z", "+00:00")).timestamp()
    before = [r["step"] for r in records if r["time"] < second]
    after = [r["step"] for r in records if r["time"] >= second]
    return (max(before), min(after) - 1) if before and after else None


def restored_by_sidecar(harness: Harness, buckets: Any, job_id: str, attempt: int) -> str | None:
    """The checkpoint digest the sidecar of ``attempt`` recorded as restored (its provenance record)."""
    bucket, prefix = outputs_prefix(harness.service.shared.jobs[job_id].manifest, job_id, attempt, 1)
    record = json.loads(buckets.get_object(Bucket=bucket, Key=prefix + RECORD_KEY)["Body"].read())
    restored: str | None = record.get("restored_checkpoint")
    return restored


def test_a_cooperative_learner_is_preempted_and_resumes_without_recomputing_a_step(
    preempting: Harness, s3_server: Any, scheduler_buckets: Any
) -> None:
    h = preempting
    victim = h.call(h.service.submit(TENANT, manifest(s3_server, VICTIM, cpus=1.5, extra=VICTIM_EXTRA)))
    running_with_metrics(h, victim.job_id)
    urgent = h.call(h.service.submit(TENANT, manifest(s3_server, "true", cpus=1.5, extra=URGENT_EXTRA)))
    assert preempted(h, victim.job_id).status != "HALTED"
    assert h.wait_status(TENANT, urgent.job_id, TERMINAL).status == "COMPLETED"
    final = h.wait_status(TENANT, victim.job_id, TERMINAL)
    assert final.status == "COMPLETED", final
    first, second = final.attempts
    assert (first.ended_by, first.reason, first.work_lost_s) == ("PREEMPTED", f"preempted by job {urgent.job_id}", 0.0)
    assert first.steps_lost == 0, "read from its metric history and the checkpoint stored at its halt"
    assert (second.number, second.resumed_from, second.ended_by) == (2, 1, "COMPLETED")
    assert second.checkpoint_digest is not None
    assert second.checkpoint_digest == restored_by_sidecar(h, scheduler_buckets, victim.job_id, 2)
    steps = steps_in_history(h, victim.job_id)
    assert steps == list(range(1, 121)), "each step once over both attempts"
    assert leftovers(victim.job_id) == [] and leftovers(urgent.job_id) == []


def test_a_learner_that_ignores_the_halt_is_stopped_and_its_lost_work_measured(
    preempting: Harness, s3_server: Any, scheduler_buckets: Any
) -> None:
    h = preempting
    scheduler_buckets.put_object(Bucket="sched-data", Key="stubborn/stubborn.py", Body=IGNORES_HALT.encode())
    extra = "learnerkit:\n  priority: -10\n  halt_grace: 2\n  checkpoint_interval: 1\n"
    command = "python $DATA_DIR/stubborn.py"
    victim = h.call(h.service.submit(TENANT, manifest(s3_server, command, data="stubborn", cpus=1.5, extra=extra)))
    running_with_metrics(h, victim.job_id)
    urgent = h.call(h.service.submit(TENANT, manifest(s3_server, "true", cpus=1.5, extra=URGENT_EXTRA)))
    assert h.wait_status(TENANT, urgent.job_id, TERMINAL).status == "COMPLETED"
    h.wait_status(TENANT, victim.job_id, {"PROCESSING"})
    resumed = wait_until(
        lambda: v if (v := h.call(h.service.get(TENANT, victim.job_id))).attempts[0].steps_lost is not None else None,
        timeout=60,
        message="attempt 1's lost steps read back",
    )
    first = resumed.attempts[0]
    assert first.ended_by == "PREEMPTED" and "killed after the 2s halt grace" in first.reason, first
    # Measured from its metric history past the checkpoint attempt 2 restored: at most one checkpoint interval
    # (10 steps of 0.1 s; a step is slower than 0.1 s on a busy machine, so the seconds get its margin).
    assert first.steps_lost is not None and 0 <= first.steps_lost <= 10, first
    assert first.work_lost_s is not None and 0.0 <= first.work_lost_s <= first.steps_lost * 0.5, first
    assert resumed.attempts[1].resumed_from == 1
    last, resumed_at = wait_until(
        lambda: split_at_resume(h, victim.job_id, resumed.attempts[1].started_at),
        timeout=60,
        message="attempt 2's first steps in the history",
    )
    assert first.steps_lost == last - resumed_at, first
    h.call(h.service.cancel(TENANT, victim.job_id))


def test_a_users_halt_during_a_preemption_ends_the_job_halted(preempting: Harness, s3_server: Any) -> None:
    h = preempting
    victim = h.call(h.service.submit(TENANT, manifest(s3_server, VICTIM, cpus=1.5, extra=VICTIM_EXTRA)))
    running_with_metrics(h, victim.job_id)
    urgent = h.call(h.service.submit(TENANT, manifest(s3_server, "sleep 3", cpus=1.5, extra=URGENT_EXTRA)))
    preempted(h, victim.job_id)
    h.call(h.service.halt(TENANT, victim.job_id))
    assert h.wait_status(TENANT, victim.job_id, TERMINAL).status == "HALTED"
    assert h.wait_status(TENANT, urgent.job_id, TERMINAL).status == "COMPLETED"
    after = h.call(h.service.get(TENANT, victim.job_id))
    assert after.status == "HALTED" and len(after.attempts) == 1, after


def test_a_scheduler_killed_mid_preemption_finishes_it_after_restart(
    preempting: Harness, s3_server: Any, etcd_server: Any
) -> None:
    h = preempting
    victim = h.call(h.service.submit(TENANT, manifest(s3_server, VICTIM, cpus=1.5, extra=VICTIM_EXTRA)))
    running_with_metrics(h, victim.job_id)
    urgent = h.call(h.service.submit(TENANT, manifest(s3_server, "true", cpus=1.5, extra=URGENT_EXTRA)))
    preempted(h, victim.job_id)
    h.kill()
    again = Harness(etcd_server, h.options)
    try:
        assert again.wait_status(TENANT, urgent.job_id, TERMINAL).status == "COMPLETED"
        final = again.wait_status(TENANT, victim.job_id, TERMINAL)
        assert final.status == "COMPLETED", final
        assert [a.ended_by for a in final.attempts] == ["PREEMPTED", "COMPLETED"], "resumed exactly once"
        assert steps_in_history(again, victim.job_id) == list(range(1, 121))
        assert leftovers(victim.job_id) == []
    finally:
        again.kill()


def test_three_priorities_and_two_tenants_end_each_job_completed_with_every_step_once(
    preempting: Harness, s3_server: Any
) -> None:
    """Each job preempts the one running before it; the loop ends with every job COMPLETED and no step computed
    twice in any job's metric history."""
    h = preempting
    command = "SMOKE_MIN_STEP_SECONDS=0.1 python /opt/learner/smoke/train.py --steps 40 --checkpoint-every 10"
    jobs = []
    for tenant, priority in (("team-a", -10), ("team-b", -5), ("team-a", 0)):
        extra = f"learnerkit:\n  priority: {priority}\n  halt_grace: 120\n"
        job = h.call(h.service.submit(tenant, manifest(s3_server, command, cpus=1.5, extra=extra)))
        h.wait_status(tenant, job.job_id, {"PROCESSING"})  # the one before it, preempted, waits
        jobs.append((tenant, job.job_id))
    for tenant, job_id in jobs:
        final = h.wait_status(tenant, job_id, TERMINAL)
        assert final.status == "COMPLETED", final
        stream = h.call(h.service.metrics_history(tenant, job_id))
        steps = [json.loads(line)["step"] for line in stream.read().splitlines() if line.strip()]
        assert steps == list(range(1, 41)), (job_id, steps)
    ended_by = [[a.ended_by for a in h.call(h.service.get(t, j)).attempts] for t, j in jobs]
    assert ended_by[0][0] == "PREEMPTED" and ended_by[1][0] == "PREEMPTED" and ended_by[2] == ["COMPLETED"]
