"""A name's serving lock on this host: a second `serve` or `stop` of the name says it waits, and gives up in time."""

from __future__ import annotations

import fcntl
import logging
from pathlib import Path

import pytest

from learnerkit.scheduler.backends.modelservers import ServingError
from learnerkit.scheduler.serving import deployment


def test_a_free_name_is_held_at_once_and_let_go_after(tmp_path: Path) -> None:
    with (
        deployment._held(tmp_path, "team-a", "digits", wait_s=0),
        (tmp_path / "team-a" / ".digits.lock").open("a") as other,
        pytest.raises(BlockingIOError),
    ):
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with (tmp_path / "team-a" / ".digits.lock").open("a") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_a_name_held_elsewhere_is_waited_for_with_a_word_then_given_up_naming_the_lock(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "team-a").mkdir()
    path = tmp_path / "team-a" / ".digits.lock"
    with path.open("a") as other:
        fcntl.flock(other, fcntl.LOCK_EX)
        with (
            caplog.at_level(logging.WARNING),
            pytest.raises(ServingError) as raised,
            deployment._held(tmp_path, "team-a", "digits", wait_s=0.3),
        ):
            pytest.fail("entered a name another process holds")
    assert "another `model serve` or `model stop` of it runs on this host: waiting" in caplog.text
    assert str(path) in str(raised.value) and "after 0.3s" in str(raised.value)
    with deployment._held(tmp_path, "team-a", "digits", wait_s=0):
        pass  # the other holder let go: held again at once
