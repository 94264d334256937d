"""Size budgets: 5 % over the recorded size fails, naming image, size and budget; recording replaces it."""

from __future__ import annotations

from pathlib import Path

import pytest

from learnerkit_build.builds.sizebudget import BUDGETS_FILE, SizeBudgetError, check_size, load_budgets, record_size

REPO = Path(__file__).resolve().parents[4]


def test_up_to_five_percent_over_passes_and_more_fails(tmp_path: Path) -> None:
    record_size(tmp_path, "mxnet:1.9.1-cpu", 400_000_000)
    check_size(tmp_path, "mxnet:1.9.1-cpu", 420_000_000)
    with pytest.raises(SizeBudgetError, match=r"mxnet:1\.9\.1-cpu is 420\.1 MB, over its budget of 400\.0 MB \+ 5%"):
        check_size(tmp_path, "mxnet:1.9.1-cpu", 420_100_000)
    check_size(tmp_path, "sidecar", 10**12)  # no budget, no check


def test_recording_keeps_the_other_budgets(tmp_path: Path) -> None:
    record_size(tmp_path, "a", 1)
    record_size(tmp_path, "b", 2)
    record_size(tmp_path, "a", 3)
    assert load_budgets(tmp_path) == {"a": 3, "b": 2}


@pytest.mark.parametrize(("text", "message"), [("[1]", "must map image names"), ('{"a": -1}', r"a: the budget must")])
def test_a_malformed_budgets_file_is_refused_naming_it(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / BUDGETS_FILE).write_text(text, encoding="utf-8")
    with pytest.raises(SizeBudgetError, match=rf"{tmp_path / BUDGETS_FILE}: {message}"):
        load_budgets(tmp_path)


def test_the_committed_budgets_cover_the_locked_images() -> None:
    assert {"sidecar", "mxnet:1.9.1-cpu"} <= set(load_budgets(REPO))
