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

from learnerkit.scheduler.provenance.factsheetrows import factsheet_rows


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
