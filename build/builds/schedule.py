"""Run a matrix of builds: the longest first, at most `jobs` at a time, their durations kept for the next run.

The images of the matrix depend only on their base (made before the builds start), never on each other, so any
two may build at once. Ordering the longest first keeps the last build to start short: with two at a time, the
matrix then ends close to its total work halved instead of waiting on one long build started last.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TypeVar

from learnerkit.common.errors import ConfigError
from learnerkit_build.state import read_json, state_home, write_json

R = TypeVar("R")
DEFAULT_BUILD_S = 300.0
"""An image never built here is assumed to take this long, about a cold cuda build (242 to 434 s here, caffe's 1,012;
the cpu ones 54 to 176 s, caffe's 360): a new image starts among the long builds, not last."""
DURATIONS_FILE = "build-durations.json"
JOBS_VARIABLE = "LEARNERKIT_BUILD_JOBS"
DEFAULT_JOBS = 2
"""Two at once: on this machine's 2 cores the test tier's cold matrix took 633 s so, its builds' own seconds adding
up to 1,179 s (docs/build-tool.md, "Builds at once"); a locked build mostly waits on one thread or the disk."""


def default_jobs() -> int:
    """`LEARNERKIT_BUILD_JOBS`, else 2."""
    raw = os.environ.get(JOBS_VARIABLE)
    if raw is None:
        return DEFAULT_JOBS
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(f"{JOBS_VARIABLE}={raw!r}: a whole number of builds (1 or more) is expected")
    return int(raw)


def recorded_durations() -> dict[str, float]:
    """Seconds of each image's last real build on this machine (a cached one says nothing of its cost)."""
    data = read_json(state_home() / DURATIONS_FILE)
    if not isinstance(data, dict):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, int | float)}


def record_durations(seconds: Mapping[str, float]) -> None:
    """Keep each image's seconds of its last real build, beside the others'."""
    if seconds:
        merged = {**recorded_durations(), **{name: round(s, 1) for name, s in seconds.items()}}
        write_json(state_home() / DURATIONS_FILE, merged)


def longest_first(names: Sequence[str], durations: Mapping[str, float], default: float = DEFAULT_BUILD_S) -> list[str]:
    """`names` by expected duration, longest first; equal ones keep their order."""
    return sorted(names, key=lambda name: -durations.get(name, default))


def estimate_text(seconds: float) -> str:
    """`45 s`, `3 min 10 s`: how long a build is expected to take."""
    whole = round(seconds)
    return f"{whole} s" if whole < 60 else f"{whole // 60} min {whole % 60} s"


def expected_seconds(
    names: Sequence[str], durations: Mapping[str, float], jobs: int, default: float = DEFAULT_BUILD_S
) -> float:
    """How long building `names` in this order, `jobs` at a time, should take: each image as long as its last
    build here (`default` where it never built), each starting when a slot frees."""
    slots = [0.0] * max(1, jobs)
    for name in names:
        slots.sort()
        slots[0] += durations.get(name, default)
    return max(slots)


def run_at_most(
    tasks: Sequence[tuple[str, Callable[[], R]]],
    jobs: int,
    on_start: Callable[[str], None] = lambda name: None,
    on_interrupt: Callable[[], None] = lambda: None,
) -> dict[str, R]:
    """Run `tasks` in their order with at most `jobs` at a time; return each name's result.

    After the first failure no further task starts; those running finish, then the first failure is raised (their
    results are lost with it, as a serial run would never have started them). One at a time, the tasks run in the
    calling thread. Several at a time, they run in others, which a Ctrl-C does not reach: `on_interrupt` is called
    to stop them, nothing more starts, and the interrupt is raised once they have ended."""
    if jobs < 1:
        raise ValueError(f"--jobs {jobs}: 1 or more builds at a time expected")
    if jobs == 1:
        return _one_after_the_other(tasks, on_start)
    results: dict[str, R] = {}
    failure: BaseException | None = None
    pending = list(tasks)
    running: dict[Future[R], str] = {}
    guard = threading.Lock()

    def started(name: str, task: Callable[[], R]) -> Callable[[], R]:
        def run() -> R:
            with guard:
                on_start(name)
            return task()

        return run

    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="build") as pool:
        try:
            while pending or running:
                while pending and len(running) < jobs and failure is None:
                    name, task = pending.pop(0)
                    running[pool.submit(started(name, task))] = name
                if not running:
                    break
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    name = running.pop(future)
                    error = future.exception()
                    if error is None:
                        results[name] = future.result()
                    elif failure is None:
                        failure = error
        except KeyboardInterrupt:
            on_interrupt()
            raise
    if failure is not None:
        raise failure
    return results


def _one_after_the_other(tasks: Sequence[tuple[str, Callable[[], R]]], on_start: Callable[[str], None]) -> dict[str, R]:
    results: dict[str, R] = {}
    for name, task in tasks:
        on_start(name)
        results[name] = task()
    return results
