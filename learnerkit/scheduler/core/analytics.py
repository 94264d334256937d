"""Usage analytics (FfDL's analytics page): jobs submitted, CPU-hours and GPU-hours per UTC day, tenant and
framework, from the jobs the scheduler holds and their attempts. The console's Cluster page, its CSV and the
`/metrics` gauges are all computed here, at the same whole minute, so they agree when read in the same minute."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from learnerkit.scheduler.core.metrics import PREFIX
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.fabric import UsageRow, usage_totals

DAY = timedelta(days=1)


def as_of(wall: float) -> datetime:
    """The whole minute the figures are counted up to."""
    return datetime.fromtimestamp(wall - wall % 60, UTC)


def _instant(iso: str) -> datetime:
    moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _per_day(start: datetime, end: datetime) -> Iterator[tuple[str, float]]:
    """The seconds from ``start`` to ``end`` split at UTC midnights: (day, seconds)."""
    while start < end:
        midnight = datetime(start.year, start.month, start.day, tzinfo=UTC) + DAY
        cut = min(end, midnight)
        yield start.date().isoformat(), (cut - start).total_seconds()
        start = cut


@dataclass
class _Sums:
    jobs: int = 0
    cpu_seconds: float = 0.0
    gpu_seconds: float = 0.0


def usage_rows(jobs: Iterable[Tracked], at: datetime) -> list[UsageRow]:
    """Per (day, tenant, framework), oldest day first: jobs submitted that day, and the CPU- and GPU-seconds their
    attempts reserved that day (each attempt from its deploy to its end, or to ``at`` while it runs)."""
    sums: dict[tuple[str, str, str], _Sums] = {}
    for tracked in jobs:
        tenant, framework = tracked.state.tenant, tracked.manifest.framework.name
        submitted = datetime.fromtimestamp(tracked.state.submitted_at, UTC)
        if submitted <= at:
            sums.setdefault((submitted.date().isoformat(), tenant, framework), _Sums()).jobs += 1
        resources = tracked.manifest.resources
        cpus, gpus = resources.cpus * resources.learners, resources.gpus * resources.learners
        for attempt in tracked.attempts:
            start = _instant(attempt.started_at)
            end = min(_instant(attempt.ended_at), at) if attempt.ended_at else at
            for day, seconds in _per_day(start, end):
                row = sums.setdefault((day, tenant, framework), _Sums())
                row.cpu_seconds += cpus * seconds
                row.gpu_seconds += gpus * seconds
    return [
        UsageRow(day, tenant, framework, s.jobs, s.cpu_seconds, s.gpu_seconds)
        for (day, tenant, framework), s in sorted(sums.items())
    ]


class UsageCollector(Collector):
    """`/metrics`' usage gauges, computed at each scrape from ``rows`` (the analytics at this minute)."""

    def __init__(self, rows: Callable[[], list[UsageRow]]) -> None:
        self._rows = rows

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["tenant", "framework"]
        jobs = GaugeMetricFamily(f"{PREFIX}_jobs_submitted", "Jobs submitted, of those held.", labels=labels)
        cpu = GaugeMetricFamily(
            f"{PREFIX}_cpu_seconds", "CPU-seconds reserved by attempts, up to the current minute.", labels=labels
        )
        gpu = GaugeMetricFamily(
            f"{PREFIX}_gpu_seconds", "GPU-seconds reserved by attempts, up to the current minute.", labels=labels
        )
        for (tenant, framework), row in usage_totals(self._rows()).items():
            jobs.add_metric([tenant, framework], row.jobs)
            cpu.add_metric([tenant, framework], row.cpu_seconds)
            gpu.add_metric([tenant, framework], row.gpu_seconds)
        yield from (jobs, cpu, gpu)
