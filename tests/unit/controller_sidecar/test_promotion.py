"""The sidecar's part of promotion in place on the control files: the helper's request read, the answer written."""

from __future__ import annotations

import json
from pathlib import Path

from controller_sidecar.promotion import Boundary, answer, read_boundary


def test_a_request_reads_and_an_answer_is_written_whole(tmp_path: Path) -> None:
    assert read_boundary(tmp_path) is None
    request = {"step": 4, "budget": 4, "metrics": {"val_loss": [4, 0.5]}}
    (tmp_path / "budget.wait").write_text(json.dumps(request))
    assert read_boundary(tmp_path) == Boundary(4, 4, {"val_loss": [4, 0.5]})
    answer(tmp_path, 4, 16)
    assert json.loads((tmp_path / "budget.next").read_text()) == {"step": 4, "budget": 16}
    answer(tmp_path, 4, None, "not promoted at once")
    assert json.loads((tmp_path / "budget.next").read_text()) == {
        "step": 4,
        "budget": None,
        "reason": "not promoted at once",
    }


def test_a_request_that_does_not_read_is_none(tmp_path: Path) -> None:
    (tmp_path / "budget.wait").write_text('{"step": "4"}')
    assert read_boundary(tmp_path) is None
    (tmp_path / "budget.wait").write_text("{")
    assert read_boundary(tmp_path) is None
