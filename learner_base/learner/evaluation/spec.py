"""What an evaluation is asked to do: the typed form of one entry of a manifest's ``evaluations`` section.

The manifest parser (``learnerkit.scheduler.manifest.evaluations``) checks each entry against the kind its
evaluator's folder declares (``frameworks/<name>/evaluation.yaml``), naming the line of every bad field, and builds
these from its JSON form; the evaluator reads them back from the JSON the scheduler hands it (``spec_from_dict``).
A kind without a typed form here is a ``KindSpec``: its declared fields as JSON data, which its own evaluator reads.
Every value is plain data: no field is ever evaluated as an expression.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

ATTACKS = ("fgsm", "pgd")
"""Evasion attacks the robustness evaluator runs (ART's FastGradientMethod and ProjectedGradientDescent)."""
FAIRNESS_METRICS = ("disparate_impact", "statistical_parity_difference", "equal_opportunity_difference")
"""Group metrics a fairness threshold may bound (AIF360's names)."""
Kind = Literal["robustness", "fairness"]


class SpecError(ValueError):
    """An evaluation document that is not what the evaluator can run; the message names the field."""


@dataclass(frozen=True)
class EvaluationData:
    """The evaluation data: one CSV file with a header row, in the job's data folder."""

    file: str
    """Path of the CSV below the evaluation data's container (the evaluator sees it under ``$DATA_DIR``)."""
    label: str
    """Column holding the true class (robustness: an integer class; fairness: compared as text)."""
    features: tuple[str, ...] = ()
    """Columns fed to the model, in order; empty: every column but the label (and the fairness columns)."""
    store: str | None = None
    """Data store id the file comes from; None: the job's training data store."""
    container: str | None = None
    """Bucket (or bucket/prefix) of that store; None: its training data container."""


@dataclass(frozen=True)
class RobustnessThreshold:
    """The model is done only if adversarial accuracy under ``attack`` at ``epsilon`` is at least ``min_accuracy``."""

    attack: str
    epsilon: float
    min_accuracy: float


@dataclass(frozen=True)
class Bound:
    """Where a fairness metric must lie: ``minimum <= value <= maximum`` (either may be open)."""

    minimum: float | None = None
    maximum: float | None = None

    def holds(self, value: float) -> bool:
        low = self.minimum is None or value >= self.minimum
        return low and (self.maximum is None or value <= self.maximum)

    def describe(self) -> str:
        low = f">= {self.minimum:g}" if self.minimum is not None else ""
        high = f"<= {self.maximum:g}" if self.maximum is not None else ""
        return " and ".join(part for part in (low, high) if part)


@dataclass(frozen=True)
class RobustnessSpec:
    name: str
    data: EvaluationData
    attacks: tuple[str, ...]
    epsilons: tuple[float, ...]
    """Perturbation budgets (L-infinity, in the features' own units), ascending."""
    thresholds: tuple[RobustnessThreshold, ...] = ()
    pgd_steps: int = 10
    kind: Kind = "robustness"


@dataclass(frozen=True)
class FairnessSpec:
    name: str
    data: EvaluationData
    protected_attribute: str
    """Column naming each row's group."""
    privileged_groups: tuple[str, ...]
    """Values of the protected attribute (as text) that make up the privileged group; all others are unprivileged."""
    favourable_label: str
    """Label value (as text) that is the favourable outcome."""
    prediction: str | None = None
    """Column holding the model's predictions in the data; None: the evaluator runs the job's saved model."""
    thresholds: Mapping[str, Bound] | None = None
    kind: Kind = "fairness"


@dataclass(frozen=True)
class KindSpec:
    """An evaluation of any other kind: ``fields`` holds its declared fields (thresholds among them) as checked
    JSON data."""

    name: str
    kind: str
    data: EvaluationData
    fields: Mapping[str, Any]


EvaluationSpec = RobustnessSpec | FairnessSpec | KindSpec


def spec_to_dict(spec: EvaluationSpec) -> dict[str, Any]:
    """JSON data for the evaluator (and the job's record)."""
    data = {
        "file": spec.data.file,
        "label": spec.data.label,
        "features": list(spec.data.features),
        "store": spec.data.store,
        "container": spec.data.container,
    }
    if isinstance(spec, KindSpec):
        return {**spec.fields, "kind": spec.kind, "name": spec.name, "data": data}
    if isinstance(spec, RobustnessSpec):
        return {
            "kind": spec.kind,
            "name": spec.name,
            "data": data,
            "attacks": list(spec.attacks),
            "epsilons": list(spec.epsilons),
            "pgd_steps": spec.pgd_steps,
            "thresholds": [
                {"attack": t.attack, "epsilon": t.epsilon, "min_accuracy": t.min_accuracy} for t in spec.thresholds
            ],
        }
    return {
        "kind": spec.kind,
        "name": spec.name,
        "data": data,
        "protected_attribute": spec.protected_attribute,
        "privileged_groups": list(spec.privileged_groups),
        "favourable_label": spec.favourable_label,
        "prediction": spec.prediction,
        "thresholds": {
            metric: {"min": bound.minimum, "max": bound.maximum} for metric, bound in (spec.thresholds or {}).items()
        },
    }


TYPED_KINDS = ("robustness", "fairness")
"""The kinds with a typed spec here; any other kind is a ``KindSpec``."""


def spec_from_dict(raw: Mapping[str, Any], known: Collection[str] = ()) -> EvaluationSpec:
    """The spec from its JSON data (``spec_to_dict``); raises ``SpecError`` naming the first bad field. ``known``:
    the other kinds taken (as ``KindSpec``): the kind an evaluator runs, the kinds the manifest parser checked."""
    try:
        return _from_dict(raw, known)
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, SpecError):
            raise
        raise SpecError(f"evaluation document: bad or missing field {e}") from e


def _from_dict(raw: Mapping[str, Any], known: Collection[str]) -> EvaluationSpec:
    d = raw["data"]
    data = EvaluationData(
        file=str(d["file"]),
        label=str(d["label"]),
        features=tuple(str(f) for f in d.get("features") or ()),
        store=d.get("store"),
        container=d.get("container"),
    )
    kind = raw["kind"]
    if kind == "robustness":
        attacks = tuple(str(a) for a in raw["attacks"])
        unknown = [a for a in attacks if a not in ATTACKS]
        if unknown:
            raise SpecError(f"attacks: unknown {', '.join(unknown)}; valid: {', '.join(ATTACKS)}")
        return RobustnessSpec(
            name=str(raw["name"]),
            data=data,
            attacks=attacks,
            epsilons=tuple(sorted(float(e) for e in raw["epsilons"])),
            pgd_steps=int(raw.get("pgd_steps", 10)),
            thresholds=tuple(
                RobustnessThreshold(str(t["attack"]), float(t["epsilon"]), float(t["min_accuracy"]))
                for t in raw.get("thresholds") or ()
            ),
        )
    if kind == "fairness":
        thresholds = {
            str(metric): Bound(_optional_float(b.get("min")), _optional_float(b.get("max")))
            for metric, b in (raw.get("thresholds") or {}).items()
        }
        unknown = [m for m in thresholds if m not in FAIRNESS_METRICS]
        if unknown:
            raise SpecError(f"thresholds: unknown metric {', '.join(unknown)}; valid: {', '.join(FAIRNESS_METRICS)}")
        return FairnessSpec(
            name=str(raw["name"]),
            data=data,
            protected_attribute=str(raw["protected_attribute"]),
            privileged_groups=tuple(str(g) for g in raw["privileged_groups"]),
            favourable_label=str(raw["favourable_label"]),
            prediction=None if raw.get("prediction") is None else str(raw["prediction"]),
            thresholds=thresholds,
        )
    if kind not in known:
        raise SpecError(f"kind: unknown {kind!r}; valid: {', '.join((*TYPED_KINDS, *known))}")
    fields = {key: value for key, value in raw.items() if key not in ("kind", "name", "data")}
    return KindSpec(name=str(raw["name"]), kind=kind, data=data, fields=fields)


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)
