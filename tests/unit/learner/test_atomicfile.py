"""Files the learner side writes for other users: whole or not at all, readable by the sidecar's user."""

from __future__ import annotations

from pathlib import Path

import pytest

from learner.atomicfile import replacing, write_text


def test_a_written_file_is_whole_and_readable_by_other_users(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    write_text(target, "{}\n")
    assert target.read_text() == "{}\n"
    assert target.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "model.pt"
    target.write_text("old")
    with pytest.raises(KeyboardInterrupt), replacing(target, suffix=".pt") as temp:
        temp.write_text("half")
        raise KeyboardInterrupt  # the halt's SIGINT, as Python raises it
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt"]
