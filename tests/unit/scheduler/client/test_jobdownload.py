"""Where `job download` writes a listed file: under the destination, never past it."""

from __future__ import annotations

from pathlib import Path

import pytest

from learnerkit.scheduler.client.download import destination
from learnerkit.scheduler.errors import SchedulerError


def test_a_listed_path_lands_below_the_destination(tmp_path: Path) -> None:
    path = "attempt-1/learner-1/results/model.pt"
    assert destination(tmp_path, path) == tmp_path / "attempt-1" / "learner-1" / "results" / "model.pt"


@pytest.mark.parametrize("path", ["", "/etc/passwd", "../outside", "a/../../b", "a//b", "./a", "a\\b"])
def test_an_unsafe_listed_path_is_refused_naming_it(tmp_path: Path, path: str) -> None:
    with pytest.raises(SchedulerError, match="the scheduler's listing"):
        destination(tmp_path, path)


def test_a_path_through_a_link_below_the_destination_is_refused(tmp_path: Path) -> None:
    (tmp_path / "attempt-1").symlink_to(tmp_path.parent)
    with pytest.raises(SchedulerError, match="symlink"):
        destination(tmp_path, "attempt-1/learner-1/results/x")
