"""Read a search file into a `SweepSpec`, collecting every problem with its line and field path.

The manifest it names is read by the caller (`load_search_file` resolves its path against the search
file's folder); `check_against_manifest` then checks the two together (`sweepcheck`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from learnerkit.common.errors import ConfigError
from learnerkit.common.yamlfile import (
    FieldPath,
    LocatedYaml,
    Problem,
    YamlBudget,
    YamlError,
    load_located_yaml,
    parse_located_yaml,
)
from learnerkit.scheduler.manifest.fields import FieldReader, describe
from learnerkit.scheduler.sweeps.space import Parameter, ParamType, ParamValue, SearchSpace
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

TOP_KEYS = (
    "manifest",
    "parameters",
    "objective",
    "budget",
    "algorithm",
    "trials",
    "concurrency",
    "seed",
    "keep_checkpoints",
)
PARAMETER_KEYS = ("type", "min", "max", "values", "points")
MAX_TRIALS = 10_000
"""The most trials a sweep may ask for: each is an ordinary job the scheduler tracks."""
MAX_CONCURRENCY = 1_000
"""The most trials a sweep may train at once."""
MAX_NODES = 20_000
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
RESERVED = frozenset(
    {
        "PATH", "HOME", "PYTHONPATH", "JOB_ID", "LEARNER_ID", "NUM_LEARNERS", "GPU_COUNT", "DATA_DIR", "MODEL_DIR",
        "RESULT_DIR", "CHECKPOINT_DIR", "LOG_DIR", "JOB_STATE_DIR", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE",
        "RANK", "TF_CONFIG", "LEARNER_BUDGET", "LEARNER_BUDGET_UNIT", "LEARNER_PARAMETERS", "LEARNER_COMMAND",
        "LEARNER_HALT_GRACE",
    }
)  # fmt: skip
"""Variables the platform sets for the learner: a parameter of one of these names would shadow it."""


class SearchFileError(YamlError):
    """A search file cannot be used; `problems` names the line and field path of each problem."""


def load_search_file(path: Path) -> SweepSpec:
    """Read and check a search file; raises `SearchFileError` listing every problem."""
    try:
        doc = load_located_yaml(path, YamlBudget(max_nodes=MAX_NODES))
    except YamlError as e:
        raise SearchFileError(list(e.problems)) from e
    except ConfigError as e:
        raise SearchFileError([Problem(path=path, line=None, loc=(), message=str(e))]) from e
    return read_search_file(doc)


def parse_search_file(text: str, source: Path) -> SweepSpec:
    """Check search-file text; `source` names it in messages and anchors its relative manifest path."""
    try:
        doc = parse_located_yaml(text, source, YamlBudget(max_nodes=MAX_NODES))
    except YamlError as e:
        raise SearchFileError(list(e.problems)) from e
    return read_search_file(doc)


def read_search_file(doc: LocatedYaml) -> SweepSpec:
    reader = FieldReader(doc)
    top = reader.mapping(doc.data, (), TOP_KEYS) or {}
    manifest = reader.string(top, (), "manifest", required=True)
    space = _space(reader, top.get("parameters"))
    objective = _objective(reader, top.get("objective"))
    algorithm = _algorithm(reader, top.get("algorithm"))
    budget = _budget(reader, top.get("budget"), algorithm)
    trials = _trials(reader, top, algorithm, space)
    concurrency = reader.integer(top, (), "concurrency", minimum=1, maximum=MAX_CONCURRENCY) or 1
    seed = reader.integer(top, (), "seed", minimum=0, maximum=2**63 - 1) or 0
    keep = reader.boolean(top, (), "keep_checkpoints") or False
    # Every None below came with a problem; the test keeps mypy told.
    if (
        reader.problems
        or manifest is None
        or space is None
        or objective is None
        or budget is None
        or algorithm is None
        or trials is None
    ):
        raise SearchFileError(reader.problems)
    return SweepSpec(
        manifest=doc.path.parent / manifest,
        space=space,
        objective=objective,
        budget=budget,
        algorithm=algorithm,
        trials=trials,
        concurrency=concurrency,
        seed=seed,
        keep_checkpoints=keep,
        lines=doc.lines,
    )


def _space(reader: FieldReader, raw: Any) -> SearchSpace | None:
    loc: FieldPath = ("parameters",)
    if raw is None or raw == {}:
        reader.fail(loc, "the search space is empty: name at least one parameter")
        return None
    if not isinstance(raw, dict):
        reader.fail(loc, f"expected a mapping of parameter names; got {describe(raw)}")
        return None
    params = [_parameter(reader, str(name), body, (*loc, str(name))) for name, body in raw.items()]
    if any(p is None for p in params):
        return None
    return SearchSpace(tuple(p for p in params if p is not None))


def _parameter(reader: FieldReader, name: str, raw: Any, loc: FieldPath) -> Parameter | None:
    ok = True
    if not NAME.fullmatch(name):
        reader.fail(loc, "a parameter's name becomes an environment variable: letters, digits and _, not first a digit")
        ok = False
    elif name in RESERVED:
        reader.fail(loc, f"{name} is a variable the platform sets for the learner; choose another name")
        ok = False
    body = reader.mapping(raw, loc, PARAMETER_KEYS)
    if body is None:
        return None
    kind = reader.choice(body, loc, "type", [t.value for t in ParamType])
    if kind is None:
        if "type" not in body:
            reader.fail((*loc, "type"), f"required; one of {', '.join(t.value for t in ParamType)}")
        return None
    ptype = ParamType(kind)
    if ptype is ParamType.CHOICE:
        return _choice(reader, name, body, loc) if ok else None
    for key in ("values",):
        if key in body:
            reader.fail((*loc, key), f"only a choice has values; a {kind} has min and max")
            ok = False
    low, high = _number(reader, body, loc, "min"), _number(reader, body, loc, "max")
    if low is None or high is None:
        return None
    if ptype is ParamType.INTEGER and not (float(low).is_integer() and float(high).is_integer()):
        reader.fail(loc, f"an integer parameter needs whole min and max; got {low} and {high}")
        return None
    if low > high:
        reader.fail((*loc, "min"), f"must not exceed max ({high}); got {low}")
        return None
    if ptype is ParamType.LOG_UNIFORM and low <= 0:
        reader.fail((*loc, "min"), f"a log_uniform parameter needs min above 0; got {low}")
        return None
    points = reader.integer(body, loc, "points", minimum=1, maximum=MAX_TRIALS)
    if points is not None and ptype is ParamType.INTEGER:
        reader.fail((*loc, "points"), "an integer parameter's grid is every whole number from min to max")
        ok = False
    return Parameter(name, ptype, low=float(low), high=float(high), points=points) if ok else None


def _number(reader: FieldReader, body: dict[str, Any], loc: FieldPath, key: str) -> float | None:
    value = body.get(key)
    if value is None:
        reader.fail((*loc, key), "required")
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        reader.fail((*loc, key), f"expected a number; got {describe(value)}")
        return None
    return float(value)


def _choice(reader: FieldReader, name: str, body: dict[str, Any], loc: FieldPath) -> Parameter | None:
    values = body.get("values")
    for key in ("min", "max", "points"):
        if key in body:
            reader.fail((*loc, key), "a choice has values only")
    if not isinstance(values, list) or not values:
        reader.fail((*loc, "values"), f"expected a list of at least one value; got {describe(values)}")
        return None
    out: list[ParamValue] = []
    for i, value in enumerate(values):
        if value is None or not isinstance(value, str | int | float | bool):
            reader.fail((*loc, "values", i), f"expected a string, number or boolean; got {describe(value)}")
            return None
        if isinstance(value, float) and not math.isfinite(value):
            reader.fail((*loc, "values", i), f"{value!r} has no JSON form; quote it")
            return None
        out.append(value)
    if len({repr(v) for v in out}) != len(out):
        reader.fail((*loc, "values"), "lists a value twice")
        return None
    return Parameter(name, ParamType.CHOICE, values=tuple(out))


def _objective(reader: FieldReader, raw: Any) -> Objective | None:
    loc: FieldPath = ("objective",)
    if raw is None:
        reader.fail(loc, "required: {metric: NAME, goal: minimize | maximize}")
        return None
    body = reader.mapping(raw, loc, ("metric", "goal"))
    if body is None:
        return None
    metric = reader.string(body, loc, "metric", required=True)
    goal = reader.choice(body, loc, "goal", [g.value for g in Goal])
    if "goal" not in body:
        reader.fail((*loc, "goal"), "required: minimize or maximize")
    if metric is None or goal is None:
        return None
    return Objective(metric, Goal(goal))


ALGORITHM_KEYS: dict[AlgorithmName, tuple[str, ...]] = {
    AlgorithmName.RANDOM: (),
    AlgorithmName.GRID: (),
    AlgorithmName.ASHA: ("eta", "sampler", "startup"),
    AlgorithmName.MEDIAN_STOP: ("eta",),
    AlgorithmName.TPE: ("startup",),
    AlgorithmName.HYPERBAND: ("eta", "sampler", "startup"),
    AlgorithmName.PBT: ("population", "truncation", "resample"),
}
"""The options each algorithm takes beside its name."""


def _algorithm(reader: FieldReader, raw: Any) -> Algorithm | None:
    loc: FieldPath = ("algorithm",)
    if raw is None:
        reader.fail(loc, f"required: {{name: {' | '.join(a.value for a in AlgorithmName)}}}")
        return None
    every = sorted({key for keys in ALGORITHM_KEYS.values() for key in keys})
    body = reader.mapping(raw, loc, ("name", *every))
    if body is None:
        return None
    name = reader.choice(body, loc, "name", [a.value for a in AlgorithmName])
    if "name" not in body:
        reader.fail((*loc, "name"), f"required; one of {', '.join(a.value for a in AlgorithmName)}")
    if name is None:
        return None
    algorithm = AlgorithmName(name)
    allowed = ALGORITHM_KEYS[algorithm]
    wrong = [key for key in body if key in every and key not in allowed]
    for key in wrong:
        takes = f"takes {', '.join(allowed)}" if allowed else "takes no option"
        reader.fail((*loc, key), f"{name} {takes}; {key} belongs to {_owners(key)}")
    if wrong:
        return None
    before = len(reader.problems)
    eta = reader.integer(body, loc, "eta", minimum=2, maximum=100)
    sampler = reader.choice(body, loc, "sampler", [s.value for s in SamplerName])
    startup = reader.integer(body, loc, "startup", minimum=1, maximum=MAX_TRIALS)
    population = reader.integer(body, loc, "population", minimum=2, maximum=MAX_CONCURRENCY)
    truncation = _fraction(reader, body, loc, "truncation", high=0.5)
    resample = _fraction(reader, body, loc, "resample", high=1.0)
    if "startup" in body and algorithm is not AlgorithmName.TPE and sampler != SamplerName.TPE.value:
        reader.fail((*loc, "startup"), "only a TPE sampler has startup trials; add sampler: tpe")
    if len(reader.problems) > before:
        return None
    return Algorithm(
        algorithm,
        eta=eta or 3,
        sampler=SamplerName.TPE if algorithm is AlgorithmName.TPE else SamplerName(sampler or "random"),
        startup=startup or 10,
        population=population or 4,
        truncation=0.25 if truncation is None else truncation,
        resample=0.25 if resample is None else resample,
    )


def _owners(key: str) -> str:
    return ", ".join(a.value for a, keys in ALGORITHM_KEYS.items() if key in keys)


def _fraction(reader: FieldReader, body: dict[str, Any], loc: FieldPath, key: str, *, high: float) -> float | None:
    if key not in body:
        return None
    value = _number(reader, body, loc, key)
    if value is not None and not 0.0 < value <= high:
        reader.fail((*loc, key), f"a fraction above 0, at most {high:g}; got {value:g}")
        return None
    return value


def _budget(reader: FieldReader, raw: Any, algorithm: Algorithm | None) -> Budget | None:
    loc: FieldPath = ("budget",)
    if raw is None:
        reader.fail(loc, "required: {unit: step | epoch, min: N, max: N}")
        return None
    body = reader.mapping(raw, loc, ("unit", "min", "max"))
    if body is None:
        return None
    unit = reader.choice(body, loc, "unit", [u.value for u in BudgetUnit])
    if "unit" not in body:
        reader.fail((*loc, "unit"), "required: step or epoch")
    whole: dict[str, int] = {}
    for key in ("min", "max"):
        value = body.get(key)
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if value is None:
            if key == "max" or (algorithm is not None and algorithm.uses_rungs):
                reader.fail((*loc, key), "required")
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            what = unit or "step"
            reader.fail((*loc, key), f"a {what} budget is a whole number of {what}s, at least 1; got {describe(value)}")
            continue
        whole[key] = value
    if unit is None or "max" not in whole:
        return None
    low = whole.get("min", whole["max"])
    if low > whole["max"]:
        reader.fail((*loc, "min"), f"must not exceed max ({whole['max']}); got {low}")
        return None
    return Budget(BudgetUnit(unit), low, whole["max"])


def _trials(
    reader: FieldReader, top: dict[str, Any], algorithm: Algorithm | None, space: SearchSpace | None
) -> int | None:
    if algorithm is not None and algorithm.name is AlgorithmName.PBT:
        return _pbt_trials(reader, top, algorithm)
    grid = algorithm is not None and algorithm.name is AlgorithmName.GRID
    if grid and space is not None:
        for p in space.parameters:
            if p.type in (ParamType.UNIFORM, ParamType.LOG_UNIFORM) and p.points is None:
                reader.fail(("parameters", p.name, "points"), f"a grid needs the number of {p.type.value} points")
                return None
    size = space.grid_size() if grid and space is not None else None
    if "trials" not in top:
        if size is not None:
            if size > MAX_TRIALS:
                reader.fail(("parameters",), f"the grid has {size} points; at most {MAX_TRIALS} trials")
                return None
            return size
        reader.fail(("trials",), "required: how many configurations to try")
        return None
    trials = reader.integer(top, (), "trials", minimum=1, maximum=MAX_TRIALS)
    if trials is not None and size is not None and trials > size:
        reader.fail(("trials",), f"the grid has {size} points; got {trials} trials")
        return None
    return trials


def _pbt_trials(reader: FieldReader, top: dict[str, Any], algorithm: Algorithm) -> int | None:
    """PBT's trials are its population times its generations (one per interval of `budget.min`)."""
    budget = top.get("budget")
    low, high = (budget.get("min"), budget.get("max")) if isinstance(budget, dict) else (None, None)
    if not (isinstance(low, int) and isinstance(high, int)) or isinstance(low, bool) or low < 1 or high < low:
        return None  # the budget's own problems are reported by `_budget`
    generations = -(-high // low)
    trials = algorithm.population * generations
    if trials > MAX_TRIALS:
        reader.fail(
            ("budget", "min"),
            f"pbt runs a generation per interval of budget.min: {generations} generations of "
            f"{algorithm.population} make {trials} trials, at most {MAX_TRIALS}",
        )
        return None
    given = reader.integer(top, (), "trials", minimum=1, maximum=MAX_TRIALS)
    if given is not None and given != trials:
        reader.fail(
            ("trials",),
            f"pbt runs algorithm.population x generations (budget.max / budget.min): {trials}; got {given}",
        )
        return None
    return trials
