"""A sweep's size is bounded by its trials, never by its grid: a grid of 10^9 points with 3 trials is submitted,
started and restored in a few KiB, and the trials and concurrency above the stated bounds are refused."""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest

from learnerkit.scheduler.core.sweepdriver import SweepDriver, active_sweep
from learnerkit.scheduler.jobs.submission import SubmitOptions
from learnerkit.scheduler.manifest.model import JobManifest
from learnerkit.scheduler.manifest.parser import parse_manifest
from learnerkit.scheduler.sweeps.decisions import Action, TrialRecord, TrialState
from learnerkit.scheduler.sweeps.searchfile import MAX_CONCURRENCY, MAX_TRIALS, SearchFileError, parse_search_file
from learnerkit.scheduler.sweeps.store import StoredSweep, StoredTrial, SweepSpecRecord, SweepState
from tests.unit.scheduler.core.test_sweepdriver import MANIFEST

T = TypeVar("T")
HUGE_GRID = """\
manifest: manifest.yml
parameters:
  seed_offset: {type: integer, min: 0, max: 1000000000}
  width: {type: choice, values: [16, 32]}
objective: {metric: val_loss, goal: minimize}
budget: {unit: step, max: 3}
algorithm: {name: grid}
trials: 3
concurrency: 3
"""
FLAT_BYTES = 4 * 1024 * 1024
"""What building the sweep may allocate at its peak: its 3 trials, the parsers' caches; the grid would take GiBs."""


def peak(work: Callable[[], T]) -> tuple[T, int]:
    tracemalloc.start()
    try:
        result = work()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_grid_of_a_billion_points_with_3_trials_starts_and_restores_in_flat_memory() -> None:
    spec = parse_search_file(HUGE_GRID, Path("search.yml"))
    assert spec.space.grid_size() == 2_000_000_002
    manifest = parse_manifest(MANIFEST)
    record = SweepSpecRecord("sweep-x", "team-a", 0.0, HUGE_GRID, "search.yml", MANIFEST, "manifest.yml")

    def submitted() -> list[Any]:
        sweep = active_sweep(record, spec, manifest, SubmitOptions(), SweepState(), {})
        return [(d, sweep.config(d.trial)) for d in sweep.book.fill()]

    started, used = peak(submitted)
    assert used < FLAT_BYTES, f"starting 3 trials of a 10^9-point grid took {used} bytes at its peak"
    assert [(d.action, d.trial) for d, _ in started] == [(Action.START, 0), (Action.START, 1), (Action.START, 2)]
    # The first parameter varies slowest: the first three points differ in `width`, then in `seed_offset`.
    assert [c for _, c in started] == [
        {"seed_offset": 0, "width": 16},
        {"seed_offset": 0, "width": 32},
        {"seed_offset": 1, "width": 16},
    ]

    async def parse(text: str, source: str, tenant: str, image: str | None) -> JobManifest:
        return parse_manifest(text, source, image=image)

    driver = SweepDriver(cast(Any, None), cast(Any, None), cast(Any, None), cast(Any, None), parse, cast(Any, None))
    stored = {
        d.trial: StoredTrial(TrialRecord(d.trial, TrialState.RUNNING, 0), f"sweep-x-t{d.trial:04d}", config)
        for d, config in started
    }
    restored, used = peak(lambda: asyncio.run(driver._restore(StoredSweep(record, SweepState(decisions=3), stored))))
    assert used < FLAT_BYTES, f"restoring the sweep took {used} bytes at its peak"
    assert sorted(restored.trials) == [0, 1, 2] and restored.book.fill() == []


@pytest.mark.parametrize(
    ("field", "value", "bound"),
    [("trials", MAX_TRIALS + 1, MAX_TRIALS), ("concurrency", MAX_CONCURRENCY + 1, MAX_CONCURRENCY)],
)
def test_trials_and_concurrency_above_their_bounds_are_refused_naming_the_field_and_line(
    field: str, value: int, bound: int
) -> None:
    text = HUGE_GRID.replace("algorithm: {name: grid}", "algorithm: {name: random}")
    text = text.replace(f"{field}: 3", f"{field}: {value}")
    with pytest.raises(SearchFileError) as refused:
        parse_search_file(text, Path("search.yml"))
    [problem] = refused.value.problems
    line = 1 + text.splitlines().index(f"{field}: {value}")
    assert (problem.loc, problem.line) == ((field,), line)
    assert str(bound) in problem.message, problem.message
