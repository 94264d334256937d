"""Who may preempt: the scheduler's preemption settings (the tenants file, ``$LEARNERKIT_PREEMPTION_MIN_RUN_S`` and
``$LEARNERKIT_PREEMPTION_MAX_PER_JOB``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

DEFAULT_MIN_RUN_S = 300.0
DEFAULT_MAX_PREEMPTIONS = 3


@dataclass(frozen=True)
class PreemptionRules:
    min_run_s: float = DEFAULT_MIN_RUN_S
    """A job whose learners have run for less than this (in the current attempt) is never preempted: no thrash."""
    max_preemptions: int | None = DEFAULT_MAX_PREEMPTIONS
    """A job preempted this many times is never preempted again until it ends (aging); None: no bound."""
    may_preempt: Mapping[str, bool] = field(default_factory=dict)
    """Per tenant (the tenants file's ``preempt_others``)."""
    default_may_preempt: bool = True

    def allows(self, tenant: str) -> bool:
        """Whether the tenant's queued jobs may preempt others."""
        return self.may_preempt.get(tenant, self.default_may_preempt)
