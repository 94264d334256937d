"""Size budgets: each image's recorded size, which a build may exceed by 5 % at most.

The budgets are committed in `image-size-budgets.json` (image name to bytes, as the engine reports an image's
size); an image without a budget is not checked. `image build --record-size` (and `sidecar build`) writes the
built size as the new budget, a change a review then sees.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from learnerkit_build.errors import BuildToolError
from learnerkit_build.state import PROJECT_FILE_MODE, write_atomic

BUDGETS_FILE = "image-size-budgets.json"
TOLERANCE = 0.05
MB = 1_000_000


class SizeBudgetError(BuildToolError):
    """A built image is larger than its budget allows, or the budgets file is malformed."""


def load_budgets(root: Path) -> dict[str, int]:
    path = root / BUDGETS_FILE
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, json.JSONDecodeError) as e:
        raise SizeBudgetError(f"{path}: not readable JSON: {e}") from e
    if not isinstance(payload, dict):
        raise SizeBudgetError(f"{path}: must map image names to sizes in bytes")
    for name, size in payload.items():
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            raise SizeBudgetError(f"{path}: {name}: the budget must be a positive number of bytes, not {size!r}")
    return dict(payload)


def check_size(root: Path, name: str, size: int) -> None:
    """Refuse `size` when it is over `name`'s budget by more than TOLERANCE."""
    budget = load_budgets(root).get(name)
    if budget is not None and size > budget * (1 + TOLERANCE):
        raise SizeBudgetError(
            f"{name} is {size / MB:.1f} MB, over its budget of {budget / MB:.1f} MB + {TOLERANCE:.0%} "
            f"({root / BUDGETS_FILE}); shrink it, or record the new size with --record-size"
        )


_RECORDING = threading.Lock()
"""Builds run at once (builds.schedule): one read-modify-write of the budgets file at a time."""


def record_size(root: Path, name: str, size: int) -> None:
    with _RECORDING:
        budgets = {**load_budgets(root), name: size}
        budgets_json = (json.dumps(budgets, indent=1, sort_keys=True) + "\n").encode()
        write_atomic(root / BUDGETS_FILE, budgets_json, PROJECT_FILE_MODE)
