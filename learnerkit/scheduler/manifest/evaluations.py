"""The manifest's ``evaluations:`` section (a learnerkit extension beside FfDL's fields; docs/evaluations.md).

Each entry becomes a typed ``RobustnessSpec`` or ``FairnessSpec`` (``learner.evaluation.spec``: the evaluator
images read the same types). Every value is checked for its type and range and every problem names its field and
line; nothing is evaluated, so a value that looks like code stays a string. ``job submit`` and ``job validate``
read the section through the manifest parser; ``job evaluate`` reads a file holding only this section.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from learner.evaluation.spec import (
    ATTACKS,
    FAIRNESS_METRICS,
    Bound,
    EvaluationData,
    EvaluationSpec,
    FairnessSpec,
    RobustnessSpec,
    RobustnessThreshold,
)
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
from learnerkit.scheduler.errors import ManifestError
from learnerkit.scheduler.manifest.fields import FieldReader, describe

SECTION = "evaluations"
KINDS = ("robustness", "fairness")
COMMON_KEYS = ("name", "kind", "data")
ROBUSTNESS_KEYS = (*COMMON_KEYS, "attacks", "epsilons", "pgd_steps", "thresholds")
FAIRNESS_KEYS = (
    *COMMON_KEYS,
    "protected_attribute",
    "privileged_groups",
    "favourable_label",
    "prediction",
    "thresholds",
)
DATA_KEYS = ("store", "container", "file", "label", "features")
ROBUSTNESS_THRESHOLD_KEYS = ("attack", "epsilon", "min_accuracy")
BOUND_KEYS = ("min", "max")
MAX_EVALUATIONS = 16
MAX_EPSILONS = 32
MAX_PGD_STEPS = 1000
MAX_FEATURES = 10_000
_NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?")
_NAME_HELP = "lower-case letters, digits and '-', at most 40, starting and ending with a letter or digit"
_FILE_HELP = "a relative path of the CSV below the container, without '.' or '..' parts"


def parse_evaluations(
    reader: FieldReader, value: Any, store_ids: Collection[str] | None, loc: FieldPath = (SECTION,)
) -> tuple[EvaluationSpec, ...] | None:
    """The section's specs, or None after recording problems; ``store_ids`` None skips the store check."""
    if value is None:
        return ()
    if not isinstance(value, list) or not value:
        reader.fail(loc, f"expected a list of evaluations (each with name, kind, data); got {describe(value)}")
        return None
    if len(value) > MAX_EVALUATIONS:
        reader.fail(loc, f"at most {MAX_EVALUATIONS} evaluations; got {len(value)}")
        return None
    specs = [_evaluation(reader, item, (*loc, i), store_ids) for i, item in enumerate(value)]
    seen: dict[str, int] = {}
    for i, spec in enumerate(specs):
        if spec is not None and spec.name in seen:
            reader.fail(
                (*loc, i, "name"), f"duplicate evaluation name {spec.name!r} (first at {SECTION}[{seen[spec.name]}])"
            )
        if spec is not None:
            seen.setdefault(spec.name, i)
    if any(spec is None for spec in specs):
        return None
    return tuple(spec for spec in specs if spec is not None)


def load_evaluations(path: Path, store_ids: Collection[str] | None = None) -> tuple[EvaluationSpec, ...]:
    """A file holding only ``evaluations:`` (``job evaluate``); raises ``ManifestError`` listing every problem."""
    try:
        doc = load_located_yaml(path, YamlBudget(max_nodes=10_000))
    except YamlError as e:
        raise ManifestError(list(e.problems)) from e
    except ConfigError as e:
        raise ManifestError([Problem(path=path, line=None, loc=(), message=str(e))]) from e
    return evaluations_document(doc, store_ids)


def parse_evaluations_text(
    text: str, source: str, store_ids: Collection[str] | None = None
) -> tuple[EvaluationSpec, ...]:
    """``load_evaluations`` of a file's text (``job evaluate`` through the API)."""
    path = Path(source)
    try:
        doc = parse_located_yaml(text, path, YamlBudget(max_nodes=10_000))
    except YamlError as e:
        raise ManifestError(list(e.problems)) from e
    except ConfigError as e:
        raise ManifestError([Problem(path=path, line=None, loc=(), message=str(e))]) from e
    return evaluations_document(doc, store_ids)


def evaluations_document(doc: LocatedYaml, store_ids: Collection[str] | None) -> tuple[EvaluationSpec, ...]:
    reader = FieldReader(doc)
    top = reader.mapping(doc.data, (), (SECTION,)) if doc.data is not None else None
    if top is None:
        if doc.data is None:
            reader.fail((), f"the file is empty: expected a mapping with the key {SECTION}")
        raise ManifestError(reader.problems)
    if top.get(SECTION) is None:
        reader.fail((SECTION,), "required: a list of evaluations")
    specs = parse_evaluations(reader, top.get(SECTION), store_ids)
    if reader.problems or specs is None:
        raise ManifestError(reader.problems)
    return specs


def _evaluation(
    reader: FieldReader, value: Any, loc: FieldPath, store_ids: Collection[str] | None
) -> EvaluationSpec | None:
    if not isinstance(value, dict):
        reader.fail(loc, f"expected a mapping with keys {', '.join(COMMON_KEYS)}, ...; got {describe(value)}")
        return None
    kind = reader.choice(value, loc, "kind", KINDS)
    if kind is None:
        if value.get("kind") is None:
            reader.fail((*loc, "kind"), f"required: one of {', '.join(KINDS)}")
        return None
    item = reader.mapping(value, loc, ROBUSTNESS_KEYS if kind == "robustness" else FAIRNESS_KEYS)
    if item is None:
        return None
    name = reader.string(item, loc, "name", required=True, pattern=_NAME, pattern_help=_NAME_HELP)
    data = _data(reader, item.get("data"), (*loc, "data"), store_ids)
    if kind == "robustness":
        return _robustness(reader, item, loc, name, data)
    return _fairness(reader, item, loc, name, data)


def _data(reader: FieldReader, value: Any, loc: FieldPath, store_ids: Collection[str] | None) -> EvaluationData | None:
    if value is None:
        reader.fail(loc, "required: the evaluation data (file, label, features, store, container)")
        return None
    item = reader.mapping(value, loc, DATA_KEYS)
    if item is None:
        return None
    store = reader.string(item, loc, "store")
    if store is not None and store_ids is not None and store not in store_ids:
        known = ", ".join(sorted(store_ids)) or "none"
        reader.fail((*loc, "store"), f"no data store has the id {store!r}; data_stores ids: {known}")
    container = reader.string(item, loc, "container")
    if container is not None and any(part in (".", "..", "") for part in container.split("/")):
        reader.fail((*loc, "container"), f"{container!r}: empty, '.' and '..' parts are not allowed in a bucket path")
        container = None
    file = reader.string(item, loc, "file", required=True)
    if file is not None and (file.startswith("/") or any(p in (".", "..", "") for p in file.split("/"))):
        reader.fail((*loc, "file"), f"{file!r} is not valid: {_FILE_HELP}")
        file = None
    label = _column(reader, item, loc, "label", required=True)
    features = _columns(reader, item, loc, "features")
    if file is None or label is None or features is None:
        return None
    return EvaluationData(file=file, label=label, features=features, store=store, container=container)


def _column(reader: FieldReader, item: Mapping[str, Any], loc: FieldPath, key: str, *, required: bool) -> str | None:
    return reader.string(item, loc, key, required=required)


def _columns(reader: FieldReader, item: Mapping[str, Any], loc: FieldPath, key: str) -> tuple[str, ...] | None:
    value = item.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not value or len(value) > MAX_FEATURES:
        reader.fail((*loc, key), f"expected a list of 1 to {MAX_FEATURES} column names; got {describe(value)}")
        return None
    names = [_text_item(reader, item, (*loc, key, i)) for i, item in enumerate(value)]
    if any(name is None for name in names):
        return None
    return tuple(name for name in names if name is not None)


def _text_item(reader: FieldReader, value: Any, loc: FieldPath, *, numbers: bool = False) -> str | None:
    """One list item that must be a non-blank string (``numbers``: or a whole number, kept as text)."""
    if numbers and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str) or not value.strip():
        reader.fail(loc, f"expected a {'string or whole number' if numbers else 'string'}; got {describe(value)}")
        return None
    return value.strip()


def _robustness(
    reader: FieldReader, item: Mapping[str, Any], loc: FieldPath, name: str | None, data: EvaluationData | None
) -> RobustnessSpec | None:
    attacks = _attacks(reader, item.get("attacks"), (*loc, "attacks"))
    epsilons = _epsilons(reader, item.get("epsilons"), (*loc, "epsilons"))
    pgd_steps = reader.integer(item, loc, "pgd_steps", minimum=1, maximum=MAX_PGD_STEPS)
    thresholds = _robustness_thresholds(reader, item.get("thresholds"), (*loc, "thresholds"), attacks, epsilons)
    if name is None or data is None or attacks is None or epsilons is None or thresholds is None:
        return None
    return RobustnessSpec(
        name=name,
        data=data,
        attacks=attacks,
        epsilons=epsilons,
        thresholds=thresholds,
        pgd_steps=pgd_steps or RobustnessSpec.pgd_steps,
    )


def _attacks(reader: FieldReader, value: Any, loc: FieldPath) -> tuple[str, ...] | None:
    if not isinstance(value, list) or not value:
        reader.fail(loc, f"required: a list of attacks from {', '.join(ATTACKS)}; got {describe(value)}")
        return None
    attacks = [_text_item(reader, item, (*loc, i)) for i, item in enumerate(value)]
    for i, attack in enumerate(attacks):
        if attack is not None and attack not in ATTACKS:
            reader.fail((*loc, i), f"unknown attack {attack!r}; valid: {', '.join(ATTACKS)}")
            attacks[i] = None
    if any(a is None for a in attacks):
        return None
    unique = tuple(dict.fromkeys(a for a in attacks if a is not None))
    if len(unique) != len(attacks):
        reader.fail(loc, "an attack is listed twice")
        return None
    return unique


def _epsilons(reader: FieldReader, value: Any, loc: FieldPath) -> tuple[float, ...] | None:
    if not isinstance(value, list) or not value or len(value) > MAX_EPSILONS:
        reader.fail(loc, f"required: a list of 1 to {MAX_EPSILONS} perturbation sizes above 0; got {describe(value)}")
        return None
    numbers = [_epsilon(reader, item, (*loc, i)) for i, item in enumerate(value)]
    if any(n is None for n in numbers):
        return None
    epsilons = sorted(n for n in numbers if n is not None)
    if len(set(epsilons)) != len(epsilons):
        reader.fail(loc, "an epsilon is listed twice")
        return None
    return tuple(epsilons)


def _epsilon(reader: FieldReader, value: Any, loc: FieldPath) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        reader.fail(loc, f"expected a number above 0; got {describe(value)}")
        return None
    return float(value)


def _robustness_thresholds(
    reader: FieldReader,
    value: Any,
    loc: FieldPath,
    attacks: tuple[str, ...] | None,
    epsilons: tuple[float, ...] | None,
) -> tuple[RobustnessThreshold, ...] | None:
    if value is None:
        return ()
    if not isinstance(value, list):
        reader.fail(loc, f"expected a list of {{attack, epsilon, min_accuracy}}; got {describe(value)}")
        return None
    found = []
    for i, raw in enumerate(value):
        here = (*loc, i)
        item = reader.mapping(raw, here, ROBUSTNESS_THRESHOLD_KEYS)
        if item is None:
            continue
        attack = reader.choice(item, here, "attack", ATTACKS)
        if attack is None and item.get("attack") is None:
            reader.fail((*here, "attack"), f"required: one of {', '.join(ATTACKS)}")
        if attack is not None and attacks is not None and attack not in attacks:
            reader.fail((*here, "attack"), f"{attack!r} is not among this evaluation's attacks ({', '.join(attacks)})")
            attack = None
        epsilon = reader.positive_number(item, here, "epsilon", required=True)
        if epsilon is not None and epsilons is not None and epsilon not in epsilons:
            shown = ", ".join(f"{e:g}" for e in epsilons)
            reader.fail((*here, "epsilon"), f"{epsilon:g} is not among this evaluation's epsilons ({shown})")
            epsilon = None
        accuracy = _fraction(reader, item, here, "min_accuracy", required=True)
        if attack is not None and epsilon is not None and accuracy is not None:
            found.append(RobustnessThreshold(attack, epsilon, accuracy))
    return tuple(found) if len(found) == len(value) else None


def _fraction(
    reader: FieldReader, item: Mapping[str, Any], loc: FieldPath, key: str, *, required: bool
) -> float | None:
    number = _number(reader, item, loc, key, required=required)
    if number is not None and not 0.0 <= number <= 1.0:
        reader.fail((*loc, key), f"must be between 0 and 1; got {number:g}")
        return None
    return number


def _number(reader: FieldReader, item: Mapping[str, Any], loc: FieldPath, key: str, *, required: bool) -> float | None:
    value = item.get(key)
    if value is None:
        if required:
            reader.fail((*loc, key), "required: a number")
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        reader.fail((*loc, key), f"expected a number; got {describe(value)}")
        return None
    return float(value)


def _fairness(
    reader: FieldReader, item: Mapping[str, Any], loc: FieldPath, name: str | None, data: EvaluationData | None
) -> FairnessSpec | None:
    attribute = reader.string(item, loc, "protected_attribute", required=True)
    groups = _values(reader, item.get("privileged_groups"), (*loc, "privileged_groups"))
    favourable = _value(reader, item, loc, "favourable_label")
    prediction = reader.string(item, loc, "prediction")
    thresholds = _bounds(reader, item.get("thresholds"), (*loc, "thresholds"))
    if data is not None and attribute is not None and attribute in (data.label, *data.features):
        where = "the label" if attribute == data.label else "a feature"
        reader.fail((*loc, "protected_attribute"), f"{attribute!r} is {where} too; name the group column only here")
        attribute = None
    if None in (name, data, attribute, groups, favourable, thresholds):
        return None
    assert name is not None and data is not None and attribute is not None  # narrowed above
    assert groups is not None and favourable is not None and thresholds is not None
    return FairnessSpec(
        name=name,
        data=data,
        protected_attribute=attribute,
        privileged_groups=groups,
        favourable_label=favourable,
        prediction=prediction,
        thresholds=thresholds,
    )


def _value(reader: FieldReader, item: Mapping[str, Any], loc: FieldPath, key: str) -> str | None:
    """A label or group value: a string or a whole number, kept as text (CSV cells are text)."""
    value = item.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return reader.string(item, loc, key, required=True)


def _values(reader: FieldReader, value: Any, loc: FieldPath) -> tuple[str, ...] | None:
    if not isinstance(value, list) or not value:
        reader.fail(loc, f"required: a list of the protected attribute's privileged values; got {describe(value)}")
        return None
    values = [_text_item(reader, item, (*loc, i), numbers=True) for i, item in enumerate(value)]
    if any(v is None for v in values):
        return None
    return tuple(v for v in values if v is not None)


def _bounds(reader: FieldReader, value: Any, loc: FieldPath) -> dict[str, Bound] | None:
    if value is None:
        return {}
    section = reader.mapping(value, loc, FAIRNESS_METRICS)
    if section is None:
        return None
    bounds: dict[str, Bound] = {}
    for metric, raw in section.items():
        if metric not in FAIRNESS_METRICS:
            continue
        item = reader.mapping(raw, (*loc, metric), BOUND_KEYS)
        if item is None:
            continue
        low = _number(reader, item, (*loc, metric), "min", required=False)
        high = _number(reader, item, (*loc, metric), "max", required=False)
        if low is None and high is None:
            if item.get("min") is None and item.get("max") is None:
                reader.fail((*loc, metric), "give min, max or both")
            continue
        if low is not None and high is not None and low > high:
            reader.fail((*loc, metric), f"min {low:g} is above max {high:g}")
            continue
        bounds[metric] = Bound(low, high)
    return bounds if len(bounds) == len(section) else None
