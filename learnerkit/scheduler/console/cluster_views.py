"""What the Cluster page shows of the facade's cluster view: totals per tenant and framework, per day, and the
analytics as CSV (the page's rows, one a line, with the seconds `/metrics` exports)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable

from learnerkit.scheduler.fabric import ClusterView, UsageRow, usage_totals

CSV_COLUMNS = ("day", "tenant", "framework", "jobs", "cpu_hours", "gpu_hours", "cpu_seconds", "gpu_seconds")


def tenant_framework_totals(rows: Iterable[UsageRow]) -> list[UsageRow]:
    """Summed over the days, by tenant and framework: `/metrics`' figures (`fabric.usage_totals`)."""
    summed = usage_totals(rows)
    return [summed[key] for key in sorted(summed)]


def days(rows: Iterable[UsageRow]) -> list[tuple[str, int, float, float]]:
    """(day, jobs, CPU-seconds, GPU-seconds) over every tenant, newest day first."""
    per: dict[str, list[float]] = {}
    for row in rows:
        sums = per.setdefault(row.day, [0, 0.0, 0.0])
        sums[0] += row.jobs
        sums[1] += row.cpu_seconds
        sums[2] += row.gpu_seconds
    return [(day, int(s[0]), s[1], s[2]) for day, s in sorted(per.items(), reverse=True)]


def hours(seconds: float) -> str:
    return f"{seconds / 3600:,.2f}"


def quota(value: float | int | None, unit: str = "") -> str:
    if value is None:
        return "unlimited"
    return f"{value:g}{unit}" if isinstance(value, float) else f"{value}{unit}"


def analytics_csv(view: ClusterView) -> str:
    """One line per day, tenant and framework; seconds written exactly (``repr``), so sums match `/metrics`."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in view.usage:
        writer.writerow(
            (
                row.day,
                row.tenant,
                row.framework,
                row.jobs,
                f"{row.cpu_seconds / 3600:.4f}",
                f"{row.gpu_seconds / 3600:.4f}",
                repr(row.cpu_seconds),
                repr(row.gpu_seconds),
            )
        )
    return out.getvalue()
