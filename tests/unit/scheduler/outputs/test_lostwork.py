"""The work an attempt lost, from its metric history and the step of the checkpoint the next attempt restores."""

from __future__ import annotations

import pytest

from learnerkit.scheduler.outputs.lostwork import LostWork, lost_after, most_lost


def history(*steps: tuple[int, float | None]) -> list[dict[str, object]]:
    return [{"step": step, "values": {"loss": 1.0}, **({"time": t} if t is not None else {})} for step, t in steps]


def test_the_steps_and_seconds_past_the_checkpoint_are_lost() -> None:
    records = history((9, 100.0), (10, 100.1), (11, 100.2), (12, 100.35), (13, 100.5))
    lost = lost_after(records, 10)
    assert lost is not None and lost.steps == 3 and lost.seconds == pytest.approx(0.4)


def test_a_learner_that_checkpointed_at_its_last_step_lost_nothing() -> None:
    assert lost_after(history((1, 1.0), (2, 2.0)), 2) == LostWork(0, 0.0)


def test_without_a_checkpoint_every_step_is_lost_and_the_seconds_from_the_first() -> None:
    """The seconds before the first record are not in the history: at least this much was lost."""
    assert lost_after(history((1, 5.0), (2, 6.0), (3, 7.5)), 0) == LostWork(3, None)
    assert lost_after(history((0, 4.0), (1, 5.0), (3, 7.5)), 0) == LostWork(3, 3.5)


def test_records_without_steps_or_times_tell_what_they_can() -> None:
    assert lost_after([{"values": {"loss": 1.0}}], 10) is None
    assert lost_after(history((10, None), (14, None)), 10) == LostWork(4, None)
    assert lost_after(history((12, 3.0)), 20) == LostWork(0, 0.0), "a checkpoint past the history"


def test_a_gang_lost_the_most_steps_and_seconds_any_of_its_learners_lost() -> None:
    """Side by side: the job is back where it was once the learner that lost most is."""
    assert most_lost([LostWork(3, 0.4), LostWork(5, 0.3), None]) == LostWork(5, 0.4), "a learner without metrics"
    assert most_lost([LostWork(3, 0.4)]) == LostWork(3, 0.4)
    assert most_lost([None, None]) is None


def test_a_gangs_seconds_are_unknown_when_a_learner_that_lost_steps_has_no_times() -> None:
    """The most of the others' might be less than it lost: the bound its end recorded stands."""
    assert most_lost([LostWork(3, 0.4), LostWork(5, None)]) == LostWork(5, None)
    assert most_lost([LostWork(3, 0.4), LostWork(0, None)]) == LostWork(3, 0.4), "it lost nothing"
