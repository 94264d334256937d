"""How jobs look in the terminal (rich), and following one live until it ends."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from learnerkit.common.output import keep_whole, to_jsonable
from learnerkit.scheduler.facade import (
    JUDGES_MODEL,
    MODEL_ACCEPTED,
    MODEL_NOT_EVALUATED,
    MODEL_PENDING,
    MODEL_REJECTED,
    AttemptView,
    EvaluationReports,
    EvaluationView,
    JobView,
    LearnerView,
)

TERMINAL_STATES = frozenset({"COMPLETED", "FAILED", "HALTED", "CANCELLED"})
_STYLES = {
    "COMPLETED": "green",
    "FAILED": "bold red",
    "HALTED": "yellow",
    "CANCELLED": "yellow",
    "QUEUED": "cyan",
    "PREEMPTED": "magenta",
}
_STYLES |= {"passed": "green", "failed": "bold red", "crashed": "bold magenta"}
"""Evaluation outcomes beside the job phases."""


def styled_status(status: str) -> str:
    style = _STYLES.get(status, "bold blue")
    return f"[{style}]{escape(status)}[/]"


def format_metrics(metrics: dict[str, float]) -> str:
    return ", ".join(f"{name}={value:.6g}" for name, value in sorted(metrics.items()))


def jobs_table(jobs: list[JobView], now: datetime | None = None, width: int | None = None) -> Table:
    """One row per job, fitted to what the rows hold: the job id is never shortened (it can be copied at any
    terminal width), a name breaks only between words where ``width`` (the terminal's) leaves room for its
    longest word, and a column no row fills (no job has a reason) is left out rather than taking that room."""
    now = now or datetime.now(UTC)
    rows = [
        {
            "job": escape(job.job_id),
            "name": escape(job.name),
            "status": styled_status(job.status),
            "learners": str(len(job.learners)),
            "gpus": str(job.gpus),
            "age": age(job.submitted_at, now),
            "model": styled_verdict(job.model.partition(" (")[0]) if job.model != MODEL_NOT_EVALUATED else "",
            "reason": escape(job.reason),
        }
        for job in jobs
    ]
    shown = [column for column in JOB_COLUMNS if column not in OPTIONAL_JOB_COLUMNS or any(row[column] for row in rows)]
    # No rules: the borders take eight columns, the width a reason needs at 80.
    table = Table(title="jobs", title_justify="left", box=None, header_style="bold underline")
    for column in shown:
        table.add_column(column)
    for row in rows:
        table.add_row(*(row[column] for column in shown))
    whole = keep_whole(table, "job", "status", "learners", "gpus", "age", "model")
    longest_word = max((len(word) for job in jobs for word in job.name.split()), default=0)
    room = None
    if width is not None:
        kept = sum((column.min_width or 0) + 2 for column in table.columns if column.no_wrap)
        room = width - kept - 2 - (REASON_ROOM + 2 if "reason" in shown else 0)
    name_width = min(longest_word, MAX_NAME_WORD, longest_word if room is None else room)
    whole.words[shown.index("name")] = name_width
    return whole


JOB_COLUMNS = ("job", "name", "status", "learners", "gpus", "age", "model", "reason")
OPTIONAL_JOB_COLUMNS = frozenset({"model", "reason"})
"""Shown only when a row has something in them."""
REASON_ROOM = 12
"""The reason keeps at least this much of the width (it wraps between words) when the name's words would take it."""
MAX_NAME_WORD = 32
"""A name's word up to this long is never broken; a longer one folds (the job id is what a user copies)."""


def metrics_table(job_id: str, learner: int, records: list[dict[str, Any]]) -> Table:
    """A learner's metric history, one row per value: step, time (UTC), metric, value; fits 80 columns."""
    table = Table(title=f"metrics of {escape(job_id)}, learner {learner}", title_justify="left")
    for column in ("step", "time (UTC)", "metric", "value"):
        table.add_column(column, justify="right" if column in ("step", "value") else "left")
    for record in records:
        step = record.get("step")
        moment = record.get("time")
        when = (
            datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%d %H:%M:%S")
            if isinstance(moment, int | float) and not isinstance(moment, bool)
            else ""
        )
        for name, value in sorted(record["values"].items()):
            table.add_row("" if step is None else str(step), when, escape(str(name)), f"{value:.6g}")
    return keep_whole(table, "step", "time (UTC)", "value")


def age(timestamp: str, now: datetime) -> str:
    """How long ago an ISO-8601 time was, in its largest unit (``42s``, ``5m``, ``3h``, ``2d``)."""
    try:
        then = datetime.fromisoformat(timestamp)
    except ValueError:
        return "?"
    seconds = max(0, int((now - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


VERDICT_STYLES = {MODEL_ACCEPTED: "green", MODEL_REJECTED: "bold red", MODEL_PENDING: "yellow"}


def styled_verdict(verdict: str) -> str:
    style = VERDICT_STYLES.get(verdict.partition(" (")[0])
    return f"[{style}]{escape(verdict)}[/]" if style else escape(verdict)


def settled(job: JobView) -> bool:
    """The job ended and, when it COMPLETED, its model has a verdict (its evaluations run after it completes)."""
    return job.status in TERMINAL_STATES and not (job.status == "COMPLETED" and job.model == MODEL_PENDING)


def job_details(job: JobView) -> RenderableType:
    """The job's status, the reason it waits or ended, and one row per learner."""
    summary = Table(title=f"job {escape(job.job_id)}", show_header=False, title_justify="left")
    summary.add_column(style="bold")
    summary.add_column()
    summary.add_row("name", escape(job.name))
    summary.add_row("status", styled_status(job.status))
    summary.add_row("model", styled_verdict(job.model))
    if job.reason:
        summary.add_row("reason", escape(job.reason))
    summary.add_row("priority / gpus", f"{job.priority} / {job.gpus}")
    summary.add_row("submitted", escape(job.submitted_at))
    if job.updated_at:
        summary.add_row("updated", escape(job.updated_at))
    if job.sweep is not None:
        summary.add_row("sweep", f"{escape(job.sweep.sweep_id)}, trial {job.sweep.trial}")
    if job.restarts:
        summary.add_row("restarts", str(job.restarts))
    if job.results:
        summary.add_row("results", escape(job.results))
    keep_whole(summary)
    parts: list[RenderableType] = [summary]
    if job.learners:
        parts.append(_learners_table(job.learners))
    if job.evaluations:
        parts.append(_evaluations_table(job.evaluations))
    if job.attempts:
        parts.append(_attempts_table(job.attempts))
    return parts[0] if len(parts) == 1 else Group(*parts)


def _attempts_table(attempts: tuple[AttemptView, ...]) -> Table:
    """Each attempt: where it ran, the checkpoint it resumed from, how it ended and what it lost (the times are in
    ``--output json``)."""
    table = Table(title="attempts", title_justify="left")
    for column in ("attempt", "nodes", "resumed from", "ended", "why", "lost"):
        table.add_column(column)
    for attempt in attempts:
        resumed = "" if attempt.resumed_from is None else f"attempt {attempt.resumed_from}"
        if attempt.checkpoint_digest:
            resumed += f" ({attempt.checkpoint_digest[:12]})"
        lost = [] if attempt.work_lost_s is None else [f"{attempt.work_lost_s:g}s"]
        lost += [] if attempt.steps_lost is None else [f"{attempt.steps_lost} steps"]
        table.add_row(
            str(attempt.number),
            escape(",".join(attempt.nodes)),
            escape(resumed),
            styled_status(attempt.ended_by) if attempt.ended_by else "running",
            escape(attempt.reason),
            ", ".join(lost),
        )
    return keep_whole(table, "attempt", "nodes")


def _learners_table(learners: tuple[LearnerView, ...]) -> Table:
    table = Table(title="learners", title_justify="left")
    for column in ("learner", "status", "alive", "exit", "message", "metrics"):
        table.add_column(column)
    for learner in learners:
        table.add_row(
            str(learner.learner_id),
            styled_status(learner.status),
            "yes" if learner.alive else "no",
            "" if learner.exit_code is None else str(learner.exit_code),
            escape(learner.message),
            escape(format_metrics(learner.metrics)),
        )
    return keep_whole(table)


def _evaluations_table(evaluations: tuple[EvaluationView, ...], title: str = "evaluations") -> RenderableType:
    """Each evaluation's outcome, then each message on lines of its own (a missed threshold names the metric,
    its value and the threshold; a crash says why there is no verdict)."""
    table = Table(title=title, title_justify="left")
    for column in ("evaluation", "kind", "outcome"):
        table.add_column(column)
    for evaluation in evaluations:
        table.add_row(escape(evaluation.name), evaluation.kind, styled_status(evaluation.outcome))
    keep_whole(table, "evaluation", "kind", "outcome")
    messages = [Text(f"{e.name} judged {e.judges}, not the model") for e in evaluations if e.judges != JUDGES_MODEL]
    messages += [Text(f"{e.name}: {e.message}") for e in evaluations if e.message]
    return Group(table, *messages) if messages else table


def evaluation_reports(reports: EvaluationReports) -> RenderableType:
    """The round's outcomes, then each report's readable summary as the evaluator wrote it."""
    if not reports.evaluations:
        return f"job {escape(reports.job_id)} has no evaluations"
    title = f"evaluations of job {escape(reports.job_id)}, round {reports.round}"
    table = _evaluations_table(tuple(item.evaluation for item in reports.evaluations), title)
    summaries = [Text(item.summary) for item in reports.evaluations if item.summary]
    return Group(table, *summaries)


def watch_job(
    fetch: Callable[[], JobView],
    *,
    interval_s: float,
    as_json: bool,
    console: Console,
    first: JobView | None = None,
    changes: Iterator[dict[str, Any] | None] | None = None,
) -> JobView:
    """Follow the job until it is `settled` and return it, showing each change: a live rich view for people, one
    JSON line per change for machines. With ``changes`` (the job's events from the stream, None for a keep-alive)
    the view is fetched again at each one instead of every ``interval_s``, and in JSON each event is printed as
    one line too."""

    def wait() -> None:
        if changes is None:
            time.sleep(interval_s)
            return
        item = next(changes)
        if as_json and item is not None:
            sys.stdout.write(json.dumps(item, sort_keys=True) + "\n")
            sys.stdout.flush()

    job = first or fetch()
    if as_json:
        last = None
        while True:
            line = json.dumps(to_jsonable(job), sort_keys=True)
            if line != last:
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
                last = line
            if settled(job):
                return job
            wait()
            job = fetch()
    with Live(job_details(job), console=console, refresh_per_second=4) as live:
        while not settled(job):
            wait()
            job = fetch()
            live.update(job_details(job))
    return job
