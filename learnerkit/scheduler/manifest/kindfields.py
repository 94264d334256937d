"""An ``evaluations:`` entry's own fields and thresholds, checked against its kind's declaration
(``learnerkit.scheduler.manifest.kinds``): each value in its JSON form, or a problem naming the field and line."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from learnerkit.common.yamlfile import FieldPath
from learnerkit.scheduler.manifest.fields import QUOTE_HINT, FieldReader, describe
from learnerkit.scheduler.manifest.kinds import EvaluatorKind, FieldRule, MetricRule

BOUND_KEYS = ("min", "max")


class _Bad:
    """A value refused (its problem recorded); None is a valid value of an optional field."""


BAD = _Bad()


def entry_fields(
    reader: FieldReader, item: Mapping[str, Any], loc: FieldPath, kind: EvaluatorKind, columns: Sequence[str]
) -> dict[str, Any]:
    """Each declared field's value (its default where absent), a field refused left out; ``columns``: the data's
    label and features, which a ``not_in_data`` column may not name."""
    found = {name: _field(reader, item, loc, rule) for name, rule in kind.fields.items()}
    for name, rule in kind.fields.items():
        value = found[name]
        if rule.not_in_data and isinstance(value, str) and value in columns:
            where = "the label" if value == columns[0] else "a feature"
            reader.fail((*loc, name), f"{value!r} is {where} too; {name} may be neither the label nor a feature")
            found[name] = BAD
    return {name: value for name, value in found.items() if value is not BAD}


def _field(reader: FieldReader, item: Mapping[str, Any], loc: FieldPath, rule: FieldRule) -> Any:
    value = item.get(rule.name)
    if rule.type == "list":
        return _list(reader, value, (*loc, rule.name), rule)
    if value is None:
        if rule.required:
            what = (f": {rule.help}" if rule.help else "") if rule.name not in item else ": got an empty value"
            reader.fail((*loc, rule.name), f"required{what}")
            return BAD
        return rule.default
    return _scalar(reader, value, (*loc, rule.name), rule)


def _scalar(reader: FieldReader, value: Any, loc: FieldPath, rule: FieldRule) -> Any:
    if rule.type in ("integer", "number"):
        return _number(reader, value, loc, rule)
    if rule.type == "value" and isinstance(value, int) and not isinstance(value, bool):
        return str(value)  # a label or group value: CSV cells are text
    if not isinstance(value, str):
        wanted = "a string or whole number" if rule.type == "value" else "a string"
        hint = f"; {QUOTE_HINT}" if isinstance(value, int | float) and not isinstance(value, bool) else ""
        reader.fail(loc, f"expected {wanted}; got {describe(value)}{hint}")
        return BAD
    text = value.strip()
    if not text:
        reader.fail(loc, "must not be empty")
        return BAD
    if rule.type == "choice" and text not in rule.values:
        reader.fail(loc, f"unknown {rule.noun} {text!r}; valid: {', '.join(rule.values)}")
        return BAD
    return text


def _number(reader: FieldReader, value: Any, loc: FieldPath, rule: FieldRule) -> Any:
    whole = rule.type == "integer"
    if isinstance(value, bool) or not isinstance(value, int if whole else int | float) or not math.isfinite(value):
        above = f" above {rule.above:g}" if rule.above is not None else ""
        reader.fail(loc, f"expected {'a whole number' if whole else 'a number'}{above}; got {describe(value)}")
        return BAD
    if rule.above is not None and value <= rule.above:
        reader.fail(loc, f"expected a number above {rule.above:g}; got {describe(value)}")
        return BAD
    if rule.minimum is not None and value < rule.minimum:
        reader.fail(loc, f"must be at least {rule.minimum:g}; got {value}")
        return BAD
    if rule.maximum is not None and value > rule.maximum:
        reader.fail(loc, f"must be at most {rule.maximum:g}; got {value}")
        return BAD
    return value if whole else float(value)


def _list(reader: FieldReader, value: Any, loc: FieldPath, rule: FieldRule) -> Any:
    assert rule.item is not None  # a list rule always has one (kinds.load_kind)
    most = f"1 to {rule.max_items} " if rule.max_items != FieldRule.max_items else ""
    what = f"a list of {most}{rule.help or 'values'}"
    if value is None and not rule.required:
        return rule.default
    if not isinstance(value, list) or not value or len(value) > rule.max_items:
        reader.fail(loc, f"{'required: ' if rule.required else 'expected '}{what}; got {describe(value)}")
        return BAD
    items = [_scalar(reader, v, (*loc, i), rule.item) for i, v in enumerate(value)]
    if any(v is BAD for v in items):
        return BAD
    if rule.unique and len(set(items)) != len(items):
        twice = next(v for i, v in enumerate(items) if v in items[:i])
        reader.fail(loc, f"{twice!r} is listed twice")
        return BAD
    return sorted(items) if rule.sorted else items


def entry_thresholds(
    reader: FieldReader, value: Any, loc: FieldPath, kind: EvaluatorKind, fields: Mapping[str, Any]
) -> Any:
    """The thresholds in their JSON form (list or mapping, as the kind declares), or None after problems;
    ``fields``: the entry's fields checked (a listed threshold names values of its list fields)."""
    if kind.thresholds.form == "bounds":
        return _bounds(reader, value, loc, kind)
    return _listed(reader, value, loc, kind, fields)


def _unknown_metric(kind: EvaluatorKind, metric: str) -> str:
    return f"unknown key {metric!r}: {kind.kind} evaluations produce no such metric; valid: {', '.join(kind.metrics)}"


def _bounds(reader: FieldReader, value: Any, loc: FieldPath, kind: EvaluatorKind) -> dict[str, Any] | None:
    if value is None:
        return {}
    if not isinstance(value, dict):
        reader.fail(loc, f"expected a mapping of metric to {{min, max}}; got {describe(value)}")
        return None
    bounds: dict[str, Any] = {}
    for metric, raw in value.items():
        rule = kind.metrics.get(metric)
        if rule is None:
            reader.fail((*loc, metric), _unknown_metric(kind, str(metric)))
            continue
        item = reader.mapping(raw, (*loc, metric), BOUND_KEYS)
        if item is None:
            continue
        sides = {side: _bound(reader, item, (*loc, metric), side, rule) for side in BOUND_KEYS if side in item}
        if any(v is BAD for v in sides.values()):
            continue
        low, high = sides.get("min"), sides.get("max")
        if low is None and high is None:
            reader.fail((*loc, metric), "give min, max or both")
            continue
        if low is not None and high is not None and low > high:
            reader.fail((*loc, metric), f"min {low:g} is above max {high:g}")
            continue
        bounds[metric] = {"min": low, "max": high}
    return bounds if len(bounds) == len(value) else None


def _bound(reader: FieldReader, item: Mapping[str, Any], loc: FieldPath, key: str, rule: MetricRule) -> Any:
    """One side of a threshold on ``rule``'s metric: a number inside the metric's range, on the side its direction
    allows (a metric better higher takes a minimum)."""
    side = key.partition("_")[0]
    value = item.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        reader.fail((*loc, key), f"expected a number; got {describe(value)}")
        return BAD
    if rule.direction != "target" and (rule.direction == "higher") != (side == "min"):
        wanted = "min" if rule.direction == "higher" else "max"
        reader.fail((*loc, key), f"{rule.name} is better {rule.direction}: its threshold is a {wanted}")
        return BAD
    low, high = rule.minimum, rule.maximum
    if (low is not None and value < low) or (high is not None and value > high):
        shown = f"between {low:g} and {high:g}" if low is not None and high is not None else _side(low, high)
        reader.fail((*loc, key), f"must be {shown}; got {value:g}")
        return BAD
    return float(value)


def _side(low: float | None, high: float | None) -> str:
    return f"at least {low:g}" if low is not None else f"at most {high:g}"


def _listed(
    reader: FieldReader, value: Any, loc: FieldPath, kind: EvaluatorKind, fields: Mapping[str, Any]
) -> list[dict[str, Any]] | None:
    rule = kind.thresholds
    keys = (*rule.at, *rule.bounds)
    if value is None:
        return []
    if not isinstance(value, list):
        reader.fail(loc, f"expected a list of {{{', '.join(keys)}}}; got {describe(value)}")
        return None
    found = []
    for i, raw in enumerate(value):
        here = (*loc, i)
        if not isinstance(raw, dict):
            reader.fail(here, f"expected a mapping with keys {', '.join(keys)}; got {describe(raw)}")
            continue
        item = raw
        for key in (k for k in item if k not in keys):
            reader.fail((*here, key), _unknown_threshold_key(kind, str(key)))
        at = {key: _at(reader, item, here, key, kind, fields) for key in rule.at}
        given = {key: _bound(reader, item, here, key, kind.metrics[m]) for key, m in rule.bounds.items() if key in item}
        if not given:
            only = next(iter(rule.bounds)) if len(rule.bounds) == 1 else None
            wanted = "required: a number" if only else f"give one of {', '.join(rule.bounds)}"
            reader.fail((*here, only) if only else here, wanted)
        if given and not any(v is BAD for v in (*at.values(), *given.values())):
            found.append({**at, **given})
    return found if len(found) == len(value) else None


def _unknown_threshold_key(kind: EvaluatorKind, key: str) -> str:
    if not key.startswith(("min_", "max_")):
        return f"unknown key {key!r}; valid keys: {', '.join((*kind.thresholds.at, *kind.thresholds.bounds))}"
    bounds = ", ".join(f"{k} ({metric})" for k, metric in kind.thresholds.bounds.items())
    return f"unknown key {key!r}: {kind.kind} evaluations produce no {key[4:]}; bounds: {bounds}"


def _at(
    reader: FieldReader,
    item: Mapping[str, Any],
    loc: FieldPath,
    key: str,
    kind: EvaluatorKind,
    fields: Mapping[str, Any],
) -> Any:
    """Where a listed threshold is measured: one of the values of the entry's list field that ``key`` names."""
    among = kind.fields[kind.thresholds.at[key]]
    assert among.item is not None  # `at` names list fields only (kinds.load_kind)
    if item.get(key) is None:
        valid = f": one of {', '.join(among.item.values)}" if among.item.values else ""
        reader.fail((*loc, key), f"required{valid}")
        return BAD
    value = _scalar(reader, item[key], (*loc, key), among.item)
    listed = fields.get(among.name)  # absent where the entry's list was refused: its problem is named
    if value is not BAD and isinstance(listed, list) and value not in listed:
        shown = ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in listed)
        label = f"{value:g}" if isinstance(value, float) else repr(value)
        reader.fail((*loc, key), f"{label} is not among this evaluation's {among.name} ({shown})")
        return BAD
    return value
