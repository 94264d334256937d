"""How commands talk to people (rich) and to machines (`--output json`)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import asdict, is_dataclass
from enum import Enum, StrEnum
from functools import wraps
from pathlib import Path
from typing import Any, NoReturn, TypeVar, cast

import click
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
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


def keep_whole(table: Table, *headers: str) -> WholeTable:
    """Never shorten what a user copies (ids, references): those columns neither wrap nor end in an ellipsis
    at any terminal width. Every other column wraps between words and, where the terminal has the room, keeps its
    longest word (up to `FOLDED_WORD` cells; a longer one folds) whole, so a header or a status is not broken into
    letters; where it has not, the kept columns win and the words fold. The tests render each table at 80."""
    words: dict[int, int] = {}
    for index, column in enumerate(table.columns):
        if column.header in headers:
            column.no_wrap = True
            column.min_width = max([_cell_width(cell) for cell in column.cells] + [_cell_width(column.header)])
        else:
            column.overflow = "fold"
            longest = max([_word_width(cell) for cell in column.cells] + [_word_width(column.header)])
            words[index] = min(longest, FOLDED_WORD)
    table.__class__ = WholeTable  # the same table, laid out by WholeTable at each rendering
    whole = cast(WholeTable, table)
    whole.words = words
    return whole


FOLDED_WORD = 20
"""A word (a header's, a status, a number) up to this many cells is kept whole; a longer one (a path in free
text) folds onto more lines rather than widening its column past the terminal."""


class WholeTable(Table):
    """A `keep_whole` table: at each rendering, its columns' words are kept whole when they fit beside the kept
    columns in the width given."""

    words: dict[int, int]
    """The longest word of each column not kept whole, by index: its least width where the room allows."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        _, right, _, left = self.padding
        gaps = (left + right) * len(self.columns) - (0 if self.pad_edge else left + right)
        gaps += (len(self.columns) - 1 + (2 if self.show_edge else 0)) if self.box else 0
        needed = gaps + sum(self.words.get(i, c.min_width or 0) for i, c in enumerate(self.columns))
        for index, word in self.words.items():
            self.columns[index].min_width = word if needed <= options.max_width and word else None
        yield from super().__rich_console__(console, options)


def _cell_width(cell: object) -> int:
    """The widest line of a cell (a cell of several lines is as wide as its widest)."""
    if not isinstance(cell, str):
        return 0
    return max((cell_len(line) for line in Text.from_markup(cell).plain.split("\n")), default=0)


def _word_width(cell: object) -> int:
    if not isinstance(cell, str):
        return 0
    return max((cell_len(word) for word in Text.from_markup(cell).plain.split()), default=0)
