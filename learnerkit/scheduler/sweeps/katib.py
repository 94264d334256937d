"""`sweep import katib`: a Katib v1beta1 `Experiment` as an equivalent search file, and what could not be mapped.

Read (Katib's API reference, ``kubeflow.org/v1beta1``): ``spec.parameters`` (``double``, ``int``,
``categorical``, ``discrete``; ``feasibleSpace`` ``min``/``max``/``step``/``list``/``distribution``),
``spec.objective`` (``type``, ``goal``, ``objectiveMetricName``), ``spec.algorithm`` (``algorithmName``,
``algorithmSettings``), ``spec.earlyStopping``, ``maxTrialCount``, ``parallelTrialCount``,
``maxFailedTrialCount``, and the trial template's command (``trialSpec``'s container named
``primaryContainerName``, its ``${trialParameters.X}`` turned into the parameters' ``${name}``). What has no
counterpart here is listed in `Imported.unmapped`, one line each, never dropped in silence. The search file
is checked by `parse_search_file` before it is returned: an import never prints a file `sweep validate` refuses.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from learnerkit.common.yamlfile import FieldPath, LocatedYaml, Problem, YamlBudget, YamlError, parse_located_yaml
from learnerkit.scheduler.manifest.fields import describe
from learnerkit.scheduler.sweeps.searchfile import MAX_CONCURRENCY, MAX_TRIALS, NAME, parse_search_file

MAX_NODES = 20_000
ALGORITHMS = {
    "random": "random",
    "grid": "grid",
    "tpe": "tpe",
    "multivariate-tpe": "tpe",
    "bayesianoptimization": "tpe",
    "hyperband": "hyperband",
    "pbt": "pbt",
}
"""Katib's algorithm names and the algorithm each becomes (a model-based one without a counterpart: TPE)."""
TRIAL_PARAMETER = re.compile(r"\$\{trialParameters\.([A-Za-z0-9_.-]+)\}")


class KatibImportError(YamlError):
    """The experiment cannot be read; `problems` names the line and field of each."""


@dataclass
class Imported:
    search_file: str
    unmapped: list[str] = field(default_factory=list)
    """What the search file does not say of the experiment, one line each, with the field it comes from."""


@dataclass
class _Reader:
    doc: LocatedYaml
    problems: list[Problem] = field(default_factory=list)
    unmapped: list[str] = field(default_factory=list)

    def fail(self, loc: FieldPath, message: str) -> None:
        self.problems.append(self.doc.problem(loc, message))

    def note(self, loc: FieldPath, message: str) -> None:
        line = self.doc.line_of(loc)
        where = f"{self.doc.path}:{line}" if line else str(self.doc.path)
        dotted = ".".join(f"[{p}]" if isinstance(p, int) else p for p in loc).replace(".[", "[")
        self.unmapped.append(f"{where}: {dotted}: {message}")

    def mapping(self, value: Any, loc: FieldPath) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail(loc, f"expected a mapping; got {describe(value)}")
            return {}
        return value

    def number(self, value: Any, loc: FieldPath) -> float | None:
        """Katib writes numbers as strings ("0.01")."""
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(loc, f"expected a number; got {describe(value)}")
            return None
        if not math.isfinite(number):
            self.fail(loc, f"expected a finite number; got {value!r}")
            return None
        return number

    def count(self, value: Any, loc: FieldPath, limit: int) -> int | None:
        number = self.number(value, loc)
        if number is None:
            return None
        if not number.is_integer() or not 1 <= number <= limit:
            self.fail(loc, f"expected a whole number from 1 to {limit}; got {value!r}")
            return None
        return int(number)


def import_katib(text: str, source: Path, *, manifest: str = "manifest.yml") -> Imported:
    """The search file equivalent to the experiment `text` (read from `source`), naming `manifest`."""
    try:
        doc = parse_located_yaml(text, source, YamlBudget(max_nodes=MAX_NODES))
    except YamlError as e:
        raise KatibImportError(list(e.problems)) from e
    reader = _Reader(doc)
    top = reader.mapping(doc.data, ())
    if top.get("kind") != "Experiment" or not str(top.get("apiVersion", "")).startswith("kubeflow.org/"):
        reader.fail(
            ("kind",), f"expected a Katib Experiment (kubeflow.org/v1beta1); got kind {describe(top.get('kind'))}"
        )
        raise KatibImportError(reader.problems)
    spec = reader.mapping(top.get("spec"), ("spec",))
    names = _renamed(reader, spec.get("parameters"))
    algorithm, settings = _algorithm(reader, spec)
    parameters = _parameters(reader, spec.get("parameters"), names, algorithm)
    objective = _objective(reader, spec.get("objective"))
    out: dict[str, Any] = {"manifest": manifest}
    budget = _budget(reader, spec, algorithm, settings, parameters, names)
    out["parameters"] = parameters
    out["objective"] = objective
    out["budget"] = budget
    out["algorithm"] = algorithm
    _counts(reader, spec, algorithm, out)
    command = _command(reader, spec.get("trialTemplate"), names)
    if reader.problems:
        raise KatibImportError(reader.problems)
    text_out = _render(out, command, source)
    try:
        parse_search_file(text_out, source.parent / "imported.yml")
    except YamlError as e:  # a mapping this module got wrong: say which, with the experiment's name
        raise KatibImportError(
            [Problem(path=source, line=None, loc=(), message=f"imported as: {p}") for p in e.problems]
        ) from e
    return Imported(text_out, reader.unmapped)


def _renamed(reader: _Reader, raw: Any) -> dict[str, str]:
    """Katib's parameter names (``num-layers``) as environment variable names (``num_layers``)."""
    names: dict[str, str] = {}
    for i, item in enumerate(raw if isinstance(raw, list) else []):
        name = str(item.get("name", "")) if isinstance(item, dict) else ""
        fixed = re.sub(r"[^A-Za-z0-9_]", "_", name)
        if fixed and fixed[0].isdigit():
            fixed = f"p_{fixed}"
        if fixed != name and NAME.fullmatch(fixed):
            reader.note(
                ("spec", "parameters", i, "name"),
                f"{name!r} becomes {fixed!r} (a parameter is an environment variable)",
            )
        names[name] = fixed
    return names


def _algorithm(reader: _Reader, spec: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    loc: FieldPath = ("spec", "algorithm")
    body = reader.mapping(spec.get("algorithm"), loc)
    name = str(body.get("algorithmName", "random"))
    settings: dict[str, str] = {}
    for i, item in enumerate(body.get("algorithmSettings") or []):
        if isinstance(item, dict) and "name" in item:
            settings[str(item["name"])] = str(item.get("value", ""))
        else:
            reader.fail((*loc, "algorithmSettings", i), f"expected {{name, value}}; got {describe(item)}")
    mapped = ALGORITHMS.get(name)
    if mapped is None:
        reader.fail((*loc, "algorithmName"), f"{name!r} has no counterpart; one of {', '.join(ALGORITHMS)} imports")
        return {"name": "random"}, settings
    if mapped != name:
        reader.note((*loc, "algorithmName"), f"{name} has no counterpart here: imported as {mapped}")
    out: dict[str, Any] = {"name": mapped}
    used: set[str] = set()

    def setting(
        key: str, target: str, convert: type[int] | type[float], loc_key: FieldPath = (*loc, "algorithmSettings")
    ) -> None:
        if key in settings:
            value = reader.number(settings[key], loc_key)
            if value is not None:
                out[target] = convert(value)
            used.add(key)

    if mapped == "tpe":
        setting("n_startup_trials", "startup", int)
    if mapped == "hyperband":
        setting("eta", "eta", int)
        used.update(("resource_name", "r_l"))
    if mapped == "pbt":
        setting("n_population", "population", int)
        setting("truncation_threshold", "truncation", float)
        setting("resample_probability", "resample", float)
        used.add("suggestion_trial_dir")
        if "suggestion_trial_dir" in settings:
            reader.note(
                (*loc, "algorithmSettings"),
                "suggestion_trial_dir: a trial's checkpoints are its job's; "
                "learner.latest_checkpoint() restores its parent's",
            )
    used.add("random_state")
    for key in settings:
        if key not in used:
            reader.note((*loc, "algorithmSettings"), f"{key}={settings[key]!r} has no counterpart in {mapped}")
    early = reader.mapping(spec.get("earlyStopping"), ("spec", "earlyStopping"))
    if early:
        rule = early.get("algorithmName")
        if rule == "medianstop" and mapped in ("random", "grid", "tpe"):
            reader.note(
                ("spec", "earlyStopping"),
                "medianstop: imported as algorithm median_stop at each rung (its settings are not)",
            )
            out = {"name": "median_stop"}
        else:
            reader.note(("spec", "earlyStopping"), f"{rule}: no early stopping imported beside {mapped}")
    return out, settings


def _parameters(
    reader: _Reader, raw: Any, names: Mapping[str, str], algorithm: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    loc: FieldPath = ("spec", "parameters")
    if not isinstance(raw, list) or not raw:
        reader.fail(loc, f"expected a list of at least one parameter; got {describe(raw)}")
        return {}
    out: dict[str, dict[str, Any]] = {}
    for i, item in enumerate(raw):
        here: FieldPath = (*loc, i)
        body = reader.mapping(item, here)
        name = names.get(str(body.get("name", "")), "")
        if not name:
            reader.fail((*here, "name"), "required")
            continue
        space = reader.mapping(body.get("feasibleSpace"), (*here, "feasibleSpace"))
        kind = body.get("parameterType")
        parameter = _parameter(reader, kind, space, (*here, "feasibleSpace"), algorithm)
        if parameter is None and kind not in ("double", "int", "categorical", "discrete"):
            reader.fail(
                (*here, "parameterType"), f"expected double, int, categorical or discrete; got {describe(kind)}"
            )
        if parameter is not None:
            out[name] = parameter
    return out


def _parameter(
    reader: _Reader, kind: Any, space: Mapping[str, Any], loc: FieldPath, algorithm: Mapping[str, Any]
) -> dict[str, Any] | None:
    if kind in ("categorical", "discrete"):
        values = space.get("list")
        if not isinstance(values, list) or not values:
            reader.fail((*loc, "list"), f"expected a list of values; got {describe(values)}")
            return None
        if kind == "discrete":
            numbers = [reader.number(v, (*loc, "list")) for v in values]
            if None in numbers:
                return None
            return {"type": "choice", "values": [int(n) if n is not None and n.is_integer() else n for n in numbers]}
        return {"type": "choice", "values": [str(v) for v in values]}
    if kind not in ("double", "int"):
        return None
    low, high = reader.number(space.get("min"), (*loc, "min")), reader.number(space.get("max"), (*loc, "max"))
    if low is None or high is None:
        return None
    distribution = str(space.get("distribution", "uniform"))
    step = reader.number(space["step"], (*loc, "step")) if "step" in space else None
    if kind == "int":
        if distribution not in ("uniform", ""):
            reader.note((*loc, "distribution"), f"{distribution}: an integer is drawn uniformly here")
        if step is not None and step > 1 and step.is_integer():
            return {"type": "choice", "values": list(range(int(low), int(high) + 1, int(step)))}
        return {"type": "integer", "min": int(low), "max": int(high)}
    out: dict[str, Any] = {
        "type": "log_uniform" if distribution == "logUniform" else "uniform",
        "min": low,
        "max": high,
    }
    if distribution not in ("uniform", "logUniform", ""):
        reader.note((*loc, "distribution"), f"{distribution} has no counterpart: imported as uniform over [min, max]")
    if step is not None:
        if algorithm.get("name") == "grid":
            out["points"] = round((high - low) / step) + 1
        else:
            reader.note((*loc, "step"), f"{step:g}: a {out['type']} parameter is drawn from the whole interval here")
    return out


def _objective(reader: _Reader, raw: Any) -> dict[str, str]:
    loc: FieldPath = ("spec", "objective")
    body = reader.mapping(raw, loc)
    metric, goal = body.get("objectiveMetricName"), body.get("type")
    if not isinstance(metric, str) or not metric:
        reader.fail((*loc, "objectiveMetricName"), f"required: the metric a trial reports; got {describe(metric)}")
    if goal not in ("minimize", "maximize"):
        reader.fail((*loc, "type"), f"expected minimize or maximize; got {describe(goal)}")
    if "goal" in body:
        reader.note(
            (*loc, "goal"), f"{body['goal']}: a sweep does not end when a trial reaches a value; it runs its trials"
        )
    if body.get("additionalMetricNames"):
        reader.note((*loc, "additionalMetricNames"), "kept in each trial's metric history, not by the sweep")
    return {"metric": str(metric), "goal": str(goal)}


def _budget(
    reader: _Reader,
    spec: Mapping[str, Any],
    algorithm: dict[str, Any],
    settings: Mapping[str, str],
    parameters: dict[str, dict[str, Any]],
    names: Mapping[str, str],
) -> dict[str, Any]:
    """Katib's Hyperband takes its budget from a parameter (``resource_name``, up to ``r_l``); a budget is the
    sweep's own here. Other algorithms have none in Katib: one rung of 1 epoch, said on stderr."""
    loc: FieldPath = ("spec", "algorithm", "algorithmSettings")
    if algorithm["name"] == "hyperband" and settings.get("resource_name") in names:
        resource = names[settings["resource_name"]]
        parameter = parameters.pop(resource, {})
        high = reader.number(settings.get("r_l", parameter.get("max", 1)), loc)
        low = max(int(parameter.get("min", 1)), 1)
        if parameter.get("min") == parameter.get("max"):
            low = 1
        top = max(int(high or 1), low)
        reader.note(
            loc, f"resource_name {settings['resource_name']}: the budget in epochs, {low} to {top}, not a parameter"
        )
        return {"unit": "epoch", "min": low, "max": top}
    if algorithm["name"] == "pbt":
        trials = spec.get("maxTrialCount")
        population = int(algorithm.get("population", 4))
        generations = max(int(str(trials)) // population, 1) if str(trials).isdigit() else 1
        reader.note(("spec", "maxTrialCount"), f"pbt: {generations} generations of {population}, one epoch each")
        return {"unit": "epoch", "min": 1, "max": generations}
    reader.note(("spec",), "Katib has no budget: budget.max is 1 epoch here; set it to what a trial trains")
    return {"unit": "epoch", "max": 1}


def _counts(reader: _Reader, spec: Mapping[str, Any], algorithm: Mapping[str, Any], out: dict[str, Any]) -> None:
    if algorithm["name"] != "pbt" and "maxTrialCount" in spec:
        out["trials"] = reader.count(spec["maxTrialCount"], ("spec", "maxTrialCount"), MAX_TRIALS)
    elif algorithm["name"] not in ("pbt", "grid"):
        out["trials"] = 12
        reader.note(("spec", "maxTrialCount"), "not set: 12 trials")
    if "parallelTrialCount" in spec:
        out["concurrency"] = reader.count(spec["parallelTrialCount"], ("spec", "parallelTrialCount"), MAX_CONCURRENCY)
    if "maxFailedTrialCount" in spec:
        reader.note(("spec", "maxFailedTrialCount"), "a failed trial fails alone here; the sweep goes on")
    settings = reader.mapping(spec.get("algorithm"), ("spec", "algorithm")).get("algorithmSettings") or []
    for item in settings:
        if isinstance(item, dict) and item.get("name") == "random_state":
            seed = reader.number(item.get("value"), ("spec", "algorithm", "algorithmSettings"))
            if seed is not None and seed.is_integer() and seed >= 0:
                out["seed"] = int(seed)


def _command(reader: _Reader, raw: Any, names: Mapping[str, str]) -> str | None:
    """The primary container's command and args, ``${trialParameters.X}`` as ``${<parameter>}``."""
    loc: FieldPath = ("spec", "trialTemplate")
    template = reader.mapping(raw, loc)
    if not template:
        reader.note(loc, "no trial template: the manifest's command is yours to write")
        return None
    references: dict[str, str] = {}
    for item in template.get("trialParameters") or []:
        if isinstance(item, dict) and "name" in item:
            reference = str(item.get("reference", item["name"]))
            references[str(item["name"])] = names.get(reference, reference)
    spec = template.get("trialSpec") or {}
    primary = template.get("primaryContainerName")
    containers = _containers(spec)
    chosen = [c for c in containers if c.get("name") == primary] or containers[:1]
    if not chosen:
        reader.note((*loc, "trialSpec"), "no container found: the manifest's command is yours to write")
        return None
    words = [str(w) for w in (chosen[0].get("command") or []) + (chosen[0].get("args") or [])]
    line = " ".join(shlex.quote(w) if not TRIAL_PARAMETER.search(w) else w for w in words)

    def parameter(match: re.Match[str]) -> str:
        name = references.get(match.group(1))
        if name is None:
            reader.note((*loc, "trialParameters"), f"${{trialParameters.{match.group(1)}}} names no trial parameter")
            return match.group(0)
        return f"${{{name}}}"

    if chosen[0].get("image"):
        reader.note((*loc, "trialSpec"), f"image {chosen[0]['image']}: a trial runs the manifest's framework image")
    return TRIAL_PARAMETER.sub(parameter, line)


def _containers(spec: Any) -> list[dict[str, Any]]:
    """The containers of a trial spec (a Job, a PyTorchJob's replicas, ...), found wherever they are."""
    found: list[dict[str, Any]] = []
    if isinstance(spec, dict):
        for key, value in spec.items():
            if key == "containers" and isinstance(value, list):
                found += [c for c in value if isinstance(c, dict)]
            else:
                found += _containers(value)
    elif isinstance(spec, list):
        for value in spec:
            found += _containers(value)
    return found


def _render(out: Mapping[str, Any], command: str | None, source: Path) -> str:
    lines = [f"# Imported from the Katib experiment {source.name} by `learnerkit sweep import katib`."]
    if command is not None:
        lines += [
            f"# The trial template's command, for {out['manifest']} (framework.command):",
            f"#   {command}",
        ]
    for key, value in out.items():
        if key == "parameters":
            lines.append("parameters:")
            for name, body in value.items():
                lines.append(f"  {name}: {_flow(body)}")
        elif isinstance(value, dict):
            lines.append(f"{key}: {_flow(value)}")
        else:
            lines.append(f"{key}: {_flow(value)}")
    return "\n".join(lines) + "\n"


def _flow(value: Any) -> str:
    return (
        str(yaml.safe_dump(value, default_flow_style=True, width=10_000, sort_keys=False))
        .strip()
        .removesuffix("...")
        .strip()
    )
