"""Evaluator kinds, each declared by its evaluator's own folder (``frameworks/<name>/evaluation.yaml``).

A declaration names the kind, its command, the fields of its ``evaluations:`` entry beside ``name``, ``kind`` and
``data`` (type, range, required or optional, default), the metrics its thresholds may bound with their direction,
and the form of its thresholds. The manifest parser, the evaluation runner, verdicts, provenance and the console
read a kind from here, so a new kind of check is one folder (docs/evaluations.md, "Declaring a kind"). The
evaluator image of a kind is the image of the folder that declares it.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from learnerkit.common.errors import ConfigError
from learnerkit.common.project import find_project_root
from learnerkit.common.yamlfile import FieldPath, YamlBudget, YamlError, load_located_yaml
from learnerkit.scheduler.manifest.fields import FieldReader, describe

DECLARATION = "evaluation.yaml"
"""The file in an evaluator's folder that declares its kind."""
COMMON_KEYS = ("name", "kind", "data")
"""Every entry's own keys; a declaration may not declare them again."""
FieldType = Literal["text", "value", "column", "integer", "number", "choice", "list"]
FIELD_TYPES: tuple[FieldType, ...] = ("text", "value", "column", "integer", "number", "choice", "list")
ITEM_TYPES: tuple[FieldType, ...] = ("text", "value", "integer", "number", "choice")
Direction = Literal["higher", "lower", "target"]
DIRECTIONS: tuple[Direction, ...] = ("higher", "lower", "target")
"""``higher``: better higher (a threshold gives a minimum); ``lower``: better lower (a maximum); ``target``: best at
a value (a threshold may give both)."""
ThresholdForm = Literal["bounds", "list"]
_WORD = re.compile(r"[a-z][a-z0-9_]{0,39}")
_BOUND_KEY = re.compile(r"(min|max)_[a-z][a-z0-9_]{0,35}")
_KIND_KEYS = ("kind", "order", "description", "command", "fields", "metrics", "thresholds")
_FIELD_KEYS = (
    "type",
    "required",
    "default",
    "help",
    "min",
    "max",
    "above",
    "values",
    "noun",
    "not_in_data",
    "predictions",
    "item",
    "max_items",
    "unique",
    "sorted",
)
_METRIC_KEYS = ("direction", "min", "max", "help")
_THRESHOLD_KEYS = ("form", "at", "bounds")


@dataclass(frozen=True)
class FieldRule:
    """One field of an entry of the kind."""

    name: str
    type: FieldType
    required: bool = False
    default: Any = None
    help: str = ""
    """What the field holds, for messages (``perturbation sizes above 0``)."""
    minimum: float | None = None
    maximum: float | None = None
    above: float | None = None
    """number: the value must be more than this."""
    values: tuple[str, ...] = ()
    """choice: the values allowed."""
    noun: str = "value"
    """choice: what one value is called in messages (``unknown attack 'cw'``)."""
    not_in_data: bool = False
    """column: must not be the data's label or one of its features."""
    predictions: bool = False
    """column: predictions already made; when given, the evaluation judged them, not the model."""
    item: FieldRule | None = None
    """list: the rule of each item."""
    max_items: int = 10_000
    unique: bool = False
    sorted: bool = False


@dataclass(frozen=True)
class MetricRule:
    name: str
    direction: Direction
    minimum: float | None = None
    maximum: float | None = None
    """The metric's own range: a threshold outside it can never be met, so it is refused."""
    help: str = ""


@dataclass(frozen=True)
class ThresholdRule:
    """``bounds``: a mapping ``<metric>: {min, max}``. ``list``: items naming where the metric is measured (``at``:
    key -> the list field whose values it must name) and a bound (``bounds``: ``min_<x>``/``max_<x>`` -> metric)."""

    form: ThresholdForm
    at: Mapping[str, str] = field(default_factory=dict)
    bounds: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class EvaluatorKind:
    kind: str
    folder: Path
    """The evaluator's folder under ``frameworks/``: its image is the evaluator image of the kind."""
    command: str
    fields: Mapping[str, FieldRule]
    metrics: Mapping[str, MetricRule]
    thresholds: ThresholdRule
    description: str = ""
    order: int = 1000
    """Where the kind is listed (errors, docs); ties by name."""

    @property
    def framework(self) -> str:
        """The framework (folder) name whose image runs the kind."""
        return self.folder.name

    @property
    def predictions_field(self) -> str | None:
        return next((rule.name for rule in self.fields.values() if rule.predictions), None)


@dataclass(frozen=True)
class EvaluatorKinds:
    """Every kind the installed evaluators declare."""

    kinds: Mapping[str, EvaluatorKind]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(k.kind for k in sorted(self.kinds.values(), key=lambda k: (k.order, k.kind)))

    def get(self, kind: str) -> EvaluatorKind | None:
        return self.kinds.get(kind)

    def of_field(self, name: str) -> tuple[str, ...]:
        """The kinds that declare a field of this name (to name them when another kind's entry holds it)."""
        return tuple(kind for kind in self.names if name in self.kinds[kind].fields)

    def judged_column(self, kind: str, spec: Mapping[str, Any]) -> str | None:
        """The column of predictions an evaluation judged instead of the model (its spec's JSON), or None."""
        declared = self.kinds.get(kind)
        column = declared.predictions_field if declared is not None else None
        value = spec.get(column) if column is not None else None
        return None if value is None else str(value)


def load_kinds(root: Path) -> EvaluatorKinds:
    """The kinds declared under ``root/frameworks``; ``ConfigError`` naming the file and line of every problem."""
    kinds: dict[str, EvaluatorKind] = {}
    problems: list[str] = []
    for path in sorted((root / "frameworks").glob(f"*/{DECLARATION}")):
        try:
            declared = load_kind(path)
        except ConfigError as e:
            problems.append(str(e))
            continue
        if declared.kind in kinds:
            problems.append(f"{path}: kind {declared.kind!r} is declared by {kinds[declared.kind].folder} too")
            continue
        kinds[declared.kind] = declared
    if problems:
        raise ConfigError("\n".join(problems))
    return EvaluatorKinds(kinds)


@functools.cache
def _installed(root: Path) -> EvaluatorKinds:
    return load_kinds(root)


def installed_kinds(root: Path | None = None) -> EvaluatorKinds:
    """The kinds of the project's evaluators (``find_project_root``), read once per project folder."""
    return _installed(find_project_root(root))


def load_kind(path: Path) -> EvaluatorKind:
    try:
        doc = load_located_yaml(path, YamlBudget(max_nodes=10_000))
    except YamlError as e:
        raise ConfigError("\n".join(str(p) for p in e.problems)) from e
    reader = FieldReader(doc)
    top = reader.mapping(doc.data, (), _KIND_KEYS)
    if top is None:
        raise ConfigError("\n".join(str(p) for p in reader.problems))
    kind = reader.string(top, (), "kind", required=True, pattern=_WORD, pattern_help="a lower-case word")
    command = reader.string(top, (), "command", required=True)
    order = reader.integer(top, (), "order", minimum=0)
    description = reader.string(top, (), "description") or ""
    fields = _fields(reader, top.get("fields"), ("fields",))
    metrics = _metrics(reader, top.get("metrics"), ("metrics",))
    thresholds = _threshold_rule(reader, top.get("thresholds"), ("thresholds",), fields, metrics)
    if reader.problems or kind is None or command is None or thresholds is None:
        raise ConfigError("\n".join(str(p) for p in reader.problems))
    return EvaluatorKind(
        kind, path.parent, command, fields, metrics, thresholds, description, 1000 if order is None else order
    )


def _fields(reader: FieldReader, value: Any, loc: FieldPath) -> dict[str, FieldRule]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        reader.fail(loc, f"expected a mapping of field name to its rule; got {describe(value)}")
        return {}
    found = {}
    for name, raw in value.items():
        if name in (*COMMON_KEYS, "thresholds") or not isinstance(name, str) or not _WORD.fullmatch(name):
            reader.fail((*loc, name), f"{name!r}: a lower-case word, not {', '.join(COMMON_KEYS)} or thresholds")
            continue
        rule = _field_rule(reader, raw, (*loc, name), name, FIELD_TYPES)
        if rule is not None:
            found[name] = rule
    return found


def _field_rule(
    reader: FieldReader, raw: Any, loc: FieldPath, name: str, types: tuple[FieldType, ...]
) -> FieldRule | None:
    item = reader.mapping(raw, loc, _FIELD_KEYS)
    if item is None:
        return None
    named = reader.choice(item, loc, "type", types)
    kind = next((t for t in types if t == named), None)
    if kind is None:
        if item.get("type") is None:
            reader.fail((*loc, "type"), f"required: one of {', '.join(types)}")
        return None
    bounds = {key: _declared_number(reader, item, loc, key) for key in ("min", "max", "above")}
    values = item.get("values")
    if kind == "choice" and (not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values)):
        reader.fail((*loc, "values"), f"a choice needs a list of the values it allows; got {describe(values)}")
        return None
    inner = None
    if kind == "list":
        if item.get("item") is None:
            reader.fail((*loc, "item"), f"required: the rule of each item (type one of {', '.join(ITEM_TYPES)})")
            return None
        inner = _field_rule(reader, item["item"], (*loc, "item"), name, ITEM_TYPES)
        if inner is None:
            return None
    if item.get("default") is not None:
        reader.json_value(item["default"], (*loc, "default"))
    flags = {key: reader.boolean(item, loc, key) or False for key in ("required", "not_in_data", "predictions")}
    return FieldRule(
        name=name,
        type=kind,
        required=flags["required"],
        default=item.get("default"),
        help=reader.string(item, loc, "help") or "",
        minimum=bounds["min"],
        maximum=bounds["max"],
        above=bounds["above"],
        values=tuple(values) if kind == "choice" and isinstance(values, list) else (),
        noun=reader.string(item, loc, "noun") or "value",
        not_in_data=flags["not_in_data"],
        predictions=flags["predictions"],
        item=inner,
        max_items=reader.integer(item, loc, "max_items", minimum=1) or FieldRule.max_items,
        unique=reader.boolean(item, loc, "unique") or False,
        sorted=reader.boolean(item, loc, "sorted") or False,
    )


def _declared_number(reader: FieldReader, item: Mapping[str, Any], loc: FieldPath, key: str) -> float | None:
    value = item.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        reader.fail((*loc, key), f"expected a number; got {describe(value)}")
        return None
    return float(value)


def _metrics(reader: FieldReader, value: Any, loc: FieldPath) -> dict[str, MetricRule]:
    if not isinstance(value, dict) or not value:
        reader.fail(loc, f"required: a mapping of each metric a threshold may bound to its rule; got {describe(value)}")
        return {}
    found = {}
    for name, raw in value.items():
        if not isinstance(name, str) or not _WORD.fullmatch(name):
            reader.fail((*loc, name), f"{name!r}: a metric's name is a lower-case word")
            continue
        item = reader.mapping(raw, (*loc, name), _METRIC_KEYS)
        if item is None:
            continue
        named = reader.choice(item, (*loc, name), "direction", DIRECTIONS)
        direction = next((d for d in DIRECTIONS if d == named), None)
        if direction is None:
            if item.get("direction") is None:
                reader.fail((*loc, name, "direction"), f"required: one of {', '.join(DIRECTIONS)}")
            continue
        found[name] = MetricRule(
            name,
            direction,
            _declared_number(reader, item, (*loc, name), "min"),
            _declared_number(reader, item, (*loc, name), "max"),
            reader.string(item, (*loc, name), "help") or "",
        )
    return found


def _threshold_rule(
    reader: FieldReader,
    value: Any,
    loc: FieldPath,
    fields: Mapping[str, FieldRule],
    metrics: Mapping[str, MetricRule],
) -> ThresholdRule | None:
    item = reader.mapping(value, loc, _THRESHOLD_KEYS)
    if item is None:
        return None
    form = reader.choice(item, loc, "form", ("bounds", "list"))
    if form is None:
        if item.get("form") is None:
            reader.fail((*loc, "form"), "required: bounds (a mapping metric -> {min, max}) or list")
        return None
    if form == "bounds":
        for key in ("at", "bounds"):
            if item.get(key) is not None:
                reader.fail((*loc, key), "only a threshold of form list has it")
        return ThresholdRule("bounds")
    at = item.get("at") or {}
    bounds = item.get("bounds")
    ok = isinstance(at, dict) and isinstance(bounds, dict) and bool(bounds)
    if not ok:
        reader.fail(loc, "a threshold of form list needs at (key -> a list field) and bounds (min_/max_ key -> metric)")
        return None
    assert isinstance(at, dict) and isinstance(bounds, dict)  # narrowed by ok
    for key, among in at.items():
        rule = fields.get(among) if isinstance(among, str) else None
        if rule is None or rule.type != "list":
            reader.fail((*loc, "at", key), f"{among!r} is not a list field of this kind")
    for key, metric in bounds.items():
        found = _BOUND_KEY.fullmatch(key) if isinstance(key, str) else None
        if found is None:
            reader.fail((*loc, "bounds", key), f"{key!r}: a bound's key is min_<word> or max_<word>")
        elif metric not in metrics:
            reader.fail((*loc, "bounds", key), f"{metric!r} is not among this kind's metrics")
        elif not _side_allowed(metrics[metric].direction, found.group(1)):
            better = metrics[metric].direction
            reader.fail((*loc, "bounds", key), f"{metric} is better {better}: a threshold is not its {found.group(1)}")
    return ThresholdRule("list", dict(at), dict(bounds))


def _side_allowed(direction: Direction, side: str) -> bool:
    return direction == "target" or (direction == "higher") == (side == "min")
