"""A PBT trial's parent: stored with it, shown by `sweep status` (its parent at 80 columns, its lineage in JSON),
and the rung table counts a later bracket's or generation's results at their own rungs."""

from __future__ import annotations

import io

from rich.console import Console

from learnerkit.common.output import to_jsonable
from learnerkit.scheduler.client.sweeptables import rungs_table, trials_table
from learnerkit.scheduler.client.sweepviews import sweep_view
from learnerkit.scheduler.facade import SweepView, TrialView
from learnerkit.scheduler.sweeps.decisions import TrialRecord, TrialState
from learnerkit.scheduler.sweeps.store import StoredTrial


def test_a_trial_s_parent_survives_the_store() -> None:
    record = TrialRecord(5, TrialState.RUNNING, 1, (), "generation 2: trial 1 (2nd) copies trial 0 (1st of 2)")
    trial = StoredTrial(record, "sweep-0a1b2c3d-t0005", {"lr": 0.012}, parent=0)
    assert StoredTrial.from_raw(trial.to_raw()) == trial
    orphan = StoredTrial(record, "sweep-0a1b2c3d-t0005", {"lr": 0.012})
    assert "parent" not in orphan.to_raw() and StoredTrial.from_raw(orphan.to_raw()).parent is None


def view() -> SweepView:
    def trial(index: int, first_rung: int, results: tuple[float, ...], lineage: tuple[int, ...]) -> TrialView:
        job = f"sweep-0a1b2c3d-t{index:04d}"
        return TrialView(index, job, "completed", first_rung + len(results) - 1, 4, results, "generation ended",
                         {"lr": 0.1}, first_rung=first_rung, lineage=lineage)  # fmt: skip

    trials = (trial(0, 1, (0.5,), ()), trial(1, 1, (0.3,), ()), trial(2, 2, (0.2,), (1,)), trial(3, 2, (0.25,), (1,)))
    return SweepView("sweep-0a1b2c3d", "team-a", "done", "", "pbt", "val_loss", "minimize", "step", (2, 4), 4, 2,
                     "2026-11-28T22:00:00+00:00", trials)  # fmt: skip


def rendered(table: object) -> str:
    out = io.StringIO()
    Console(file=out, width=80, color_system=None).print(table)
    return out.getvalue()


def test_status_shows_each_trial_s_parent_and_ranks_results_at_their_rungs() -> None:
    text = rendered(trials_table(view()))
    assert "from" in text
    for index in range(4):
        assert f"sweep-0a1b2c3d-t{index:04d}" in text, text  # never cut at 80 columns
    rows = [line.strip("│ ").split("│") for line in rendered(rungs_table(view())).splitlines() if line.startswith("│")]
    cells = [[cell.strip() for cell in row] for row in rows]
    assert cells == [["1", "2", "2", "0", "0", "0.3"], ["2", "4", "2", "0", "0", "0.2"]], cells


def test_the_lineage_goes_through_json() -> None:
    again = sweep_view(to_jsonable(view()))
    assert [t.lineage for t in again.trials] == [(), (), (1,), (1,)]
    assert [t.first_rung for t in again.trials] == [1, 1, 2, 2]
