"""A search file and its manifest checked together, at `sweep validate` and `sweep submit` alike.

- A variable in the manifest's command that looks like a parameter (a name with a lowercase letter, as
  `${lr}`, not assigned in the command itself) must be one of the sweep's parameters: a typo would
  otherwise reach the learner as an empty string.
- The objective must be a metric the stored history keeps with its step (docs/metrics.md): one of
  `metrics.jsonl` (`learner.log_metrics`) or TensorBoard, not a `<group>/<scalar>` of the manifest's regex
  rules, whose values reach etcd only. Those names are not listed in the manifest: a trial that never
  reports the objective fails its rung with that reason.
"""

from __future__ import annotations

import re
from pathlib import Path

from controller_sidecar.errors import SidecarConfigError
from controller_sidecar.evalmetrics import parse_evaluation_metrics
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
    group_name = metric.partition("/")[0]
    if not any(g.name == group_name for g in rules.groups):
        return []
    loc = ("objective", "metric")
    return [
        Problem(
            search_file,
            spec.lines.get(loc),
            loc,
            f"{metric!r} comes from the manifest's regex rule {group_name!r}: a sweep reads each rung's result "
            "from the metric history, which keeps the values of metrics.jsonl and TensorBoard with their steps, "
            "not those of regex rules; report the objective with learner.log_metrics(step, ...) or TensorBoard",
        )
    ]
