"""The tenants file (``$LEARNERKIT_TENANTS``): each tenant's quotas and the priorities its jobs may take.

```yaml
default:                  # every tenant not listed under tenants
  priority: [-1000, 0]    # the lowest and highest priority its jobs may ask for
  gpus: 8                 # admitted + running, over all GPU types
  cpus: 64
  memory: 256Gi
  running_jobs: 20
  preempt_others: true    # its jobs may halt running jobs of lower priority to take their room
  opt_out: false          # its jobs may say `learnerkit.preemptible: false`
  weight: 1               # its fair share beside other tenants' jobs of equal priority
tenants:
  team-a: {priority: [-1000, 100], gpus: 16, weight: 3}
```

Every key is optional; a quota left out is unlimited, a range left out is the default's (-1000..0 without a
file); ``preempt_others`` is true, ``opt_out`` false and ``weight`` 1 without a file. A tenant's entry replaces the
default's keys it names and keeps the others.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from learnerkit.common.errors import ConfigError
from learnerkit.common.yamlfile import FieldPath, YamlError, load_located_yaml
from learnerkit.scheduler.admission.admit import Quota
from learnerkit.scheduler.admission.fairshare import Weights
from learnerkit.scheduler.config.policy import DEFAULT_PRIORITY, PriorityRange, SubmitPolicy
from learnerkit.scheduler.errors import SettingsError
from learnerkit.scheduler.manifest.fields import FieldReader, describe
from learnerkit.scheduler.manifest.units import parse_size

TOP_KEYS = ("default", "tenants")
TENANT_KEYS = ("priority", "gpus", "cpus", "memory", "running_jobs", "preempt_others", "opt_out", "weight")


@dataclass(frozen=True)
class TenantLimits:
    quota: Quota = field(default_factory=Quota)
    priority: PriorityRange = DEFAULT_PRIORITY
    preempt_others: bool = True
    """Its jobs may preempt running jobs of lower priority."""
    opt_out: bool = False
    """Its jobs may opt out of preemption (``learnerkit.preemptible: false``)."""
    weight: float = 1.0
    """Its fair share beside other tenants of equal priority (:mod:`learnerkit.scheduler.admission.fairshare`)."""


@dataclass(frozen=True)
class Tenants:
    default: TenantLimits = field(default_factory=TenantLimits)
    tenants: Mapping[str, TenantLimits] = field(default_factory=dict)

    def quotas(self) -> dict[str, Quota]:
        return {name: limits.quota for name, limits in self.tenants.items()}

    def priorities(self) -> dict[str, PriorityRange]:
        return {name: limits.priority for name, limits in self.tenants.items()}

    def opt_outs(self) -> dict[str, bool]:
        return {name: limits.opt_out for name, limits in self.tenants.items()}

    def may_preempt(self) -> dict[str, bool]:
        return {name: limits.preempt_others for name, limits in self.tenants.items()}

    def weights(self) -> Weights:
        return Weights({name: limits.weight for name, limits in self.tenants.items()}, self.default.weight)

    def applied_to(self, policy: SubmitPolicy) -> SubmitPolicy:
        """``policy`` with this file's priority ranges and opt-outs (what a submit checks per tenant)."""
        return replace(
            policy,
            priorities=self.priorities(),
            default_priority=self.default.priority,
            opt_out=self.opt_outs(),
            default_opt_out=self.default.opt_out,
        )


def load_tenants(path: Path | None) -> Tenants:
    """The tenants file's limits; the defaults without a file. Every problem names its line and field."""
    if path is None:
        return Tenants()
    try:
        doc = load_located_yaml(path)
    except YamlError as e:
        raise SettingsError(f"LEARNERKIT_TENANTS: {e}") from e
    except ConfigError as e:
        raise SettingsError(f"LEARNERKIT_TENANTS: {e}") from e
    reader = FieldReader(doc)
    top = reader.mapping(doc.data or {}, (), TOP_KEYS) or {}
    default = _limits(reader, top.get("default"), ("default",), TenantLimits())
    listed = top.get("tenants") or {}
    tenants = {}
    if not isinstance(listed, dict):
        reader.fail(("tenants",), f"expected a mapping of tenant names; got {describe(listed)}")
    else:
        tenants = {str(name): _limits(reader, value, ("tenants", name), default) for name, value in listed.items()}
    if reader.problems:
        raise SettingsError("LEARNERKIT_TENANTS: " + "; ".join(str(p) for p in reader.problems))
    return Tenants(default, tenants)


def _limits(reader: FieldReader, value: Any, loc: FieldPath, base: TenantLimits) -> TenantLimits:
    if value is None:
        return base
    section = reader.mapping(value, loc, TENANT_KEYS)
    if section is None:
        return base
    quota = base.quota
    if "gpus" in section:
        quota = replace(quota, gpus=reader.integer(section, loc, "gpus", minimum=0))
    if "running_jobs" in section:
        quota = replace(quota, jobs=reader.integer(section, loc, "running_jobs", minimum=0))
    if "cpus" in section:
        quota = replace(quota, cpus=reader.positive_number(section, loc, "cpus", required=True))
    if "memory" in section:
        quota = replace(quota, memory_bytes=_memory(reader, section.get("memory"), (*loc, "memory")))
    priority = _priority(reader, section.get("priority"), (*loc, "priority")) if "priority" in section else None
    preempt_others = reader.boolean(section, loc, "preempt_others")
    opt_out = reader.boolean(section, loc, "opt_out")
    weight = reader.positive_number(section, loc, "weight", required=False)
    return TenantLimits(
        quota,
        priority or base.priority,
        base.preempt_others if preempt_others is None else preempt_others,
        base.opt_out if opt_out is None else opt_out,
        base.weight if weight is None else weight,
    )


def _memory(reader: FieldReader, value: Any, loc: FieldPath) -> int | None:
    if not isinstance(value, str):
        reader.fail(loc, f"expected a size such as 256Gi; got {describe(value)}")
        return None
    try:
        return parse_size(value)
    except ValueError as e:
        reader.fail(loc, str(e))
        return None


def _priority(reader: FieldReader, value: Any, loc: FieldPath) -> PriorityRange | None:
    if (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and -1000 <= v <= 1000 for v in value)
        and value[0] <= value[1]
    ):
        return value[0], value[1]
    reader.fail(loc, f"expected [lowest, highest], whole numbers in -1000..1000; got {describe(value)}")
    return None
