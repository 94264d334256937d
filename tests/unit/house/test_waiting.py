"""The tests' own waits (tests/waiting.py): how often a wait looks."""

from __future__ import annotations

import itertools
import re

import pytest

from tests.waiting import LONGEST_PAUSE_S, pauses, wait_until


def test_a_wait_without_an_interval_looks_soon_then_ever_less_often_down_to_ten_times_a_second() -> None:
    first = list(itertools.islice(pauses(None), 10))
    assert first[:3] == pytest.approx([0.01, 0.015, 0.0225])
    assert all(later >= earlier for earlier, later in itertools.pairwise(first))
    assert first[-1] == LONGEST_PAUSE_S == 0.1
    assert sum(p for p in first if p < LONGEST_PAUSE_S) < 0.25, "a wait reaches its longest pause within 0.25 s"


def test_a_wait_with_an_interval_keeps_it() -> None:
    assert list(itertools.islice(pauses(0.05), 4)) == [0.05] * 4


def test_a_wait_returns_what_its_condition_gave_and_fails_naming_what_it_awaited() -> None:
    answers = iter([None, 0, "here"])
    assert wait_until(lambda: next(answers), timeout=5) == "here"
    with pytest.raises(TimeoutError, match=re.escape("timed out after 0.05s waiting for the sky to fall")):
        wait_until(lambda: False, timeout=0.05, message="the sky to fall")
