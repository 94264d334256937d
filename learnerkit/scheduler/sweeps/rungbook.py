"""The pure decision core: given the trials' rung results, which trials start, pause, get promoted or stop.

`RungBook` holds the sweep's trials and, per rung, their results in rank order. It does no I/O and reads
no clock; the driver feeds it results (`report`), asks it to fill free slots (`fill`), and stores each
decision before acting on it. Built again from the stored records (`RungBook.restore`), it takes the same
decisions: every choice depends on the records alone, ties broken by trial index.

Promotion-based ASHA (Li et al., "A System for Massively Parallel Hyperparameter Tuning", MLSys 2020,
Algorithm 2): when a slot is free, promote the best paused trial of the highest rung that is in its rung's
top ``floor(n/eta)``; if none, start a new trial at rung 0. A trial that finishes a rung is paused on its
checkpoint, not judged once: a good trial that arrives behind better-looking ones is promoted later, when
its rung has grown. A paused trial is stopped (and its checkpoint can go) once it can never be in the top
``floor(n_max/eta)``, `n_max` counting every trial that may still reach the rung.

``stop_only=True`` is the rule production systems use (a trial continues only if it ranks in the top
``max(floor(n/eta), 1)`` of its rung *when it reports*, else it is stopped); the benchmark runs it beside
ASHA. The median rule stops a trial whose result at a rung is worse than the median of the others' results
at that rung (from `MEDIAN_MIN_PEERS` others on). Random and grid search run every trial to the last rung.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field

from learnerkit.scheduler.sweeps.decisions import Action, Decision, TrialRecord, TrialState
from learnerkit.scheduler.sweeps.spec import AlgorithmName, Objective

MEDIAN_MIN_PEERS = 3
"""The median rule judges a rung result once at least this many other trials reported at that rung."""

Entry = tuple[float, int]
"""A rung result in rank order: the objective as a sort key (smaller is better), then the trial index."""


@dataclass(frozen=True)
class Plan:
    """What the decision core needs of a sweep."""

    algorithm: AlgorithmName
    objective: Objective
    rungs: tuple[int, ...]
    trials: int
    concurrency: int
    eta: int = 3
    stop_only: bool = False
    seed: int = 0
    population: int = 4
    """PBT: the trials of one generation."""
    truncation: float = 0.25
    """PBT: the fraction of a generation, worst first, that copies one of the same fraction, best first."""


@dataclass(frozen=True)
class Origin:
    """Where a PBT trial starts: `parent`'s checkpoint, its parameters copied (`exploit`: and perturbed)."""

    parent: int
    exploit: bool


@dataclass
class _Trial:
    state: TrialState = TrialState.PENDING
    target: int = -1
    results: list[float] = field(default_factory=list)
    reason: str = ""


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


class RungBook:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.trials = [_Trial() for _ in range(plan.trials)]
        self.ranked: list[list[Entry]] = [[] for _ in plan.rungs]
        self.paused: list[list[Entry]] = [[] for _ in plan.rungs]
        self.reachable = [plan.trials for _ in plan.rungs]
        """Per rung: how many trials have reached it or may still (ASHA's n_max)."""
        self.checked_from = [self._quota_max(rung) for rung in range(len(plan.rungs))]
        """Per rung: no paused entry is ranked at this position or lower (they were judged and stopped); never
        below the rung's quota, so an entry that arrives here can never be promoted. It starts where `restore`
        puts it for a rung with no results, so a book rebuilt at any point decides as the live one would."""
        self.started = 0
        self.running = 0

    # -- rebuilding -------------------------------------------------------------------------------------

    @classmethod
    def restore(cls, plan: Plan, records: Iterable[TrialRecord]) -> RungBook:
        """The book as the stored records leave it; judging the paused trials again changes nothing stored."""
        book = cls(plan)
        for record in records:
            trial = book.trials[record.index]
            trial.state, trial.target, trial.reason = record.state, record.target, record.reason
            trial.results = list(record.results)
            if record.state is not TrialState.PENDING:
                book.started = max(book.started, record.index + 1)
            if record.state is TrialState.RUNNING:
                book.running += 1
            for rung, value in enumerate(record.results):
                bisect.insort(book.ranked[rung], book._entry(value, record.index))
            if record.state is TrialState.PAUSED:
                bisect.insort(book.paused[record.target], book._entry(record.results[-1], record.index))
            if record.state in (TrialState.STOPPED, TrialState.FAILED):
                book._unreachable_after(record.index, len(record.results) - 1)
        book.checked_from = [max(len(ranked), book._quota_max(rung)) for rung, ranked in enumerate(book.ranked)]
        return book

    def review(self) -> list[Decision]:
        """Stop the paused trials that can no longer be promoted; after `restore`, before `fill`. The driver
        stores every decision as it takes it, so this finds none unless a stop was lost on the way."""
        return self._judge_all()

    def records(self) -> list[TrialRecord]:
        return [
            TrialRecord(i, t.state, t.target, tuple(t.results), t.reason)
            for i, t in enumerate(self.trials)
            if t.state is not TrialState.PENDING
        ]

    # -- events -----------------------------------------------------------------------------------------

    def report(self, index: int, value: float | None, *, why_missing: str = "") -> list[Decision]:
        """Trial `index` finished its rung with the objective `value` (None: never reported: its rung fails)."""
        trial = self.trials[index]
        if trial.state is not TrialState.RUNNING:
            raise ValueError(f"trial {index} is {trial.state.value}, not running: no rung result expected")
        rung = trial.target
        budget = self.plan.rungs[rung]
        self.running -= 1
        if value is None:
            reason = f"rung {rung + 1}: {why_missing or 'the objective was never reported'}"
            self._end(index, TrialState.FAILED, reason, last_rung=rung - 1)
            return [Decision(Action.FAIL, index, rung, budget, reason), *self._judge_all()]
        trial.results.append(value)
        entry = self._entry(value, index)
        position = bisect.bisect_left(self.ranked[rung], entry)
        self.ranked[rung].insert(position, entry)
        if rung == len(self.plan.rungs) - 1:
            reason = f"rung {rung + 1}: reached the full budget ({budget})"
            trial.state, trial.reason = TrialState.COMPLETED, reason
            return [Decision(Action.COMPLETE, index, rung, budget, reason)]
        if self.plan.algorithm is AlgorithmName.MEDIAN_STOP:
            return self._median(index, rung, value, position)
        if self.plan.stop_only:
            return self._stop_only(index, rung, position)
        if position >= self.checked_from[rung]:  # ranked where no trial can be promoted any more
            reason = self._hopeless(rung, position)
            self._end(index, TrialState.STOPPED, reason, last_rung=rung)
            return [Decision(Action.STOP, index, rung, budget, reason), *self._judge_all(above=rung)]
        trial.state = TrialState.PAUSED
        bisect.insort(self.paused[rung], entry)
        # No paused entry is ranked at `checked_from` or lower: keep that true of the shifted list.
        self.checked_from[rung] += 1
        decisions = [Decision(Action.PAUSE, index, rung, budget, self.explain(index))]
        return decisions + self._judge(rung)

    def lost(self, index: int, reason: str) -> list[Decision]:
        """Trial `index`'s job failed while it trained."""
        trial = self.trials[index]
        if trial.state is not TrialState.RUNNING:
            raise ValueError(f"trial {index} is {trial.state.value}, not running")
        self.running -= 1
        self._end(index, TrialState.FAILED, reason, last_rung=trial.target - 1)
        rung = trial.target
        return [Decision(Action.FAIL, index, rung, self.plan.rungs[rung], reason), *self._judge_all()]

    def fill(self) -> list[Decision]:
        """Start or promote trials while fewer than `concurrency` run."""
        decisions: list[Decision] = []
        while self.running < self.plan.concurrency:
            decision = self._promotion() or self._start()
            if decision is None:
                break
            decisions.append(decision)
        return decisions

    @property
    def finished(self) -> bool:
        return all(t.state.terminal for t in self.trials)

    def first_rung(self, index: int) -> int:
        """The rung trial `index` starts towards: its results are those of the rungs from this one on."""
        return 0

    def origin(self, index: int) -> Origin | None:
        """The trial whose checkpoint trial `index` starts from (PBT); None: it starts from scratch."""
        return None

    # -- ASHA -------------------------------------------------------------------------------------------

    def _promotion(self) -> Decision | None:
        if self.plan.algorithm is not AlgorithmName.ASHA or self.plan.stop_only:
            return None
        for rung in range(len(self.plan.rungs) - 2, -1, -1):
            if not self.paused[rung]:
                continue
            best = self.paused[rung][0]
            top = len(self.ranked[rung]) // self.plan.eta
            position = bisect.bisect_left(self.ranked[rung], best)
            if position >= top:
                continue
            index = best[1]
            del self.paused[rung][0]
            trial = self.trials[index]
            trial.state, trial.target = TrialState.RUNNING, rung + 1
            trial.reason = f"rung {rung + 1}: {ordinal(position + 1)} of {len(self.ranked[rung])}, promoted"
            self.running += 1
            return Decision(Action.PROMOTE, index, rung + 1, self.plan.rungs[rung + 1], trial.reason)
        return None

    def _start(self) -> Decision | None:
        if self.started >= self.plan.trials:
            return None
        index = self.started
        self.started += 1
        self.running += 1
        trial = self.trials[index]
        trial.state, trial.target, trial.reason = TrialState.RUNNING, 0, "started"
        return Decision(Action.START, index, 0, self.plan.rungs[0], "started")

    def _quota_max(self, rung: int) -> int:
        return self.reachable[rung] // self.plan.eta

    def _judge(self, rung: int) -> list[Decision]:
        """Stop the paused trials of `rung` that can never rank in its top quota again."""
        if self.plan.algorithm is not AlgorithmName.ASHA or rung >= len(self.plan.rungs) - 1:
            return []
        quota = self._quota_max(rung)
        ranked = self.ranked[rung]
        decisions = []
        for position in range(quota, min(self.checked_from[rung], len(ranked))):
            index = ranked[position][1]
            trial = self.trials[index]
            if trial.state is TrialState.PAUSED and trial.target == rung:
                reason = self._hopeless(rung, position)
                paused = self.paused[rung]
                del paused[bisect.bisect_left(paused, ranked[position])]
                self._end(index, TrialState.STOPPED, reason, last_rung=rung)
                decisions.append(Decision(Action.STOP, index, rung, self.plan.rungs[rung], reason))
        self.checked_from[rung] = min(self.checked_from[rung], quota)
        if decisions:
            decisions += self._judge_all(above=rung)
        return decisions

    def _hopeless(self, rung: int, position: int) -> str:
        return (
            f"rung {rung + 1}: {ordinal(position + 1)} of {len(self.ranked[rung])}, at most "
            f"{self._quota_max(rung)} of {self.reachable[rung]} can continue: it can no longer be promoted"
        )

    def _judge_all(self, above: int = -1) -> list[Decision]:
        decisions: list[Decision] = []
        for rung in range(above + 1, len(self.plan.rungs) - 1):
            decisions += self._judge(rung)
        return decisions

    def _end(self, index: int, state: TrialState, reason: str, *, last_rung: int) -> None:
        trial = self.trials[index]
        trial.state, trial.reason = state, reason
        self._unreachable_after(index, last_rung)

    def _unreachable_after(self, index: int, last_rung: int) -> None:
        for rung in range(last_rung + 1, len(self.plan.rungs)):
            self.reachable[rung] -= 1

    # -- the stop-only and median rules ----------------------------------------------------------------

    def _stop_only(self, index: int, rung: int, position: int) -> list[Decision]:
        count = len(self.ranked[rung])
        top = max(count // self.plan.eta, 1)
        reason = f"rung {rung + 1}: {ordinal(position + 1)} of {count} so far, the top {top} continue"
        if position < top:
            return self._continue(index, rung, reason)
        self._end(index, TrialState.STOPPED, reason, last_rung=rung)
        return [Decision(Action.STOP, index, rung, self.plan.rungs[rung], reason)]

    def _median(self, index: int, rung: int, value: float, position: int) -> list[Decision]:
        ranked = self.ranked[rung]
        others = len(ranked) - 1
        if others < MEDIAN_MIN_PEERS:
            reason = f"rung {rung + 1}: {others} others reported, too few to compare"
            return self._continue(index, rung, reason)

        def other(i: int) -> float:  # the i-th of the others, skipping this trial's own entry
            return ranked[i if i < position else i + 1][0]

        middle = others // 2
        median = other(middle) if others % 2 else (other(middle - 1) + other(middle)) / 2
        shown = self.plan.objective.sort_key(median)
        if self.plan.objective.sort_key(value) > median:
            reason = f"rung {rung + 1}: {value:.6g} is worse than the median {shown:.6g} of {others} others"
            self._end(index, TrialState.STOPPED, reason, last_rung=rung)
            return [Decision(Action.STOP, index, rung, self.plan.rungs[rung], reason)]
        reason = f"rung {rung + 1}: {value:.6g} is no worse than the median {shown:.6g} of {others} others"
        return self._continue(index, rung, reason)

    def _continue(self, index: int, rung: int, reason: str) -> list[Decision]:
        trial = self.trials[index]
        trial.state, trial.target, trial.reason = TrialState.RUNNING, rung + 1, reason
        self.running += 1
        return [Decision(Action.CONTINUE, index, rung + 1, self.plan.rungs[rung + 1], reason)]

    # -- explaining -------------------------------------------------------------------------------------

    def _entry(self, value: float, index: int) -> Entry:
        return (self.plan.objective.sort_key(value), index)

    def explain(self, index: int) -> str:
        """Why trial `index` is where it is: for a paused trial its rank now ("rung 2: 4th of 9, the top 3
        continue"), else the reason of its last decision."""
        trial = self.trials[index]
        if trial.state is not TrialState.PAUSED:
            return trial.reason
        rung = trial.target
        ranked = self.ranked[rung]
        position = bisect.bisect_left(ranked, self._entry(trial.results[-1], index))
        top = len(ranked) // self.plan.eta
        return f"rung {rung + 1}: {ordinal(position + 1)} of {len(ranked)}, the top {top} continue"
