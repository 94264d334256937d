"""Promotion in place: a sweep trial at its rung's budget asks for the next one and waits a bounded time.

``next_budget(step)`` writes ``$JOB_STATE_DIR/budget.wait`` (the step, the budget, each metric's last value);
the sidecar passes it to the scheduler, which decides at once whether the trial goes on (ASHA promotes the top
1/eta of a rung as soon as its result is in) and answers through etcd; the sidecar writes the answer to
``budget.next``. Promoted, the same process trains on towards the new budget (``budget()`` returns it from now
on, and the halt ``log_metrics`` raised at the budget is taken back); otherwise, or when no answer comes within
the wait, the script checkpoints and exits 0 as before, and a later promotion resumes it from that checkpoint.
docs/learner-contract.md, "Promotion in place".
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from pathlib import Path

from learner.atomicfile import write_text
from learner.budget import BUDGET_ENV, Budget, budget
from learner.halt import resume_after_budget, signals_taken
from learner.metrics import last_values
from learner.paths import BUDGET_NEXT_FILE, BUDGET_WAIT_FILE, HALT_FILE, state_dir

WAIT_ENV = "LEARNER_PROMOTION_WAIT"
DEFAULT_WAIT_S = 30.0
"""How long ``next_budget`` waits for the scheduler's answer unless told otherwise."""
POLL_S = 0.02


def promotion_wait(wait_s: float | None = None) -> float:
    """``wait_s``, else ``$LEARNER_PROMOTION_WAIT``, else 30 s. Raises ``ValueError`` naming what is bad."""
    if wait_s is not None:
        if not math.isfinite(wait_s) or wait_s < 0:
            raise ValueError(f"wait_s must be a non-negative number of seconds, got {wait_s!r}")
        return float(wait_s)
    raw = os.environ.get(WAIT_ENV, "").strip()
    if not raw:
        return DEFAULT_WAIT_S
    try:
        found = float(raw)
    except ValueError:
        found = math.nan
    if not math.isfinite(found) or found < 0:
        raise ValueError(f"{WAIT_ENV} must be a non-negative number of seconds, got {raw!r}")
    return found


def next_budget(step: int, *, wait_s: float | None = None) -> Budget | None:
    """The next rung's budget when the scheduler promotes this trial in place at ``step``; None when it does not
    (within ``wait_s``; default ``$LEARNER_PROMOTION_WAIT`` or 30 s), outside a sweep, or once a halt came:
    then checkpoint and exit 0 as at any rung's end.

    Call it once the current budget is reached (``budget().reached(step)``) and the step's metrics are logged:
    the scheduler ranks the trial on the objective's last value logged by this process. Raises ``ValueError``
    before the budget is reached.
    """
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a non-negative int, got {step!r}")
    current = budget()
    if current is None:
        return None
    if not current.reached(step):
        raise ValueError(f"next_budget({step}): this rung's budget ({current.limit} {current.unit}s) is not reached")
    wait = promotion_wait(wait_s)
    folder = state_dir()
    if wait == 0 or not folder.is_dir() or (folder / HALT_FILE).exists():
        return None
    signals = signals_taken()
    metrics = {key: [at, value] for key, (at, value) in last_values().items()}
    request = {"step": step, "budget": current.limit, "metrics": metrics}
    (folder / BUDGET_NEXT_FILE).unlink(missing_ok=True)
    write_text(folder / BUDGET_WAIT_FILE, json.dumps(request, sort_keys=True) + "\n")
    deadline = time.monotonic() + wait
    try:
        answer = None
        while answer is None:
            if (folder / HALT_FILE).exists() or signals_taken() > signals or time.monotonic() >= deadline:
                return None
            answer = _answer(folder / BUDGET_NEXT_FILE, step)
            if answer is None:
                time.sleep(POLL_S)
    finally:
        for name in (BUDGET_WAIT_FILE, BUDGET_NEXT_FILE):
            with contextlib.suppress(OSError):
                (folder / name).unlink(missing_ok=True)
    if answer <= current.limit or (folder / HALT_FILE).exists() or signals_taken() > signals:
        return None
    os.environ[BUDGET_ENV] = str(answer)  # budget() and the halt at the budget follow it, here and in children
    resume_after_budget()
    return Budget(answer, current.unit)


def _answer(path: Path, step: int) -> int | None:
    """The new budget in ``budget.next`` for ``step``; 0 when the answer is no; None while there is none."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return 0  # the sidecar writes it whole (renamed into place): anything else is no promotion
    if not isinstance(raw, dict) or raw.get("step") != step:
        return None
    found = raw.get("budget")
    return found if isinstance(found, int) and not isinstance(found, bool) else 0
