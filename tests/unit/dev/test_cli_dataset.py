"""`learnerkit dev dataset`: the smoke dataset, written where the demo uploads it from."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from click.testing import CliRunner

from learnerkit.dev.cli_dev import dev_group
from learnerkit_build.imagetest.smokedata import FEATURES


def test_the_smoke_dataset_is_written_and_named_in_json(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    result = CliRunner().invoke(
        dev_group, ["--state-dir", str(tmp_path / "state"), "dataset", str(folder), "-o", "json"]
    )
    assert result.exit_code == 0, result.output
    path = Path(json.loads(result.output)["path"])
    assert path == folder / "train.csv"
    with path.open(encoding="utf-8") as handle:
        header, *rows = list(csv.reader(handle))
    assert header == [*(f"x{i}" for i in range(FEATURES)), "label"]
    assert rows and {row[-1] for row in rows} == {"0", "1"}
