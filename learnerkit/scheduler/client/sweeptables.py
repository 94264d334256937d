"""Sweeps for people: the list, the rung table and the trials with their reasons; ids never cut at 80 columns."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from learnerkit.common.output import keep_whole
from learnerkit.scheduler.facade import SweepView, TrialView


def sweeps_table(sweeps: list[SweepView]) -> Table:
    table = Table(title="sweeps", title_justify="left")
    for column in ("sweep", "status", "algorithm", "objective", "trials", "reason"):
        table.add_column(column)
    for sweep in sweeps:
        table.add_row(
            escape(sweep.sweep_id),
            escape(sweep.status),
            escape(sweep.algorithm),
            escape(f"{sweep.goal} {sweep.metric}"),
            f"{len(sweep.trials)}/{sweep.trials_total}",
            escape(sweep.reason),
        )
    return keep_whole(table, "sweep", "status", "trials")


def rungs_table(sweep: SweepView) -> Table:
    """Per rung: its budget, how many trials reached it, trained towards it now, wait paused on it."""
    table = Table(title=f"rungs of {escape(sweep.sweep_id)} ({sweep.unit}s)", title_justify="left")
    for column in ("rung", "budget", "reported", "training", "paused", "best"):
        table.add_column(column, justify="right")
    sign = 1.0 if sweep.goal == "minimize" else -1.0
    for rung, budget in enumerate(sweep.rungs):
        values = [
            t.results[rung + 1 - t.first_rung] for t in sweep.trials if 0 <= rung + 1 - t.first_rung < len(t.results)
        ]
        training = sum(1 for t in sweep.trials if t.state == "running" and t.rung == rung + 1)
        paused = sum(1 for t in sweep.trials if t.state == "paused" and t.rung == rung + 1)
        best = f"{min(values, key=lambda v: sign * v):.6g}" if values else ""
        table.add_row(str(rung + 1), str(budget), str(len(values)), str(training), str(paused), best)
    return table


def trials_table(sweep: SweepView) -> Table:
    table = Table(title=f"trials of {escape(sweep.sweep_id)}", title_justify="left")
    lineages = any(trial.lineage for trial in sweep.trials)
    columns = ("trial", "job", "state", "rung", *(("from",) if lineages else ()), sweep.metric, "why")
    for column in columns:
        table.add_column(column)
    for trial in sweep.trials:
        parents = (str(trial.lineage[0]) if trial.lineage else "",) if lineages else ()  # the parent; JSON: all
        table.add_row(
            str(trial.index),
            escape(trial.job_id),
            escape(trial.state),
            str(trial.rung),
            *parents,
            f"{trial.results[-1]:.6g}" if trial.results else "",
            escape(trial.reason),
        )
    return keep_whole(table, "trial", "job", "state", "rung")


def parameters_text(trial: TrialView) -> str:
    return ", ".join(f"{name}={_format(value)}" for name, value in sorted(trial.parameters.items()))


def _format(value: object) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)
