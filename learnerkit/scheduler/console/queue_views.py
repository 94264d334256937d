"""What the Queue page shows of the facade's queue view: the preemption log's sentences."""

from __future__ import annotations

from dataclasses import dataclass

from learnerkit.scheduler.console.views import readable_time
from learnerkit.scheduler.fabric import PreemptionView


@dataclass(frozen=True)
class PreemptionRow:
    at: str
    victim: str
    victim_link: bool
    """The victim is the tenant's own job: its id links to its page."""
    preemptor: str
    preemptor_link: bool
    attempt: int
    lost: str
    """"0 steps (checkpointed at its halt)", "12 steps, 40 s of training", "not measured yet"."""


def lost_words(steps: int | None, seconds: float | None) -> str:
    if steps is None:
        return "not measured yet" if seconds is None else f"{seconds:.0f} s of training (steps not measured)"
    if steps == 0:
        return "0 steps (checkpointed at its halt)"
    said = f"{steps} step" + ("" if steps == 1 else "s")
    return f"{said}, {seconds:.0f} s of training" if seconds else said


def preemption_row(view: PreemptionView) -> PreemptionRow:
    return PreemptionRow(
        at=readable_time(view.at),
        victim=view.victim,
        victim_link=view.victim_own,
        preemptor=view.preemptor,
        preemptor_link=view.preemptor_own,
        attempt=view.attempt,
        lost=lost_words(view.steps_lost, view.work_lost_s),
    )
