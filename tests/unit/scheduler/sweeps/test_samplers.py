"""The samplers: Hyperband's brackets, PBT's generations and lineage, Optuna's TPE; each rebuilt from its records."""

from __future__ import annotations

import math
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from learnerkit.scheduler.sweeps.books import plan_of, restore_book
from learnerkit.scheduler.sweeps.decisions import Action, Decision, TrialState
from learnerkit.scheduler.sweeps.hyperband import brackets
from learnerkit.scheduler.sweeps.pbt import perturbed
from learnerkit.scheduler.sweeps.rungbook import Plan
from learnerkit.scheduler.sweeps.simulate import simulate
from learnerkit.scheduler.sweeps.space import Parameter, ParamType, SearchSpace
from learnerkit.scheduler.sweeps.spec import (
    Algorithm,
    AlgorithmName,
    Budget,
    BudgetUnit,
    Goal,
    Objective,
    SamplerName,
    SweepSpec,
)
from learnerkit.scheduler.sweeps.suggest import new_config
from learnerkit.scheduler.sweeps.tpe import Observation, tpe_config

LOSS = Objective("loss", Goal.MINIMIZE)
SPACE = SearchSpace(
    (
        Parameter("lr", ParamType.LOG_UNIFORM, low=1e-4, high=1.0),
        Parameter("layers", ParamType.INTEGER, low=1, high=8),
        Parameter("act", ParamType.CHOICE, values=("relu", "tanh", "gelu")),
    )
)


def hyperband(trials: int, concurrency: int, eta: int = 3, rungs: tuple[int, ...] = (1, 3, 9)) -> Plan:
    return Plan(AlgorithmName.HYPERBAND, LOSS, rungs, trials, concurrency, eta=eta)


def pbt(population: int, generations: int, concurrency: int, seed: int = 0) -> Plan:
    rungs = tuple(10 * (g + 1) for g in range(generations))
    return Plan(AlgorithmName.PBT, LOSS, rungs, population * generations, concurrency, seed=seed, population=population)


# -- Hyperband ---------------------------------------------------------------------------------------------


def test_brackets_follow_the_paper() -> None:
    """Three rungs, eta 3: brackets s = 2, 1, 0 of ceil(3/(s+1) x 3^s) = 9, 5, 3 trials from rungs 1, 2, 3."""
    assert [(b.first, b.count, b.rung) for b in brackets(3, 3, 17)] == [(0, 9, 0), (9, 5, 1), (14, 3, 2)]
    again = brackets(3, 3, 20)  # a second round, cut short
    assert [(b.first, b.count, b.rung) for b in again][-1] == (17, 3, 0)


def test_a_bracket_promotes_its_top_third_once_every_trial_reported() -> None:
    plan = hyperband(9, concurrency=9)
    sim = simulate(plan, lambda trial, budget: trial + 1 / budget)
    stops = [d for d in sim.decisions if d.action is Action.STOP]
    promotes = [d for d in sim.decisions if d.action is Action.PROMOTE]
    assert sorted(d.trial for d in promotes if d.rung == 1) == [0, 1, 2]
    assert [d.trial for d in promotes if d.rung == 2] == [0]
    assert len(stops) == 8
    completed = [d.trial for d in sim.decisions if d.action is Action.COMPLETE]
    assert completed == [0]
    first_promotion = sim.decisions.index(promotes[0])
    reports = [i for i, d in enumerate(sim.decisions) if d.action is Action.PAUSE and d.rung == 0]
    assert first_promotion > max(reports), "no promotion before the whole bracket finished its rung"


def test_later_brackets_start_at_higher_rungs() -> None:
    plan = hyperband(17, concurrency=2)
    sim = simulate(plan, lambda trial, budget: (trial * 7919) % 17 + 1 / budget)
    starts = {d.trial: d.rung for d in sim.decisions if d.action is Action.START}
    assert {starts[i] for i in range(9)} == {0} and {starts[i] for i in range(9, 14)} == {1}
    assert {starts[i] for i in range(14, 17)} == {2}
    assert sim.book.finished


def replay_equals_restore(plan: Plan, curve: object, events: int) -> None:
    """Rebuilt from the records after every event, the book decides what the live one decided."""
    live = restore_book(plan)
    pending = list(live.fill())
    step = 0
    while pending and step < events:
        decision = pending.pop(0)
        if decision.action not in (Action.START, Action.PROMOTE):
            continue
        value = curve(decision.trial, decision.budget)  # type: ignore[operator]
        after = live.report(decision.trial, value)
        rebuilt = restore_book(plan, live.records())
        assert rebuilt.review() == []
        assert rebuilt.records() == live.records()
        more = live.fill()
        assert rebuilt.fill() == more
        pending += [*after, *more]
        step += 1


@settings(max_examples=40, deadline=None)
@given(
    trials=st.integers(min_value=1, max_value=30),
    concurrency=st.integers(min_value=1, max_value=5),
    eta=st.integers(min_value=2, max_value=3),
    values=st.lists(st.floats(min_value=0, max_value=1, allow_nan=False), min_size=30, max_size=30),
)
def test_hyperband_restored_decides_the_same(trials: int, concurrency: int, eta: int, values: list[float]) -> None:
    plan = hyperband(trials, concurrency, eta=eta, rungs=(1, eta, eta * eta))
    replay_equals_restore(plan, lambda trial, budget: values[trial] + 1 / budget, 10_000)


@settings(max_examples=40, deadline=None)
@given(
    trials=st.integers(min_value=1, max_value=30),
    concurrency=st.integers(min_value=1, max_value=5),
    values=st.lists(st.floats(min_value=0, max_value=1, allow_nan=False), min_size=30, max_size=30),
)
def test_hyperband_settles_every_trial(trials: int, concurrency: int, values: list[float]) -> None:
    sim = simulate(hyperband(trials, concurrency), lambda trial, budget: values[trial] + 1 / budget)
    assert sim.book.finished
    assert all(r.state in (TrialState.STOPPED, TrialState.COMPLETED) for r in sim.book.records())
    assert len(sim.book.records()) == trials


# -- PBT ---------------------------------------------------------------------------------------------------


def test_the_worst_copy_the_best_and_the_rest_go_on() -> None:
    plan = pbt(population=4, generations=3, concurrency=4)
    book = restore_book(plan)
    first = book.fill()
    assert [d.trial for d in first] == [0, 1, 2, 3] and all(d.action is Action.START for d in first)
    assert book.fill() == []
    for trial, value in zip(range(4), (0.4, 0.1, 0.3, 0.9), strict=True):
        book.report(trial, value)
        assert trial == 3 or book.fill() == [], "the next generation waits for the whole generation"
    second = book.fill()
    assert [d.trial for d in second] == [4, 5, 6, 7]
    assert book.origin(7) is not None and book.origin(7).parent == 1 and book.origin(7).exploit  # type: ignore[union-attr]
    for own in (4, 5, 6):
        origin = book.origin(own)
        assert origin is not None and origin.parent == own - 4 and not origin.exploit
    assert "trial 3 (4th) copies trial 1 (1st of 4), perturbed" in second[3].reason
    rebuilt = restore_book(plan, book.records())
    assert [rebuilt.origin(i) for i in range(4, 8)] == [book.origin(i) for i in range(4, 8)]


def test_a_failed_member_copies_a_best_one() -> None:
    book = restore_book(pbt(population=3, generations=2, concurrency=3))
    book.fill()
    book.report(0, 0.5)
    book.lost(1, "its job ended failed")
    book.report(2, 0.2)
    book.fill()
    origin = book.origin(4)
    assert origin is not None and origin.parent == 2 and origin.exploit


@settings(max_examples=30, deadline=None)
@given(
    population=st.integers(min_value=2, max_value=6),
    generations=st.integers(min_value=1, max_value=4),
    concurrency=st.integers(min_value=1, max_value=6),
    seed=st.integers(min_value=0, max_value=5),
    values=st.lists(st.floats(min_value=0, max_value=1, allow_nan=False), min_size=24, max_size=24),
)
def test_pbt_restored_decides_the_same(
    population: int, generations: int, concurrency: int, seed: int, values: list[float]
) -> None:
    plan = pbt(population, generations, concurrency, seed=seed)
    replay_equals_restore(plan, lambda trial, budget: values[trial], 10_000)
    sim = simulate(plan, lambda trial, budget: values[trial])
    assert sim.book.finished
    for index in range(population, population * generations):
        origin = sim.book.origin(index)
        assert origin is not None and origin.parent // population == index // population - 1


@given(seed=st.integers(min_value=0, max_value=1000), index=st.integers(min_value=0, max_value=1000))
def test_perturbed_parameters_stay_in_the_space(seed: int, index: int) -> None:
    parent = {"lr": 0.9, "layers": 8, "act": "tanh"}
    out = perturbed(SPACE, parent, seed=seed, index=index, resample=0.25)
    assert 1e-4 <= float(out["lr"]) <= 1.0 and isinstance(out["layers"], int) and 1 <= out["layers"] <= 8
    assert out["act"] in ("relu", "tanh", "gelu")
    assert out == perturbed(SPACE, parent, seed=seed, index=index, resample=0.25)


def test_without_resampling_numbers_move_by_a_fifth() -> None:
    out = perturbed(SPACE, {"lr": 0.01, "layers": 4, "act": "relu"}, seed=1, index=9, resample=0.0)
    assert math.isclose(float(out["lr"]), 0.008) or math.isclose(float(out["lr"]), 0.012)
    assert out["act"] in ("relu", "tanh")


# -- TPE ---------------------------------------------------------------------------------------------------


def quadratic(config: dict[str, object]) -> float:
    return (math.log10(float(config["lr"])) + 2) ** 2 + (int(config["layers"]) - 3) ** 2 / 10  # type: ignore[arg-type]


def tpe_run(seed: int, trials: int, order: list[int] | None = None) -> list[dict[str, object]]:
    seen: list[Observation] = []
    configs: list[dict[str, object]] = []
    for index in range(trials):
        config = dict(tpe_config(SPACE, Goal.MINIMIZE, seed=seed, index=index, startup=5, seen=seen))
        configs.append(config)
        seen.append(Observation(config, ((9, quadratic(config)),), completed=True))  # type: ignore[arg-type]
    return configs


def test_tpe_is_deterministic_given_the_seed_and_the_results() -> None:
    assert tpe_run(3, 12) == tpe_run(3, 12)
    assert tpe_run(3, 12) != tpe_run(4, 12)


def test_tpe_uses_the_results_after_its_startup_trials() -> None:
    """The same ten trials; the eleventh depends on what they scored."""
    seen = [
        Observation(config, ((9, quadratic(config)),), completed=True)  # type: ignore[arg-type]
        for config in tpe_run(1, 10)
    ]
    flipped = [Observation(o.parameters, ((9, -o.results[0][1]),), completed=True) for o in seen]
    one = tpe_config(SPACE, Goal.MINIMIZE, seed=1, index=10, startup=5, seen=seen)
    other = tpe_config(SPACE, Goal.MINIMIZE, seed=1, index=10, startup=5, seen=flipped)
    assert one != other
    for config in (one, other):
        assert 1e-4 <= float(config["lr"]) <= 1.0 and config["act"] in ("relu", "tanh", "gelu")


def test_tpe_takes_pruned_trials_with_their_rung_results() -> None:
    """ASHA's paused and stopped trials are told as pruned, with their rung results as intermediate values."""
    configs = tpe_run(2, 6)
    seen = [
        Observation(c, ((1, quadratic(c)),) if i % 2 else ((1, quadratic(c)), (3, quadratic(c) / 2)), i % 2 == 0)  # type: ignore[arg-type]
        for i, c in enumerate(configs)
    ]
    config = tpe_config(SPACE, Goal.MAXIMIZE, seed=2, index=6, startup=2, seen=seen)
    assert set(config) == {"lr", "layers", "act"}


def test_decisions_are_plain() -> None:
    assert Decision(Action.START, 0, 0, 1, "started") == Decision(Action.START, 0, 0, 1, "started")


def asha_tpe_spec(seed: int) -> SweepSpec:
    algorithm = Algorithm(AlgorithmName.ASHA, eta=3, sampler=SamplerName.TPE, startup=4)
    budget = Budget(BudgetUnit.STEP, 1, 9)
    return SweepSpec(Path("manifest.yml"), SPACE, LOSS, budget, algorithm, trials=12, concurrency=2, seed=seed)


def asha_tpe_run(seed: int) -> tuple[dict[int, dict[str, object]], list[Decision]]:
    """ASHA's rungs with TPE suggesting each new trial (Optuna's TPE + pruner), through the driver's `new_config`."""
    spec = asha_tpe_spec(seed)
    book = restore_book(plan_of(spec))
    parameters: dict[int, dict[str, object]] = {}
    decisions = book.fill()
    done: list[Decision] = []
    while decisions:
        decision = decisions.pop(0)
        done.append(decision)
        if decision.action is Action.START:
            parameters[decision.trial] = dict(new_config(spec, book, decision.trial, parameters))  # type: ignore[arg-type]
        if decision.action in (Action.START, Action.PROMOTE):
            value = quadratic(parameters[decision.trial]) + 1 / decision.budget
            decisions += book.report(decision.trial, value) + book.fill()
    assert book.finished
    return parameters, done


def test_asha_with_a_tpe_sampler_runs_its_rungs_and_is_deterministic() -> None:
    parameters, decisions = asha_tpe_run(5)
    assert len(parameters) == 12
    assert any(d.action is Action.PROMOTE for d in decisions)
    assert any(d.action is Action.STOP for d in decisions)
    assert asha_tpe_run(5) == (parameters, decisions)


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(min_value=0, max_value=2**40),
    values=st.lists(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), min_size=0, max_size=12),
)
def test_tpe_suggests_within_the_space_whatever_the_results(seed: int, values: list[float]) -> None:
    configs = tpe_run(seed % 97, len(values))
    seen = [
        Observation(c, ((9, v),), completed=True)  # type: ignore[arg-type]
        for c, v in zip(configs, values, strict=True)
    ]
    config = tpe_config(SPACE, Goal.MAXIMIZE, seed=seed, index=len(values), startup=3, seen=seen)
    assert 1e-4 <= float(config["lr"]) <= 1.0
    assert isinstance(config["layers"], int) and 1 <= config["layers"] <= 8
    assert config["act"] in ("relu", "tanh", "gelu")
