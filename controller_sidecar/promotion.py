"""Promotion in place, the sidecar's part: pass a learner's request for its next budget to the scheduler and its
answer back (docs/sweeps.md, "Promotion in place").

The `learner` helper writes ``control/budget.wait`` at a rung's budget; the sidecar puts it, with its attempt, at
``learners/<n>/boundary`` in etcd (fenced, as its status is), waits for the scheduler's answer at
``next-budget/<attempt>-<step>``, and writes it to ``control/budget.next``, which the helper reads. The helper
bounds the wait; the sidecar answers as long as the learner runs.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from controller_sidecar import keys
from controller_sidecar.atomicfile import write_atomic
from controller_sidecar.clock import event_or_timeout
from controller_sidecar.control import BUDGET_NEXT_FILE, BUDGET_WAIT_FILE
from controller_sidecar.errors import SidecarError
from controller_sidecar.etcdstore import EtcdStore
from controller_sidecar.fence import Fence
from controller_sidecar.jobfiles import read_regular, warn_once
from controller_sidecar.recordchannel import attempt_of
from controller_sidecar.settings import SidecarSettings

LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class Boundary:
    """What the helper wrote: the step it stands at, the budget it reached, each metric's last (step, value)."""

    step: int
    budget: int
    metrics: dict[str, list[float]]


def read_boundary(control: Path) -> Boundary | None:
    """The learner's request, or None while there is none (or it does not read: the helper writes it whole)."""
    path = control / BUDGET_WAIT_FILE
    try:
        raw = json.loads(read_regular(path))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, SidecarError) as e:
        warn_once(path, f"{path} does not read ({e}): no promotion in place", LOGGER)
        return None
    if not isinstance(raw, dict) or not all(isinstance(raw.get(k), int) for k in ("step", "budget")):
        return None
    metrics = raw.get("metrics")
    return Boundary(raw["step"], raw["budget"], metrics if isinstance(metrics, dict) else {})


def answer(control: Path, step: int, budget: int | None, reason: str = "") -> None:
    """``control/budget.next``, written whole."""
    body = {"step": step, "budget": budget, **({"reason": reason} if reason else {})}
    write_atomic(control / BUDGET_NEXT_FILE, (json.dumps(body, sort_keys=True) + "\n").encode())


async def follow_boundaries(settings: SidecarSettings, etcd: EtcdStore, fence: Fence, stop: asyncio.Event) -> None:
    """Until ``stop``: each new request of the learner goes to etcd, and the scheduler's answer back to it."""
    control, attempt = settings.dirs.control, attempt_of(settings.locations.results.prefix)
    answered: int | None = None
    while not stop.is_set():
        boundary = read_boundary(control)
        if boundary is not None and boundary.step != answered:
            answered = boundary.step
            if attempt is None:
                answer(control, boundary.step, None, "not run by a scheduler")
            else:
                asking = asyncio.create_task(_ask(settings, etcd, fence, attempt, boundary))
                stopping = asyncio.create_task(stop.wait())
                await asyncio.wait({asking, stopping}, return_when=asyncio.FIRST_COMPLETED)
                stopping.cancel()
                if not asking.done():
                    asking.cancel()
                await asyncio.gather(asking, return_exceptions=True)
        await event_or_timeout(stop, settings.timing.poll_interval_s)


async def _ask(settings: SidecarSettings, etcd: EtcdStore, fence: Fence, attempt: int, boundary: Boundary) -> None:
    job_id, root, control = settings.job_id, settings.etcd.root, settings.dirs.control
    record = {"attempt": attempt, "step": boundary.step, "budget": boundary.budget, "metrics": boundary.metrics}
    try:
        await etcd.put_boundary(job_id, settings.learner_id, record, root, fence)
        raw = await etcd.wait_for_key(keys.next_budget_key(job_id, attempt, boundary.step, root))
    except SidecarError as e:
        LOGGER.warning("promotion in place at step %d: %s; the learner ends its rung", boundary.step, e)
        answer(control, boundary.step, None, str(e))
        return
    try:
        found = json.loads(raw)
        budget = found.get("budget")
        reason = str(found.get("reason", ""))
    except (ValueError, AttributeError):
        budget, reason = None, f"unreadable answer {raw!r}"
    budget = budget if isinstance(budget, int) and not isinstance(budget, bool) else None
    LOGGER.info("rung boundary at step %d: %s", boundary.step, f"next budget {budget}" if budget else reason)
    answer(control, boundary.step, budget, reason)
