"""`job provenance` as a person reads it: one labelled row per fact of a job's factsheet
(`learnerkit.scheduler.provenance.factsheet`). On a terminal a two-column table whose values fold onto more lines
at any width, so a digest is wrapped and never cut; to a pipe or a file, one full line per row (nothing limits
their width there)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

UNSCANNED = "no scan record"
"""The factsheet's scan verdict of an image no `learnerkit image scan` on the scheduler's host recorded."""


def factsheet_rows(sheet: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(label, value) of every fact, in the factsheet's order; every row has its label."""
    image = sheet["image"]
    digest = image.get("digest") or {}
    scan = image["scan"]
    if scan == UNSCANNED:
        scan = f"{UNSCANNED} for this image ID (`learnerkit image scan --image {image['reference']}` records one)"
    purpose = sheet.get("purpose") or {}
    rows = [
        ("status", str(sheet["status"])),
        ("tenant", str(sheet.get("tenant"))),
        ("purpose", f"{purpose.get('name') or '-'}: {purpose.get('description') or '-'}"),
        ("command", str(sheet.get("command"))),
        ("image", str(image["reference"])),
        ("image ID", " ".join(f"{kind}:{value}" for kind, value in sorted(digest.items())) or "not recorded"),
        ("scan", str(scan)),
    ]
    rows += [("result", f"{m['file']} sha256:{m['sha256']}") for m in sheet["model"]]
    rows += [("data", f"{d['object']} sha256:{d['sha256']}") for d in sheet["data"]]
    rows += [("code", f"{c['name']} sha256:{c['sha256'] or 'not reported'}") for c in sheet["code"]]
    for name, metric in sheet["metrics"].items():
        rows.append(("metric", f"{name}: final {metric['final']:g}, best {metric['best']:g}"))
    for attempt in sheet["lineage"]["attempts"]:
        ended = attempt["endedBy"] or "running"
        rows.append(("attempt", f"{attempt['number']}: {ended} {attempt['reason']}".rstrip()))
    for round_ in sheet.get("evaluations", []):
        for evaluation in round_["evaluations"]:
            judged = " (of the tenant's predictions)" if evaluation.get("judges") == "tenant-predictions" else ""
            name = evaluation["name"] + judged
            verdict = f"round {round_['round']}: {name} {evaluation['verdict']} {evaluation['message']}"
            rows.append(("evaluation", verdict.rstrip()))
    return rows


def factsheet_table(sheet: Mapping[str, Any]) -> Table:
    table = Table(
        title=f"job {escape(str(sheet['job']))}: {escape(str(sheet['status']))}",
        title_justify="left",
        show_header=False,
        box=None,
        pad_edge=False,
    )
    table.add_column("fact", no_wrap=True, style="bold")
    table.add_column("value", overflow="fold")
    for label, value in factsheet_rows(sheet):
        table.add_row(escape(label), escape(value))
    return table


def show_factsheet(sheet: Mapping[str, Any], console: Console) -> None:
    """The table on a terminal; full ``label  value`` lines anywhere else."""
    if console.is_terminal:
        console.print(factsheet_table(sheet))
        return
    rows = factsheet_rows(sheet)
    width = max(len(label) for label, _ in rows)
    click.echo(f"job {sheet['job']}: {sheet['status']}")
    for label, value in rows:
        click.echo(f"{label:<{width}}  {value}")
