"""What the Compare page shows of 2 to 50 jobs: the job ids its address names, each job's facts as flat
``key -> text`` sections (manifest, parameters, images, data, provenance, evaluation), and the rows where the jobs
differ. Plain data worked out here, so the template only lays it out."""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

MAX_JOBS = 50
"""What the page compares at most: 50 curves on one chart are still told apart by their legend."""
MIN_JOBS = 2
ABSENT = "—"
"""A job that has no such key (a parameter of another sweep, a data object it did not read)."""
SECTIONS = ("Manifest", "Parameters", "Images", "Data", "Provenance", "Evaluation")
PROVENANCE_FILE = "provenance/provenance.intoto.json"
"""The job's signed provenance, below its prefix in its results store (docs/provenance.md)."""
IMAGE_DEPENDENCIES = ("learner-image", "sidecar-image")
MODEL_CODE = "model/model.zip"
_SEPARATORS = re.compile(r"[\s,]+")


class TooManyJobs(ValueError):
    pass


def job_ids(values: Sequence[str]) -> list[str]:
    """The job ids of ``?jobs=a,b&jobs=c`` in order, each once; `TooManyJobs` past `MAX_JOBS`."""
    found: dict[str, None] = {}
    for value in values:
        for job_id in _SEPARATORS.split(value):
            if job_id:
                found[job_id] = None
    if len(found) > MAX_JOBS:
        raise TooManyJobs(f"Compare shows at most {MAX_JOBS} jobs; the address names {len(found)}. Remove some.")
    return list(found)


def flatten(value: Any, prefix: str = "") -> dict[str, str]:
    """A YAML or JSON document as ``dotted.key[index] -> text``: nested mappings joined by dots, list items by their
    index; scalars as JSON writes them (``true``, ``0.01``, ``null``) but strings as they are."""
    if isinstance(value, Mapping):
        if not value:
            return {prefix: "{}"} if prefix else {}
        flat: dict[str, str] = {}
        for key, item in value.items():
            flat.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    if isinstance(value, list | tuple):
        if not value:
            return {prefix: "[]"} if prefix else {}
        flat = {}
        for index, item in enumerate(value):
            flat.update(flatten(item, f"{prefix}[{index}]"))
        return flat
    return {prefix: text(value)}


def text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


@dataclass(frozen=True)
class Provenance:
    """What the compare shows of a job's provenance envelope, read as stored (the trust panel verifies it)."""

    statement: Mapping[str, Any]
    key_ids: tuple[str, ...]
    """The key ids its signatures name; empty: unsigned."""


def read_envelope(raw: bytes) -> Provenance:
    """A DSSE envelope's statement and signatures' key ids; `ValueError` saying what is wrong with it."""
    try:
        envelope = json.loads(raw)
        payload = base64.b64decode(envelope["payload"], validate=True)
        statement = _mapping(json.loads(payload))
        signatures = envelope.get("signatures") or []
        key_ids = tuple(str(s.get("keyid", "")) for s in signatures if s.get("sig"))
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as e:
        raise ValueError(f"{PROVENANCE_FILE} is not a DSSE envelope of a statement: {e}") from e
    return Provenance(statement, key_ids)


def _mapping(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"its payload is {type(value).__name__}, not a statement")
    return value


def provenance_sections(provenance: Provenance) -> dict[str, dict[str, str]]:
    """The Images, Data and Provenance sections from a job's provenance statement."""
    statement = provenance.statement
    predicate = statement.get("predicate") or {}
    build = predicate.get("buildDefinition") or {}
    images: dict[str, str] = {}
    data: dict[str, str] = {}
    for dependency in build.get("resolvedDependencies") or []:
        name = str(dependency.get("name", ""))
        digest = (dependency.get("digest") or {}).get("sha256")
        shown = f"sha256:{digest}" if digest else ABSENT
        if name in IMAGE_DEPENDENCIES:
            images[name] = shown
            images[f"{name} reference"] = str(dependency.get("uri", "")).removeprefix("docker-image://")
        elif name.startswith("data:") or name == MODEL_CODE:
            data[name.removeprefix("data:")] = shown
    internal = build.get("internalParameters") or {}
    signed = "yes" if provenance.key_ids else "no"
    facts = {
        "signed": signed,
        "key id": ", ".join(provenance.key_ids) or ABSENT,
        "subjects": str(len(statement.get("subject") or [])),
        "complete": text(internal.get("complete", ABSENT)),
        "ended": str(internal.get("status", ABSENT)),
    }
    return {"Images": images, "Data": data, "Provenance": facts}


@dataclass(frozen=True)
class JobFacts:
    job_id: str
    name: str
    status: str
    sections: Mapping[str, Mapping[str, str]]
    """Section title (one of `SECTIONS`) -> key -> value; a section missing or empty: the job has none."""
    notes: Mapping[str, str] = field(default_factory=dict)
    """Section title -> why the job has nothing there (no provenance yet, not a trial)."""


@dataclass(frozen=True)
class Row:
    key: str
    values: tuple[str, ...]
    """One per job, in the page's order; `ABSENT` where the job has no such key."""
    differs: bool


@dataclass(frozen=True)
class Section:
    title: str
    rows: tuple[Row, ...]
    """The rows shown: those that differ, or all when asked."""
    total: int
    differing: int
    notes: tuple[str, ...] = ()
    """One per job, where it has nothing in this section and why: ``job-1: no provenance yet``."""


def differences(jobs: Sequence[JobFacts], *, show_all: bool = False) -> list[Section]:
    """Each section's rows, keys in the order first met; a row differs where two jobs' values (or one's absence)
    differ. Only the differing rows unless ``show_all``."""
    sections = []
    for title in SECTIONS:
        keys: dict[str, None] = {}
        for job in jobs:
            keys.update(dict.fromkeys(job.sections.get(title, {})))
        rows = []
        for key in keys:
            values = tuple(job.sections.get(title, {}).get(key, ABSENT) for job in jobs)
            rows.append(Row(key, values, len(set(values)) > 1))
        differing = sum(row.differs for row in rows)
        shown = tuple(row for row in rows if show_all or row.differs)
        notes = tuple(f"{job.job_id}: {job.notes[title]}" for job in jobs if title in job.notes)
        sections.append(Section(title, shown, len(rows), differing, notes))
    return sections
