"""The tenants file: quotas and priority ranges per tenant, problems named with their line."""

from __future__ import annotations

from pathlib import Path

import pytest

from learnerkit.scheduler.admission.admit import Quota
from learnerkit.scheduler.admission.capacity import GIB
from learnerkit.scheduler.config.tenants import TenantLimits, load_tenants
from learnerkit.scheduler.errors import SettingsError


def test_without_a_file_nothing_is_capped_and_priorities_stay_at_or_below_zero() -> None:
    tenants = load_tenants(None)
    assert tenants.default == TenantLimits(Quota(), (-1000, 0))
    assert tenants.quotas() == {} and tenants.priorities() == {}


def test_a_tenant_overrides_the_defaults_it_names(tmp_path: Path) -> None:
    path = tmp_path / "tenants.yaml"
    path.write_text(
        "default: {priority: [-10, 10], gpus: 8, cpus: 64, memory: 256Gi, running_jobs: 20}\n"
        "tenants:\n  team-a: {priority: [0, 1000], gpus: 16}\n"
    )
    tenants = load_tenants(path)
    assert tenants.default == TenantLimits(Quota(8, 64.0, 256 * GIB, 20), (-10, 10))
    assert tenants.tenants["team-a"] == TenantLimits(Quota(16, 64.0, 256 * GIB, 20), (0, 1000))


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("default: {priority: [5, 1]}\n", "tenants.yaml:1: default.priority: expected [lowest, highest]"),
        ("tenants:\n  a: {gpus: -1}\n", "tenants.yaml:2: tenants.a.gpus: must be at least 0"),
        ("tenants:\n  a: {memory: 12 parsecs}\n", "tenants.a.memory: '12 parsecs'"),
        ("default: {colour: red}\n", "default.colour: unknown key 'colour'"),
        ("tenants: [a]\n", "tenants: expected a mapping of tenant names"),
    ],
)
def test_problems_name_the_file_line_and_field(tmp_path: Path, text: str, named: str) -> None:
    path = tmp_path / "tenants.yaml"
    path.write_text(text)
    with pytest.raises(SettingsError, match="LEARNERKIT_TENANTS") as caught:
        load_tenants(path)
    assert named in str(caught.value)


def test_who_may_preempt_and_opt_out_defaults_and_overrides(tmp_path: Path) -> None:
    assert (TenantLimits().preempt_others, TenantLimits().opt_out) == (True, False)
    path = tmp_path / "tenants.yaml"
    path.write_text("default: {opt_out: true}\ntenants:\n  batch: {preempt_others: false}\n  team-a: {gpus: 2}\n")
    tenants = load_tenants(path)
    assert tenants.may_preempt() == {"batch": False, "team-a": True}
    assert tenants.opt_outs() == {"batch": True, "team-a": True} and tenants.default.opt_out


def test_preemption_settings_must_be_true_or_false(tmp_path: Path) -> None:
    path = tmp_path / "tenants.yaml"
    path.write_text("tenants:\n  batch: {preempt_others: sometimes}\n")
    with pytest.raises(SettingsError) as caught:
        load_tenants(path)
    assert "tenants.yaml:2: tenants.batch.preempt_others: expected true or false" in str(caught.value)


def test_fair_share_weights_default_to_one_and_must_be_above_zero(tmp_path: Path) -> None:
    path = tmp_path / "tenants.yaml"
    path.write_text("default: {weight: 2}\ntenants:\n  heavy: {weight: 3.5}\n  team-a: {gpus: 2}\n")
    weights = load_tenants(path).weights()
    assert (weights.of("heavy"), weights.of("team-a"), weights.of("unlisted")) == (3.5, 2.0, 2.0)
    assert load_tenants(None).weights().of("anyone") == 1.0
    path.write_text("tenants:\n  heavy: {weight: 0}\n")
    with pytest.raises(SettingsError) as caught:
        load_tenants(path)
    assert "tenants.yaml:2: tenants.heavy.weight: must be more than 0" in str(caught.value)
