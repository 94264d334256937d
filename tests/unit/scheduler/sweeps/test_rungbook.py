"""The decision core: promotion-based ASHA, the stop-only and median rules, random search; and a restart."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from hypothesis import example, given, settings
from hypothesis import strategies as st

from learnerkit.scheduler.sweeps.decisions import Action, Decision, TrialRecord, TrialState
from learnerkit.scheduler.sweeps.rungbook import Plan, RungBook
from learnerkit.scheduler.sweeps.simulate import simulate
from learnerkit.scheduler.sweeps.spec import AlgorithmName, Goal, Objective

LOSS = Objective("loss", Goal.MINIMIZE)
ACCURACY = Objective("accuracy", Goal.MAXIMIZE)


def asha(
    trials: int, concurrency: int, *, eta: int = 3, rungs: tuple[int, ...] = (1, 3, 9), stop_only: bool = False
) -> Plan:
    return Plan(AlgorithmName.ASHA, LOSS, rungs, trials, concurrency, eta=eta, stop_only=stop_only)


@dataclass(frozen=True)
class Case:
    trials: int
    concurrency: int
    eta: int
    rung_count: int
    values: list[float]
    slowness: list[int]
    missing: set[int]
    """Trials that never report the objective after their first rung."""

    def plan(self, algorithm: AlgorithmName = AlgorithmName.ASHA) -> Plan:
        rungs = tuple(self.eta**k for k in range(self.rung_count))
        if algorithm is AlgorithmName.RANDOM:
            rungs = rungs[-1:]
        return Plan(algorithm, LOSS, rungs, self.trials, self.concurrency, eta=self.eta)

    def curve(self, trial: int, budget: int) -> float | None:
        return None if trial in self.missing and budget > 1 else self.values[trial] + 1 / budget

    def seconds(self, trial: int) -> float:
        return float(self.slowness[trial])


cases = st.builds(
    Case,
    trials=st.integers(min_value=1, max_value=40),
    concurrency=st.integers(min_value=1, max_value=6),
    eta=st.integers(min_value=2, max_value=4),
    rung_count=st.integers(min_value=1, max_value=4),
    values=st.lists(st.floats(min_value=0, max_value=1, allow_nan=False), min_size=40, max_size=40),
    slowness=st.lists(st.integers(min_value=1, max_value=5), min_size=40, max_size=40),
    missing=st.sets(st.integers(min_value=0, max_value=39), max_size=4),
)


class Restarting(RungBook):
    """A scheduler restarted after every event: the book is rebuilt from the stored records alone."""

    def fill(self) -> list[Decision]:
        rebuilt = RungBook.restore(self.plan, self.records())
        assert rebuilt.review() == []
        assert rebuilt.records() == self.records()
        self.__dict__.update(rebuilt.__dict__)
        return super().fill()


@settings(max_examples=200, deadline=None)
@given(case=cases)
def test_asha_ends_with_every_trial_settled_and_never_runs_more_than_its_concurrency(case: Case) -> None:
    plan = case.plan()
    sim = simulate(plan, case.curve, seconds_per_unit=case.seconds)
    book = sim.book
    assert book.finished
    assert book.running == 0
    starts = Counter(d.trial for d in sim.decisions if d.action is Action.START)
    assert sorted(starts) == list(range(plan.trials)) and set(starts.values()) == {1}
    # Each trial's budget only grows, one rung at a time: resumed, never recomputed from scratch.
    for trial in range(plan.trials):
        targets = [d.rung for d in sim.decisions if d.trial == trial and d.action in (Action.START, Action.PROMOTE)]
        assert targets == list(range(len(targets)))
    for rung in range(len(plan.rungs) - 1):
        promoted = sum(1 for d in sim.decisions if d.action is Action.PROMOTE and d.rung == rung + 1)
        assert promoted >= len(book.ranked[rung]) // plan.eta


@settings(max_examples=200, deadline=None)
@given(case=cases)
def test_asha_never_runs_more_trials_at_once_than_its_concurrency(case: Case) -> None:
    class Counting(RungBook):
        def fill(self) -> list[Decision]:
            decisions = super().fill()
            assert self.running <= self.plan.concurrency
            return decisions

    plan = case.plan()
    simulate(plan, case.curve, seconds_per_unit=case.seconds, book=Counting(plan))


@settings(max_examples=200, deadline=None)
@given(case=cases)
def test_a_stopped_paused_trial_was_never_going_to_be_promoted(case: Case) -> None:
    plan = case.plan()
    sim = simulate(plan, case.curve, seconds_per_unit=case.seconds)
    for decision in sim.decisions:
        if decision.action is Action.STOP:
            ranked = sim.book.ranked[decision.rung]
            position = [index for _, index in ranked].index(decision.trial)
            assert position >= len(ranked) // plan.eta


@settings(max_examples=100, deadline=None)
@given(case=cases, algorithm=st.sampled_from([AlgorithmName.ASHA, AlgorithmName.MEDIAN_STOP, AlgorithmName.RANDOM]))
# Found by a fresh-clone run: fewer trials than eta, so no rung result can ever continue. The live book paused
# the trial and then stopped it, the rebuilt one stopped it at once.
@example(case=Case(1, 1, 2, 2, [0.0] * 40, [1] * 40, set()), algorithm=AlgorithmName.ASHA)
def test_a_book_rebuilt_from_its_records_takes_the_same_decisions(case: Case, algorithm: AlgorithmName) -> None:
    plan = case.plan(algorithm)
    reference = simulate(plan, case.curve, seconds_per_unit=case.seconds)
    restarted = simulate(plan, case.curve, seconds_per_unit=case.seconds, book=Restarting(plan))
    assert restarted.decisions == reference.decisions


def test_promotion_finds_a_late_bloomer_the_stop_only_rule_loses() -> None:
    """Trial 2 is the best in the end, and third at rung 1, where it arrives behind two better-looking trials
    (0 and 1 are faster): the stop-only rule judges it once, 3rd of 3 with the top 1 continuing, and stops it;
    ASHA pauses it and promotes it once rung 1 has grown to 9 trials, of which it is 3rd."""
    first_rung = [0.10, 0.20, 0.30, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9]
    final = [0.5, 0.6, 0.01, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9]

    def curve(trial: int, budget: int) -> float:
        return first_rung[trial] if budget == 1 else final[trial]

    for stop_only, found in ((False, True), (True, False)):
        plan = asha(9, 3, eta=3, rungs=(1, 3), stop_only=stop_only)
        sim = simulate(plan, curve, seconds_per_unit=lambda trial: 1.5 if trial == 2 else 1.0)
        completed = {d.trial for d in sim.decisions if d.action is Action.COMPLETE}
        assert (2 in completed) is found, sim.decisions
    stop = next(d for d in sim.decisions if d.trial == 2 and d.action is Action.STOP)
    assert stop.reason == "rung 1: 3rd of 3 so far, the top 1 continue"


def test_the_reason_of_a_paused_trial_says_its_rank_and_how_many_continue() -> None:
    records = [TrialRecord(i, TrialState.PAUSED, 1, (0.5, i / 10)) for i in range(9)]
    records += [TrialRecord(i, TrialState.STOPPED, 0, (0.9,), "x") for i in range(9, 27)]
    book = RungBook.restore(asha(27, 3, rungs=(1, 3, 9)), records)
    assert book.explain(3) == "rung 2: 4th of 9, the top 3 continue"
    assert book.explain(9) == "x"


def test_the_median_rule_stops_a_trial_worse_than_the_median_of_the_others() -> None:
    plan = Plan(AlgorithmName.MEDIAN_STOP, ACCURACY, (1, 2), 5, 1)
    sim = simulate(plan, lambda trial, budget: [0.9, 0.8, 0.7, 0.95, 0.1][trial])
    stops = [d for d in sim.decisions if d.action is Action.STOP]
    assert [(d.trial, d.reason) for d in stops] == [(4, "rung 1: 0.1 is worse than the median 0.85 of 4 others")]
    assert sum(1 for d in sim.decisions if d.action is Action.COMPLETE) == 4


def test_a_trial_that_never_reports_the_objective_fails_its_rung_with_the_reason() -> None:
    book = RungBook(asha(3, 1))
    (start,) = book.fill()
    (fail, *_) = book.report(start.trial, None, why_missing="the objective loss was never reported (step 1)")
    assert (fail.action, fail.reason) == (Action.FAIL, "rung 1: the objective loss was never reported (step 1)")
    assert book.trials[0].state is TrialState.FAILED


def test_random_search_runs_every_trial_to_the_full_budget() -> None:
    plan = Plan(AlgorithmName.RANDOM, LOSS, (9,), 4, 2)
    sim = simulate(plan, lambda trial, budget: float(trial))
    assert Counter(d.action for d in sim.decisions) == {Action.START: 4, Action.COMPLETE: 4}
    assert sim.trained == {0: 9, 1: 9, 2: 9, 3: 9}
