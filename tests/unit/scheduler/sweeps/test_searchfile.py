"""The search file: a good one read whole, each bad field refused with its line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from learnerkit.scheduler.sweeps.searchfile import SearchFileError, load_search_file, parse_search_file
from learnerkit.scheduler.sweeps.space import ParamType
from learnerkit.scheduler.sweeps.spec import AlgorithmName, BudgetUnit, Goal, SamplerName

GOOD = """\
manifest: manifest.yml
parameters:
  lr: {type: log_uniform, min: 1.0e-4, max: 0.1}
  width: {type: choice, values: [16, 32, 64]}
  dropout: {type: uniform, min: 0.0, max: 0.5}
  layers: {type: integer, min: 1, max: 4}
objective: {metric: val_loss, goal: minimize}
budget: {unit: step, min: 10, max: 270}
algorithm: {name: asha, eta: 3}
trials: 27
concurrency: 3
seed: 7
"""


def parse(text: str) -> object:
    return parse_search_file(textwrap.dedent(text), Path("/sweeps/search.yml"))


def problems(text: str) -> list[str]:
    with pytest.raises(SearchFileError) as caught:
        parse(text)
    return [str(p) for p in caught.value.problems]


def test_the_issue_s_example_reads_whole() -> None:
    spec = parse_search_file(GOOD, Path("/sweeps/search.yml"))
    assert spec.manifest == Path("/sweeps/manifest.yml")
    assert [p.type for p in spec.space.parameters] == [
        ParamType.LOG_UNIFORM,
        ParamType.CHOICE,
        ParamType.UNIFORM,
        ParamType.INTEGER,
    ]
    assert spec.objective.goal is Goal.MINIMIZE
    assert spec.budget.unit is BudgetUnit.STEP
    assert spec.algorithm.name is AlgorithmName.ASHA
    assert spec.rungs == (10, 30, 90, 270)
    assert (spec.trials, spec.concurrency, spec.seed, spec.keep_checkpoints) == (27, 3, 7, False)


def test_the_manifest_path_is_relative_to_the_search_file(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "search.yml"
    path.write_text(GOOD.replace("manifest.yml", "../m/manifest.yml"))
    assert load_search_file(path).manifest == tmp_path / "sub" / "../m/manifest.yml"


def test_an_empty_search_space_is_refused_naming_the_field() -> None:
    found = problems(GOOD.replace("parameters:\n", "parameters: {}\nx:\n"))
    assert any("search.yml:2: parameters: the search space is empty" in p for p in found)


@pytest.mark.parametrize(
    ("budget", "expected"),
    [
        ("{unit: step, min: 2.5, max: 270}", "search.yml:8: budget.min: a step budget is a whole number of steps"),
        ("{unit: epoch, min: 1, max: 0.5}", "search.yml:8: budget.max: a epoch budget is a whole number of epochs"),
        ("{unit: step, min: 0, max: 270}", "budget.min: a step budget is a whole number of steps, at least 1"),
        ("{unit: step, min: 300, max: 270}", "budget.min: must not exceed max (270); got 300"),
        ("{unit: second, min: 1, max: 2}", "budget.unit: unknown value 'second'; valid: step, epoch"),
        ("{unit: step, max: 270}", "budget.min: required"),
    ],
)
def test_a_budget_the_unit_cannot_express_is_refused(budget: str, expected: str) -> None:
    found = problems(GOOD.replace("{unit: step, min: 10, max: 270}", budget))
    assert any(expected in p for p in found), found


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "  lr: {type: log_uniform, min: 0, max: 0.1}",
            "search.yml:3: parameters.lr.min: a log_uniform parameter needs min above 0",
        ),
        ("  lr: {type: gaussian, min: 0, max: 0.1}", "parameters.lr.type: unknown value 'gaussian'"),
        ("  lr: {min: 0, max: 0.1}", "parameters.lr.type: required"),
        ("  lr: {type: uniform, min: 1, max: 0.1}", "parameters.lr.min: must not exceed max (0.1); got 1.0"),
        ("  lr: {type: choice, values: []}", "parameters.lr.values: expected a list of at least one value"),
        ("  lr: {type: choice, values: [1, 1]}", "parameters.lr.values: lists a value twice"),
        ("  lr: {type: integer, min: 1.5, max: 3}", "parameters.lr: an integer parameter needs whole min and max"),
        ("  lr: {type: uniform, min: 0, max: 1, step: 2}", "parameters.lr.step: unknown key 'step'"),
        (
            "  DATA_DIR: {type: uniform, min: 0, max: 1}",
            "parameters.DATA_DIR: DATA_DIR is a variable the platform sets",
        ),
        ("  1lr: {type: uniform, min: 0, max: 1}", "parameters.1lr: a parameter's name becomes an environment"),
    ],
)
def test_a_bad_parameter_is_refused_naming_it(line: str, expected: str) -> None:
    found = problems(GOOD.replace("  lr: {type: log_uniform, min: 1.0e-4, max: 0.1}", line))
    assert any(expected in p for p in found), found


def test_every_problem_is_reported_at_once() -> None:
    text = GOOD.replace("goal: minimize", "goal: lowest").replace("eta: 3", "eta: 1").replace("trials: 27", "trials: 0")
    found = problems(text)
    assert any("search.yml:7: objective.goal: unknown value 'lowest'" in p for p in found), found
    assert any("search.yml:9: algorithm.eta: must be at least 2; got 1" in p for p in found), found
    assert any("search.yml:10: trials: must be at least 1; got 0" in p for p in found), found


def test_a_grid_needs_points_for_continuous_parameters_and_takes_its_size_as_trials() -> None:
    text = GOOD.replace("asha, eta: 3", "grid").replace("trials: 27\n", "")
    found = problems(text)
    assert any("parameters.lr.points: a grid needs the number of log_uniform points" in p for p in found), found
    text = text.replace("max: 0.1}", "max: 0.1, points: 3}").replace("max: 0.5}", "max: 0.5, points: 2}")
    spec = parse_search_file(text, Path("s.yml"))
    assert spec.trials == 3 * 3 * 2 * 4
    assert spec.rungs == (270,)


def test_eta_belongs_to_the_rung_algorithms_only() -> None:
    found = problems(GOOD.replace("asha, eta: 3", "random, eta: 3"))
    assert any("algorithm.eta: random takes no option; eta belongs to asha, median_stop, hyperband" in p for p in found)


@pytest.mark.parametrize(
    ("algorithm", "expected"),
    [
        ("{name: tpe, eta: 3}", "algorithm.eta: tpe takes startup; eta belongs to asha, median_stop, hyperband"),
        ("{name: asha, startup: 5}", "algorithm.startup: only a TPE sampler has startup trials; add sampler: tpe"),
        ("{name: asha, sampler: cmaes}", "algorithm.sampler: unknown value 'cmaes'; valid: random, tpe"),
        ("{name: pbt, population: 1}", "algorithm.population: "),
        ("{name: pbt, truncation: 0.9}", "algorithm.truncation: a fraction above 0, at most 0.5; got 0.9"),
        ("{name: pbt, resample: -1}", "algorithm.resample: a fraction above 0, at most 1; got -1"),
        ("{name: pbt, population: 4}", "trials: pbt runs algorithm.population x generations"),
        ("{name: hyperband, population: 4}", "algorithm.population: hyperband takes eta, sampler, startup"),
    ],
)
def test_each_algorithm_takes_its_own_options(algorithm: str, expected: str) -> None:
    found = problems(GOOD.replace("{name: asha, eta: 3}", algorithm))
    assert any(expected in p for p in found), found
    assert all(":" in p.split(" ")[0] for p in found), "each problem names its line"


@pytest.mark.parametrize(
    ("algorithm", "name", "sampler"),
    [
        ("{name: tpe, startup: 5}", AlgorithmName.TPE, SamplerName.TPE),
        ("{name: asha, eta: 3, sampler: tpe, startup: 4}", AlgorithmName.ASHA, SamplerName.TPE),
        ("{name: hyperband, eta: 3}", AlgorithmName.HYPERBAND, SamplerName.RANDOM),
    ],
)
def test_samplers_read(algorithm: str, name: AlgorithmName, sampler: SamplerName) -> None:
    spec = parse_search_file(GOOD.replace("{name: asha, eta: 3}", algorithm), Path("s.yml"))
    assert (spec.algorithm.name, spec.algorithm.sampler) == (name, sampler)
    assert spec.rungs == ((270,) if name is AlgorithmName.TPE else (10, 30, 90, 270))


def test_pbt_runs_a_generation_per_interval() -> None:
    text = GOOD.replace("{name: asha, eta: 3}", "{name: pbt, population: 3, truncation: 0.34}")
    text = text.replace("trials: 27", "trials: 81")
    spec = parse_search_file(text, Path("s.yml"))
    assert spec.rungs == tuple(range(10, 271, 10)) and spec.trials == 3 * 27
    assert (spec.algorithm.population, spec.algorithm.truncation) == (3, 0.34)
