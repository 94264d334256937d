"""Progress for people: a live bar per image plus the streamed build log, and one line for the downloads that fill
the lock cache (bytes, files, rate, time left); silent for `--output json`. Each image's log also goes to a file of
its own, whole and in order however many builds run at once."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from learnerkit.common.output import console
from learnerkit_build.builds.buildkit import STEP_RE, LogSink
from learnerkit_build.builds.schedule import estimate_text
from learnerkit_build.state import state_home

LOGS_DIR = "build-logs"


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
    def image(self, name: str, expected_s: float | None = None) -> Iterator[LogSink]:
        """A bar for `name`; `expected_s`, its last build's seconds here, is shown beside it as the estimate."""
        if not self.enabled:
            yield lambda line: None
            return
        estimate = f" [dim](about {estimate_text(expected_s)})[/]" if expected_s is not None else ""
        task = self._progress.add_task(escape(name) + estimate, total=None)

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


def build_log_path(name: str) -> Path:
    """`<state home>/build-logs/<name>.log`, the image name made a file name (`pytorch_2.13-cpu.log`)."""
    return state_home() / LOGS_DIR / f"{re.sub(r'[^A-Za-z0-9.-]', '_', name)}.log"


@contextmanager
def build_log(name: str) -> Iterator[LogSink]:
    """A sink writing the image's log (this build's only) to its file, line by line."""
    path = build_log_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:

        def write(line: str) -> None:
            handle.write(line + "\n")
            handle.flush()

        yield write


class FetchProgress:
    """One line for the lock cache's downloads: bytes of the announced total, files, rate and time left."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._files = (0, 0)
        self._guard = threading.Lock()
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self._task = self._progress.add_task("lock cache", total=None, visible=enabled)

    def __enter__(self) -> FetchProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress.live.is_started:
            self._progress.stop()

    def planned(self, size: int, files: int) -> None:
        """Shown from here on, where there is anything to fetch (a build with all files cached says nothing)."""
        self._files = (0, files)
        self._progress.update(self._task, total=size or None, description=self._describe())
        if self.enabled and files:
            self._progress.start()

    def advanced(self, size: int, files: int) -> None:
        with self._guard:
            self._files = (self._files[0] + files, self._files[1])
            self._progress.update(self._task, advance=size, description=self._describe())

    def _describe(self) -> str:
        done, total = self._files
        return f"lock cache: {done}/{total} files"
