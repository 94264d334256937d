"""What the trust panel shows of a server-side check (`trust_checks`): `job verify`'s checks grouped by what they
are about, every problem named with what is wrong in words, the factsheet as `job provenance` lists it, and each
evaluation round with its verdicts, thresholds, robustness curves and fairness group metrics."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from securesystemslib.signer import Key

from learnerkit.common.signing import EnvelopeError, open_signed
from learnerkit.scheduler.provenance.evaluation import ROUND_PREFIX, ROUND_SUFFIX, round_of
from learnerkit.scheduler.provenance.factsheet import FACTSHEET_JSON
from learnerkit.scheduler.provenance.factsheetrows import factsheet_rows
from learnerkit.scheduler.provenance.report import Check, State, folded_unsigned

BAD = frozenset({State.CHANGED, State.MISSING, State.INCOMPLETE})
WORDS = {
    State.OK: "matches",
    State.CHANGED: "changed since it was signed",
    State.MISSING: "missing from the store",
    State.INCOMPLETE: "incomplete: the statement does not cover every learner",
    State.UNSIGNED: "unsigned: no statement names it",
    State.NOT_CHECKED: "not checked",
}
"""What a check's state means, in words, beside its detail."""
SECTIONS = (
    ("statement", "Provenance statement"),
    ("signature", "Model signature"),
    ("files", "Results and inputs"),
    ("factsheet", "Factsheet"),
    ("evaluations", "Evaluation rounds"),
    ("unsigned", "Files no statement names"),
)
SHOWN_OK = 20
"""A section lists its matching checks one by one up to this many, else counts them (a job of 1,000 results)."""


@dataclass(frozen=True)
class Line:
    state: str
    item: str
    words: str
    detail: str
    bad: bool


@dataclass
class Section:
    key: str
    title: str
    problems: list[Line] = field(default_factory=list)
    ok: list[Line] = field(default_factory=list)
    others: list[Line] = field(default_factory=list)
    """Neither failing nor matching: not checked, unsigned."""

    @property
    def ok_folded(self) -> bool:
        return len(self.ok) > SHOWN_OK


@dataclass(frozen=True)
class Evaluation:
    name: str
    kind: str
    verdict: str
    message: str
    failures: tuple[dict[str, Any], ...]
    thresholds: tuple[tuple[str, str], ...]
    """(what, wanted) of each threshold the manifest set."""
    curve: tuple[tuple[str, tuple[tuple[float, float], ...]], ...] = ()
    """Robustness: (attack, ((epsilon, accuracy), ...)) from the report."""
    clean_accuracy: float | None = None
    metrics: tuple[tuple[str, Any], ...] = ()
    """Fairness: each group metric's value."""
    groups: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()
    """Fairness: (group, ((figure, value), ...))."""


@dataclass(frozen=True)
class Round:
    number: int
    attempt: int
    verdict: str
    evaluations: tuple[Evaluation, ...]


def section_of(item: str) -> str:
    if item.startswith(("provenance signature", "completeness")):
        return "statement"
    if item.startswith("model signature"):
        return "signature"
    if item.startswith("factsheet"):
        return "factsheet"
    if item.startswith("evaluation"):
        return "evaluations"
    return "files"


def sections(checks: Sequence[Check]) -> list[Section]:
    """The checks by section, each section's problems first; unsigned files of one folder folded as the CLI
    folds them."""
    found = {key: Section(key, title) for key, title in SECTIONS}
    for state, item, detail in folded_unsigned(checks):
        line = Line(state, item, WORDS[State(state)], detail, State(state) in BAD)
        section = found["unsigned" if state == State.UNSIGNED.value else section_of(item)]
        if line.bad:
            section.problems.append(line)
        elif state == State.OK.value:
            section.ok.append(line)
        else:
            section.others.append(line)
    return [s for s in found.values() if s.problems or s.ok or s.others]


def problems(checks: Sequence[Check]) -> list[Line]:
    """Every failing check, in the report's order: what the red marks at the top name."""
    return [Line(c.state.value, c.item, WORDS[c.state], c.detail, True) for c in checks if c.state in BAD]


def factsheet(folder: Path) -> list[tuple[str, str]]:
    """The factsheet's rows as `job provenance` prints them; empty when the copy holds none (or it is not JSON:
    the checks say so)."""
    try:
        return factsheet_rows(json.loads((folder / FACTSHEET_JSON).read_bytes()))
    except (OSError, ValueError, KeyError, TypeError):
        return []


def rounds(folder: Path, keys: Sequence[Key]) -> list[Round]:
    """Each evaluation round whose statement the platform signed, oldest first, with its reports' figures."""
    found = []
    for path in sorted(folder.glob(f"{ROUND_PREFIX}*{ROUND_SUFFIX}")):
        name = path.relative_to(folder).as_posix()
        number = round_of(name)
        if number is None:
            continue
        try:
            statement, _key = open_signed(path.read_bytes(), keys, name)
        except (EnvelopeError, OSError):
            continue  # the round's signature check names it
        predicate = statement["predicate"]
        evaluations = tuple(_evaluation(folder, e) for e in predicate.get("evaluations", []))
        found.append(Round(number, int(predicate.get("attempt", 0)), str(predicate.get("verdict", "")), evaluations))
    return sorted(found, key=lambda r: r.number)


def _evaluation(folder: Path, signed: Mapping[str, Any]) -> Evaluation:
    spec = signed.get("spec", {})
    report = _report(folder, signed)
    metrics = report.get("metrics", {}) if isinstance(report.get("metrics"), dict) else {}
    curve = tuple(
        (str(attack), tuple((float(p["epsilon"]), float(p["accuracy"])) for p in points))
        for attack, points in (metrics.get("curve") or {}).items()
    )
    groups = tuple(
        (str(group), tuple((str(k), v) for k, v in figures.items()))
        for group, figures in (metrics.get("groups") or {}).items()
        if isinstance(figures, dict)
    )
    values = tuple(
        (str(k), v)
        for k, v in metrics.items()
        if k not in ("curve", "groups", "clean_accuracy") and not isinstance(v, (dict, list))
    )
    clean = metrics.get("clean_accuracy")
    return Evaluation(
        name=str(signed["name"]),
        kind=str(signed["kind"]),
        verdict=str(signed["verdict"]),
        message=str(signed.get("message", "")),
        failures=tuple(dict(f) for f in signed.get("failures", [])),
        thresholds=_thresholds(spec),
        curve=curve,
        clean_accuracy=float(clean) if isinstance(clean, (int, float)) else None,
        metrics=values,
        groups=groups,
    )


def _report(folder: Path, signed: Mapping[str, Any]) -> dict[str, Any]:
    """The evaluation's JSON report from the copy (the round's checks say whether it is the one signed)."""
    for stored in signed.get("reports", []):
        name = str(stored["name"])
        if name.endswith(".json"):
            try:
                found = json.loads((folder / name).read_bytes())
            except (OSError, ValueError):
                return {}
            return found if isinstance(found, dict) else {}
    return {}


def _thresholds(spec: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """A kind's thresholds as text, in either form a kind declares (docs/evaluations.md, "Declaring a kind"): a
    list of items naming where (``attack``, ``epsilon``) and a ``min_<x>``/``max_<x>`` bound, or a map of
    ``{metric: {min, max}}``."""
    thresholds = spec.get("thresholds")
    if isinstance(thresholds, list):
        return tuple(_listed_threshold(t) for t in thresholds if isinstance(t, dict))
    if isinstance(thresholds, dict):
        return tuple(
            (str(metric), " and ".join(f"{'>=' if k == 'min' else '<='} {v}" for k, v in sorted(bounds.items())))
            for metric, bounds in thresholds.items()
            if isinstance(bounds, dict)
        )
    return ()


def _listed_threshold(item: Mapping[str, Any]) -> tuple[str, str]:
    """``({"attack": "pgd", "epsilon": 0.1, "min_accuracy": 0.6})`` -> ``("pgd at epsilon 0.1", "accuracy >= 0.6")``."""
    bounds = {k: v for k, v in item.items() if k.startswith(("min_", "max_"))}
    where = [(k, v) for k, v in item.items() if k not in bounds]
    if len(where) == 1:
        what = f"{where[0][0]} {where[0][1]}"  # {"level": 0.9, ...}: "level 0.9"
    else:
        what = " ".join([*(str(v) for _, v in where[:1]), *(f"at {k} {v}" for k, v in where[1:])])
    wanted = " and ".join(f"{k[4:]} {'>=' if k.startswith('min_') else '<='} {v}" for k, v in bounds.items())
    return what, wanted


def verdict_line(checks: Sequence[Check], key_id: str) -> tuple[bool, str]:
    """(verified, the sentence at the top), worded as `job verify` words its last line."""
    bad = problems(checks)
    if not bad:
        return True, f"Verified: every signed item matches (key {key_id})."
    counts: dict[str, int] = {}
    for line in bad:
        counts[line.state] = counts.get(line.state, 0) + 1
    said = ", ".join(f"{n} {state}" for state, n in counts.items())
    return False, f"Not verified: {said} (key {key_id})."


def polyline(points: Sequence[tuple[float, float]], width: int = 160, height: int = 60) -> str:
    """SVG points of a robustness curve: epsilon across (the curve's own range), accuracy 0..1 up."""
    if not points:
        return ""
    low, high = min(p[0] for p in points), max(p[0] for p in points)
    span = (high - low) or 1.0
    return " ".join(
        f"{(e - low) / span * (width - 8) + 4:.1f},{height - 4 - max(0.0, min(1.0, a)) * (height - 8):.1f}"
        for e, a in points
    )
