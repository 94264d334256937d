"""Progress for people: a live bar per image plus the streamed build log; silent for `--output json`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from learnerkit.common.output import console
from learnerkit_build.builds.buildkit import STEP_RE, LogSink


class BuildProgress:
    """One bar per image; the bar follows BuildKit's `[stage n/total]` step lines."""

    def __init__(self, enabled: bool, show_log: bool = True) -> None:
        self.enabled = enabled
        self.show_log = show_log
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )

    def __enter__(self) -> BuildProgress:
        if self.enabled:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self._progress.stop()

    @contextmanager
    def image(self, name: str) -> Iterator[LogSink]:
        if not self.enabled:
            yield lambda line: None
            return
        task = self._progress.add_task(name, total=None)

        def on_line(line: str) -> None:
            match = STEP_RE.match(line)
            if match and match["stage"] in (None, "learner"):
                self._progress.update(task, completed=int(match["done"]) - 1, total=int(match["total"]))
            if self.show_log:
                self._progress.console.print(f"[dim]{escape(name)} |[/] {escape(line)}", highlight=False)

        try:
            yield on_line
        finally:
            current = self._progress.tasks[task]
            total = current.total or 1
            self._progress.update(task, completed=total, total=total)
