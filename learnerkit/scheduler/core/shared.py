"""What the scheduler's verbs and its control loop share, in one object."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from controller_sidecar.clock import Clock
from learnerkit.scheduler.admission.admit import AdmissionState
from learnerkit.scheduler.backends.protocol import Backend
from learnerkit.scheduler.core.metrics import SchedulerMetrics
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.evaluations.runner import EvaluationRunner
from learnerkit.scheduler.jobs.store import JobStore
from learnerkit.scheduler.nodes.marks import NodeMarks


@dataclass
class Shared:
    store: JobStore
    backend: Backend
    options: SchedulerOptions
    clock: Clock
    admission: AdmissionState
    """The queue and the reservations; replaced whole by a rebuild."""
    evaluations: EvaluationRunner
    """The evaluations of completed jobs (``evaluations/``), stepped by the control loop."""
    metrics: SchedulerMetrics = field(default_factory=SchedulerMetrics)
    jobs: dict[str, Tracked] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Guards the jobs' states and the admission state; taken inside a job's backend lock, never around it."""
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    """Set by a verb that changed what the loop acts on: its next step starts without waiting out the interval."""
    marks: NodeMarks = field(init=False)
    """The drained nodes and the known ones, beside the store's jobs."""

    def __post_init__(self) -> None:
        self.marks = NodeMarks(self.store)
