"""The decision core of each algorithm behind one interface: `restore_book` picks it from the plan."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from learnerkit.scheduler.sweeps.decisions import Decision, TrialRecord
from learnerkit.scheduler.sweeps.hyperband import HyperbandBook
from learnerkit.scheduler.sweeps.pbt import PbtBook
from learnerkit.scheduler.sweeps.rungbook import Origin, Plan, RungBook
from learnerkit.scheduler.sweeps.spec import AlgorithmName, SweepSpec


class SweepBook(Protocol):
    """What the driver, the simulation and `sweep status` ask of a decision core. Pure: no I/O, no clock."""

    def review(self) -> list[Decision]: ...
    def records(self) -> list[TrialRecord]: ...
    def report(self, index: int, value: float | None, *, why_missing: str = "") -> list[Decision]: ...
    def lost(self, index: int, reason: str) -> list[Decision]: ...
    def fill(self) -> list[Decision]: ...
    def explain(self, index: int) -> str: ...
    def first_rung(self, index: int) -> int: ...
    def origin(self, index: int) -> Origin | None: ...
    @property
    def finished(self) -> bool: ...


def plan_of(spec: SweepSpec) -> Plan:
    """What the decision core needs of a search file."""
    algorithm = spec.algorithm
    return Plan(
        algorithm.name,
        spec.objective,
        spec.rungs,
        spec.trials,
        spec.concurrency,
        eta=algorithm.eta,
        seed=spec.seed,
        population=algorithm.population,
        truncation=algorithm.truncation,
    )


def restore_book(plan: Plan, records: Iterable[TrialRecord] = ()) -> SweepBook:
    """The plan's decision core as the stored records leave it (a new one without records)."""
    if plan.algorithm is AlgorithmName.HYPERBAND:
        return HyperbandBook.restore(plan, records)
    if plan.algorithm is AlgorithmName.PBT:
        return PbtBook.restore(plan, records)
    return RungBook.restore(plan, records)
