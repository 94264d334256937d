"""How commands talk to people (rich) and to machines (`--output json`)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import asdict, is_dataclass
from enum import Enum, StrEnum
from functools import wraps
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from learnerkit.common.errors import LearnerkitError
from learnerkit.common.yamlfile import YamlError, format_field_path

console = Console(stderr=False, highlight=False)
err_console = Console(stderr=True, highlight=False)

F = TypeVar("F", bound=Callable[..., Any])


class OutputFormat(StrEnum):
    TABLE = "table"
    JSON = "json"


output_option = click.option(
    "--output",
    "-o",
    "output",
    type=click.Choice([f.value for f in OutputFormat]),
    default=OutputFormat.TABLE.value,
    show_default=True,
    help="table for people, json for machines",
)


def to_jsonable(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(asdict(value))
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Enum):
        return value.value
    return value


def emit(output: str, data: Any, show: Callable[[], None]) -> None:
    """Print `data` as JSON for `--output json`, else call `show` to draw it for people."""
    if output == OutputFormat.JSON.value:
        sys.stdout.write(json.dumps(to_jsonable(data), indent=2) + "\n")
    else:
        show()


def fail(output: str, error: LearnerkitError, exit_code: int = 1) -> None:
    """Report an error in the chosen format and exit."""
    if output == OutputFormat.JSON.value:
        sys.stdout.write(json.dumps({"error": type(error).__name__, "message": str(error)}, indent=2) + "\n")
    else:
        err_console.print(f"[bold red]error:[/] {escape(str(error))}", markup=True, highlight=False, soft_wrap=True)
    raise SystemExit(exit_code)


def fail_with_problems(output: str, error: YamlError, document: str) -> NoReturn:
    """Report every problem of a YAML `document` (`manifest`, `sweep`), each with its file, line and field,
    in the chosen format, and exit 1."""
    if output == OutputFormat.JSON.value:
        problems = [
            {"file": str(p.path), "line": p.line, "field": format_field_path(p.loc), "message": p.message}
            for p in error.problems
        ]
        sys.stdout.write(json.dumps({"valid": False, "problems": problems}, indent=2) + "\n")
    else:
        count = len(error.problems)
        err_console.print(f"[bold red]error:[/] {count} problem{'s' if count != 1 else ''} in the {document}")
        for problem in error.problems:
            err_console.print(str(problem), markup=False, highlight=False, soft_wrap=True)
    raise SystemExit(1)


def handles_errors(func: F) -> F:
    """Turn LearnerkitError into a clean message (or JSON) and a non-zero exit, never a traceback."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except LearnerkitError as e:
            fail(kwargs.get("output", "table"), e)

    return wrapper  # type: ignore[return-value]


def keep_whole(table: Table, *headers: str) -> Table:
    """Never shorten what a user copies (ids, references): those columns neither wrap nor end in an ellipsis
    at any terminal width; every other column folds its text onto more lines rather than cutting it."""
    for column in table.columns:
        if column.header in headers:
            column.no_wrap = True
            column.min_width = max([_cell_width(cell) for cell in column.cells] + [_cell_width(column.header)])
        else:
            column.overflow = "fold"
    return table


def _cell_width(cell: object) -> int:
    return Text.from_markup(cell).cell_len if isinstance(cell, str) else 0
