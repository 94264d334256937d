"""The scheduler's Prometheus metrics, on a registry of its own (served at the API's ``/metrics``).

No label is named ``job``: Prometheus renames it ``exported_job`` on scrape.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

from learnerkit.scheduler.jobs.attempts import AttemptEnd
from learnerkit.scheduler.jobs.state import JobStatus

PREFIX = "learnerkit_scheduler"


class SchedulerMetrics:
    def __init__(self) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry(auto_describe=True)
        self.operator_registry = CollectorRegistry(auto_describe=True)
        """What names tenants (their usage, `core.analytics`): served at ``/metrics`` to an operator's token only."""
        self.queue_depth = Gauge(f"{PREFIX}_queue_depth", "Jobs waiting for admission.", registry=self.registry)
        self.admission_wait = Histogram(
            f"{PREFIX}_admission_wait_seconds",
            "From submit (or requeue) to admission.",
            buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800, 7200),
            registry=self.registry,
        )
        self.jobs = Gauge(f"{PREFIX}_jobs", "Jobs by status.", ["status"], registry=self.registry)
        self.gpus_allocated = Gauge(
            f"{PREFIX}_gpus_allocated", "GPUs reserved by admitted and running jobs.", registry=self.registry
        )
        self.deploy_failures = Counter(
            f"{PREFIX}_deploy_failures", "Deploys the backend refused.", registry=self.registry
        )
        self.preemptions = Counter(
            f"{PREFIX}_preemptions", "Running jobs halted for a job of higher priority.", registry=self.registry
        )
        self.work_lost_seconds = Counter(
            f"{PREFIX}_work_lost_seconds",
            "Training seconds that attempts the scheduler queued again by itself did after the checkpoint the next "
            "attempt restores, by how the attempt ended.",
            ["ended_by"],
            registry=self.registry,
        )
        for end in AttemptEnd:
            if end.requeued:
                self.work_lost_seconds.labels(end.value)
        self.scheduling_pass_seconds = Histogram(
            f"{PREFIX}_scheduling_pass_seconds",
            "One admission pass over the whole queue.",
            buckets=(0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2),
            registry=self.registry,
        )

    def observe_jobs(self, statuses: Iterable[JobStatus], queued: int, gpus: int) -> None:
        counts = Tally(statuses)
        for status in JobStatus:
            self.jobs.labels(status.value).set(counts.get(status, 0))
        self.queue_depth.set(queued)
        self.gpus_allocated.set(gpus)
