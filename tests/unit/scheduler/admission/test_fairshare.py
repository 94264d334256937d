"""Fair share between tenants of equal priority: room goes to the tenant furthest below its weighted share, and
under contention each tenant's running share converges to its weight."""

from __future__ import annotations

import pytest

from learnerkit.scheduler.admission.admit import AdmissionPolicy, AdmissionState
from learnerkit.scheduler.admission.fairshare import Weights
from learnerkit.scheduler.admission.simulate import Workload, cpu_seconds
from tests.unit.scheduler.helpers import cpu_node, job, learner

WEIGHTS = Weights({"light": 1.0, "heavy": 3.0})


def admitted_per_tenant(state: AdmissionState) -> dict[str, int]:
    counts: dict[str, int] = {}
    for admitted in state.schedule(0.0).admitted:
        tenant = admitted.job_id.split("-")[0]
        counts[tenant] = counts.get(tenant, 0) + 1
    return counts


def test_room_is_split_by_weight_whoever_submitted_first() -> None:
    """8 CPUs, 'light' (weight 1) queued 20 one-CPU jobs before 'heavy' (weight 3): 2 and 6 of them run."""
    state = AdmissionState([cpu_node("n1", cpus=8)], AdmissionPolicy(weights=WEIGHTS))
    for i in range(20):
        state.submit(job(f"light-{i:02d}", learner(cpus=1), tenant="light", submitted_at=float(i)))
    for i in range(20):
        state.submit(job(f"heavy-{i:02d}", learner(cpus=1), tenant="heavy", submitted_at=100.0 + i))
    assert admitted_per_tenant(state) == {"light": 2, "heavy": 6}


def test_priority_still_comes_first() -> None:
    state = AdmissionState([cpu_node("n1", cpus=4)], AdmissionPolicy(weights=WEIGHTS))
    for i in range(4):
        state.submit(job(f"light-{i}", learner(cpus=1), tenant="light", priority=5))
        state.submit(job(f"heavy-{i}", learner(cpus=1), tenant="heavy", priority=0))
    assert admitted_per_tenant(state) == {"light": 4}


def test_within_a_tenant_jobs_keep_their_submission_order() -> None:
    state = AdmissionState([cpu_node("n1", cpus=2)], AdmissionPolicy(weights=WEIGHTS))
    for i in (3, 1, 2):
        state.submit(job(f"heavy-{i}", learner(cpus=1), tenant="heavy", submitted_at=float(i)))
    assert [a.job_id for a in state.schedule(0.0).admitted] == ["heavy-1", "heavy-2"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_cpu_seconds_converge_to_the_weights_under_contention(seed: int) -> None:
    """Two tenants saturating 4 nodes of 8 CPUs for 10 simulated minutes: CPU-seconds within 10 % of 1:3."""
    used = cpu_seconds(
        [cpu_node(f"n{i}", cpus=8) for i in range(4)],
        AdmissionPolicy(weights=WEIGHTS),
        [Workload("light"), Workload("heavy")],
        duration_s=600.0,
        seed=seed,
    )
    assert used["heavy"] / used["light"] == pytest.approx(3.0, rel=0.10)
