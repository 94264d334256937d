"""A search file and its manifest checked together, at `sweep validate` and `sweep submit` alike.

- A variable in the manifest's command that looks like a parameter (a name with a lowercase letter, as
  `${lr}`, not assigned in the command itself) must be one of the sweep's parameters: a typo would
  otherwise reach the learner as an empty string.
- The objective must be a metric the manifest's `evaluation_metrics` can report with a step: a
  `<group>/<scalar>` name of a regex rule needs that group, that scalar and a whole-number `etimes` value
  for its step. Other names come from `metrics.jsonl` (`learner.log_metrics`) or TensorBoard, which the
  manifest does not list; a trial that never reports them fails its rung with that reason.
"""

from __future__ import annotations

import re
from pathlib import Path

from controller_sidecar.errors import SidecarConfigError
from controller_sidecar.evalmetrics import ValueType, parse_evaluation_metrics
from learnerkit.common.yamlfile import Problem
from learnerkit.scheduler.manifest.model import JobManifest
from learnerkit.scheduler.sweeps.spec import SweepSpec

REFERENCE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
ASSIGNED = re.compile(
    r"(?:^|[\s;&|(])([A-Za-z_][A-Za-z0-9_]*)=|\bfor\s+([A-Za-z_][A-Za-z0-9_]*)\s+in\b|\bread\s+([A-Za-z_][A-Za-z0-9_]*)"
)


def command_references(command: str) -> set[str]:
    """The names the command reads that look like parameters: any with a lowercase letter, not set in it."""
    used = {braced or bare for braced, bare in REFERENCE.findall(command)}
    assigned = {name for groups in ASSIGNED.findall(command) for name in groups if name}
    return {name for name in used - assigned if name != name.upper()}


def sweep_problems(spec: SweepSpec, manifest: JobManifest, search_file: Path) -> list[Problem]:
    problems: list[Problem] = []
    names = set(spec.space.names)
    for name in sorted(command_references(manifest.framework.command) - names):
        problems.append(
            Problem(
                spec.manifest,
                None,
                ("framework", "command"),
                f"${{{name}}} is not a parameter of the sweep {search_file.name} (its parameters: "
                f"{', '.join(spec.space.names)})",
            )
        )
    problems += _objective_problems(spec, manifest, search_file)
    return problems


def _objective_problems(spec: SweepSpec, manifest: JobManifest, search_file: Path) -> list[Problem]:
    metric = spec.objective.metric
    try:
        rules = parse_evaluation_metrics(dict(manifest.evaluation_metrics) if manifest.evaluation_metrics else None)
    except SidecarConfigError as e:  # the manifest's parser has checked it already; kept for a clear message
        return [Problem(spec.manifest, None, ("evaluation_metrics",), str(e))]
    if rules is None or "/" not in metric:
        return []
    group_name, _, scalar = metric.partition("/")
    group = next((g for g in rules.groups if g.name == group_name), None)
    if group is None:
        return []
    loc = ("objective", "metric")
    line = spec.lines.get(loc)
    if scalar not in {rule.key for rule in group.scalars}:
        keys = ", ".join(f"{group_name}/{rule.key}" for rule in group.scalars) or "none"
        return [
            Problem(
                search_file,
                line,
                loc,
                f"{metric!r}: the manifest's evaluation_metrics group {group_name!r} reports no scalar "
                f"{scalar!r} (it reports: {keys})",
            )
        ]
    if not any(rule.type is ValueType.INT for rule in group.etimes):
        return [
            Problem(
                search_file,
                line,
                loc,
                f"{metric!r}: the manifest's evaluation_metrics group {group_name!r} reports no step (an etimes "
                f"value of type INT), so the budget's {spec.budget.unit.value}s cannot be told",
            )
        ]
    return []
