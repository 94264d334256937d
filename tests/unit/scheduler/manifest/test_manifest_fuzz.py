"""Fuzzing: no input crashes the parser; it raises only ManifestError, and each problem names a field."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from learnerkit.common.yamlfile import format_field_path
from learnerkit.scheduler.errors import ManifestError
from learnerkit.scheduler.manifest.model import JobManifest
from learnerkit.scheduler.manifest.parser import parse_manifest

VALID = (Path(__file__).parents[1] / "manifests" / "learnerkit-pytorch-ddp.yml").read_text()
VALID_DATA = yaml.safe_load(VALID)
CATALOG = {"pytorch": {"2.13", "2.13-cpu", "2.13-cuda"}, "tensorflow": {"2.21"}}
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["1Gb", "0MB", "512MiB", "s3_datastore", "mount_cos", "ddp", "pytorch", "2.13", "", "  "]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.one_of(st.text(max_size=8), st.sampled_from(["name", "id", "type", "cpus"])), inner, max_size=4
        ),
    ),
    max_leaves=12,
)


def parse_or_problems(text: str) -> JobManifest | ManifestError:
    try:
        return parse_manifest(text, catalog=CATALOG)
    except ManifestError as e:
        assert e.problems, "a ManifestError without problems"
        for problem in e.problems:
            assert str(problem).startswith(f"manifest.yml:{problem.line}: " if problem.line else "manifest.yml: ")
            assert f": {format_field_path(problem.loc)}: " in str(problem)
        return e


def paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into `data` (mapping keys and list indexes)."""
    found = [prefix]
    if isinstance(data, dict):
        for key, item in data.items():
            found.extend(paths(item, (*prefix, key)))
    elif isinstance(data, list):
        for i, item in enumerate(data):
            found.extend(paths(item, (*prefix, i)))
    return found


def mutate(data: Any, path: tuple[Any, ...], action: str, value: Any) -> Any:
    if not path:
        return value
    parent = data
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    if action == "delete":
        del parent[last]
    elif action == "add" and isinstance(parent, dict):
        parent[f"{last}_extra"] = value
    else:
        parent[last] = value
    return data


VALID_PATHS = paths(VALID_DATA)[1:]


@FUZZ
@given(st.text(max_size=200))
def test_random_text_never_crashes(text: str) -> None:
    parse_or_problems(text)


@FUZZ
@given(values)
def test_random_yaml_documents_never_crash(document: Any) -> None:
    parse_or_problems(yaml.safe_dump(document))


@FUZZ
@given(st.data(), st.sampled_from(["replace", "delete", "add"]), values)
def test_mutated_valid_manifests_are_accepted_or_refused_naming_a_field(
    data: st.DataObject, action: str, value: Any
) -> None:
    path = data.draw(st.sampled_from(VALID_PATHS))
    text = yaml.safe_dump(mutate(copy.deepcopy(VALID_DATA), path, action, value), sort_keys=False)
    outcome = parse_or_problems(text)
    if isinstance(outcome, ManifestError):
        for problem in outcome.problems:
            assert problem.loc, f"{problem} names no field for a change at {format_field_path(path)}"
            assert problem.line is not None and problem.line >= 1


@FUZZ
@given(st.lists(st.sampled_from(VALID.splitlines()), max_size=30))
def test_shuffled_lines_of_a_valid_manifest_never_crash(lines: list[str]) -> None:
    parse_or_problems("\n".join(lines) + "\n")
