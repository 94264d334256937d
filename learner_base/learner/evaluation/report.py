"""An evaluation's report: JSON for tools and a readable summary, both written atomically into the results.

``$RESULT_DIR/evaluations/<name>.json`` and ``<name>.txt`` (``REPORT_FOLDER``). The verdict is ``passed`` or
``failed``; a failed one lists every threshold missed, each naming the metric, its value and the threshold.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from learner.atomicfile import write_text

REPORT_FOLDER = "evaluations"
"""Below ``$RESULT_DIR``: one ``<name>.json`` and ``<name>.txt`` per evaluation."""
Verdict = Literal["passed", "failed"]


@dataclass(frozen=True)
class Failure:
    """One threshold missed: ``metric`` was ``value``, the threshold wanted ``threshold``."""

    metric: str
    value: float
    threshold: str
    """The condition as text: ``>= 0.5``, ``>= 0.8 and <= 1.25``."""
    at: Mapping[str, Any] = field(default_factory=dict)
    """Where it was measured: the attack and epsilon of a robustness threshold."""

    def describe(self) -> str:
        where = ", ".join(f"{key} {value}" for key, value in self.at.items())
        return f"{self.metric} = {self.value:.4f}{f' ({where})' if where else ''}, threshold {self.threshold}"


@dataclass(frozen=True)
class Report:
    name: str
    kind: str
    failures: tuple[Failure, ...]
    metrics: Mapping[str, Any]
    """Robustness: ``clean_accuracy`` and ``curve`` (attack -> [{epsilon, accuracy}]); fairness: every group
    metric and ``groups`` (per group: size, favourable rate, true positive rate); another kind: its evaluator's."""
    seconds: float = 0.0

    @property
    def verdict(self) -> Verdict:
        return "failed" if self.failures else "passed"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "verdict": self.verdict,
            "failures": [
                {"metric": f.metric, "value": _finite(f.value), "threshold": f.threshold, "at": dict(f.at)}
                for f in self.failures
            ],
            "metrics": _plain(self.metrics),
            "seconds": self.seconds,
        }


def report_from_dict(raw: Mapping[str, Any]) -> Report:
    return Report(
        name=str(raw["name"]),
        kind=str(raw["kind"]),
        failures=tuple(
            Failure(str(f["metric"]), _number(f["value"]), str(f["threshold"]), dict(f.get("at") or {}))
            for f in raw.get("failures") or ()
        ),
        metrics=dict(raw.get("metrics") or {}),
        seconds=float(raw.get("seconds", 0.0)),
    )


def summary_text(report: Report) -> str:
    """The readable summary: the verdict, each failure, then the curve, or each figure and the groups' (a report
    of any kind: what its metrics hold decides, not its kind's name)."""
    lines = [f"evaluation {report.name} ({report.kind}): {report.verdict.upper()}"]
    lines += [f"  missed: {failure.describe()}" for failure in report.failures]
    metrics = report.metrics
    if "curve" in metrics:
        lines.append(f"clean accuracy: {metrics.get('clean_accuracy', float('nan')):.4f}")
        for attack, points in (metrics.get("curve") or {}).items():
            lines.append(f"{attack}:")
            lines += [f"  epsilon {p['epsilon']:<8g} accuracy {p['accuracy']:.4f}" for p in points]
    else:
        for key, value in metrics.items():
            if key != "groups" and not isinstance(value, Mapping | list):
                lines.append(f"{key}: {_figure(value)}")
        for group, values in (metrics.get("groups") or {}).items():
            shown = "  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in values.items())
            lines.append(f"group {group}: {shown}")
    return "\n".join(lines) + "\n"


def _figure(value: Any) -> str:
    if value is None:
        return "undefined"
    return format(value, ".4f") if isinstance(value, int | float) and not isinstance(value, bool) else str(value)


def write_report(result_dir: Path, report: Report) -> Path:
    """Write ``<name>.json`` and ``<name>.txt`` under ``result_dir/evaluations``; returns the JSON's path."""
    folder = result_dir / REPORT_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    write_text(folder / f"{report.name}.txt", summary_text(report))
    target = folder / f"{report.name}.json"
    write_text(target, json.dumps(report.to_dict(), indent=2, allow_nan=False) + "\n")
    return target


def read_report(path: Path) -> Report:
    return report_from_dict(json.loads(path.read_text(encoding="utf-8")))


def _finite(value: float) -> float | None:
    """JSON has no NaN: an undefined value (a group with no positives) is null."""
    return value if math.isfinite(value) else None


def _number(value: Any) -> float:
    return math.nan if value is None else float(value)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
