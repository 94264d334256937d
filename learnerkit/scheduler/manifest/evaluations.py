"""The manifest's ``evaluations:`` section (a learnerkit extension beside FfDL's fields; docs/evaluations.md).

Each entry is checked against the kind its ``kind`` names, as the evaluator's folder declares it
(``learnerkit.scheduler.manifest.kinds``; ``frameworks/<name>/evaluation.yaml``), and becomes the spec the evaluator
reads back (``learner.evaluation.spec``). Every value is checked for its type and range and every problem names its
field and line; nothing is evaluated, so a value that looks like code stays a string. ``job submit`` and
``job validate`` read the section through the manifest parser; ``job evaluate`` reads a file holding only this
section.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from learner.evaluation.spec import EvaluationData, EvaluationSpec, SpecError, spec_from_dict
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
from learnerkit.scheduler.manifest.kindfields import entry_fields, entry_thresholds
from learnerkit.scheduler.manifest.kinds import COMMON_KEYS, DECLARATION, EvaluatorKind, EvaluatorKinds, installed_kinds

SECTION = "evaluations"
DATA_KEYS = ("store", "container", "file", "label", "features")
MAX_EVALUATIONS = 16
MAX_FEATURES = 10_000
_NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?")
_NAME_HELP = "lower-case letters, digits and '-', at most 40, starting and ending with a letter or digit"
_FILE_HELP = "a relative path of the CSV below the container, without '.' or '..' parts"


def parse_evaluations(
    reader: FieldReader,
    value: Any,
    store_ids: Collection[str] | None,
    loc: FieldPath = (SECTION,),
    kinds: EvaluatorKinds | None = None,
) -> tuple[EvaluationSpec, ...] | None:
    """The section's specs, or None after recording problems; ``store_ids`` None skips the store check; ``kinds``
    None: the kinds the project's evaluators declare (``installed_kinds``)."""
    if value is None:
        return ()
    if not isinstance(value, list) or not value:
        reader.fail(loc, f"expected a list of evaluations (each with name, kind, data); got {describe(value)}")
        return None
    if len(value) > MAX_EVALUATIONS:
        reader.fail(loc, f"at most {MAX_EVALUATIONS} evaluations; got {len(value)}")
        return None
    declared = kinds if kinds is not None else installed_kinds()
    specs = [_evaluation(reader, item, (*loc, i), store_ids, declared) for i, item in enumerate(value)]
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


def load_evaluations(
    path: Path, store_ids: Collection[str] | None = None, kinds: EvaluatorKinds | None = None
) -> tuple[EvaluationSpec, ...]:
    """A file holding only ``evaluations:`` (``job evaluate``); raises ``ManifestError`` listing every problem."""
    try:
        doc = load_located_yaml(path, YamlBudget(max_nodes=10_000))
    except YamlError as e:
        raise ManifestError(list(e.problems)) from e
    except ConfigError as e:
        raise ManifestError([Problem(path=path, line=None, loc=(), message=str(e))]) from e
    return evaluations_document(doc, store_ids, kinds)


def parse_evaluations_text(
    text: str, source: str, store_ids: Collection[str] | None = None, kinds: EvaluatorKinds | None = None
) -> tuple[EvaluationSpec, ...]:
    """``load_evaluations`` of a file's text (``job evaluate`` through the API)."""
    path = Path(source)
    try:
        doc = parse_located_yaml(text, path, YamlBudget(max_nodes=10_000))
    except YamlError as e:
        raise ManifestError(list(e.problems)) from e
    except ConfigError as e:
        raise ManifestError([Problem(path=path, line=None, loc=(), message=str(e))]) from e
    return evaluations_document(doc, store_ids, kinds)


def evaluations_document(
    doc: LocatedYaml, store_ids: Collection[str] | None, kinds: EvaluatorKinds | None = None
) -> tuple[EvaluationSpec, ...]:
    reader = FieldReader(doc)
    top = reader.mapping(doc.data, (), (SECTION,)) if doc.data is not None else None
    if top is None:
        if doc.data is None:
            reader.fail((), f"the file is empty: expected a mapping with the key {SECTION}")
        raise ManifestError(reader.problems)
    if top.get(SECTION) is None:
        reader.fail((SECTION,), "required: a list of evaluations")
    specs = parse_evaluations(reader, top.get(SECTION), store_ids, kinds=kinds)
    if reader.problems or specs is None:
        raise ManifestError(reader.problems)
    return specs


def _evaluation(
    reader: FieldReader, value: Any, loc: FieldPath, store_ids: Collection[str] | None, kinds: EvaluatorKinds
) -> EvaluationSpec | None:
    if not isinstance(value, dict):
        reader.fail(loc, f"expected a mapping with keys {', '.join(COMMON_KEYS)}, ...; got {describe(value)}")
        return None
    declared = _kind(reader, value, loc, kinds)
    if declared is None:
        return None
    item = _entry_keys(reader, value, loc, declared, kinds)
    name = reader.string(item, loc, "name", required=True, pattern=_NAME, pattern_help=_NAME_HELP)
    data = _data(reader, item.get("data"), (*loc, "data"), store_ids)
    columns = () if data is None else (data.label, *data.features)
    fields = entry_fields(reader, item, loc, declared, columns)
    thresholds = entry_thresholds(reader, item.get("thresholds"), (*loc, "thresholds"), declared, fields)
    if name is None or data is None or len(fields) != len(declared.fields) or thresholds is None:
        return None
    raw = {"kind": declared.kind, "name": name, "data": _data_dict(data), **fields, "thresholds": thresholds}
    try:
        return spec_from_dict(raw, known=(declared.kind,))
    except SpecError as e:  # the evaluator's typed spec refuses what its declaration let through
        reader.fail(loc, f"{e} (check {declared.folder / DECLARATION})")
        return None


def _kind(reader: FieldReader, value: Mapping[str, Any], loc: FieldPath, kinds: EvaluatorKinds) -> EvaluatorKind | None:
    """The entry's kind, or a problem listing the kinds the installed evaluators declare."""
    listed = ", ".join(kinds.names) or "none (no frameworks/*/evaluation.yaml)"
    kind = reader.string(value, loc, "kind")
    if kind is None:
        if value.get("kind") is None:
            reader.fail((*loc, "kind"), f"required: one of {listed}")
        return None
    declared = kinds.get(kind)
    if declared is None:
        reader.fail((*loc, "kind"), f"unknown value {kind!r}; valid: {listed} (the installed evaluators' kinds)")
    return declared


def _entry_keys(
    reader: FieldReader, value: dict[str, Any], loc: FieldPath, declared: EvaluatorKind, kinds: EvaluatorKinds
) -> dict[str, Any]:
    """The entry; a key the kind does not declare is a problem, naming the kinds whose field it is."""
    keys = (*COMMON_KEYS, *declared.fields, "thresholds")
    for key in value:
        if key in keys:
            continue
        others = kinds.of_field(str(key))
        whose = f"; it is a field of {' and '.join(others)} evaluations" if others else ""
        reader.fail((*loc, key), f"unknown key {key!r} for kind {declared.kind}{whose}; valid keys: {', '.join(keys)}")
    return value


def _data_dict(data: EvaluationData) -> dict[str, Any]:
    return {
        "file": data.file,
        "label": data.label,
        "features": list(data.features),
        "store": data.store,
        "container": data.container,
    }


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


def _text_item(reader: FieldReader, value: Any, loc: FieldPath) -> str | None:
    """One list item that must be a non-blank string."""
    if not isinstance(value, str) or not value.strip():
        reader.fail(loc, f"expected a string; got {describe(value)}")
        return None
    return value.strip()
