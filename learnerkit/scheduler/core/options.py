"""What a scheduler is built with: its platform, catalogs, policies and limits, and its instance id."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from controller_sidecar.requirements import PackageIndex
from learnerkit.pair.spec import PidsLimits
from learnerkit.scheduler.admission.admit import AdmissionPolicy
from learnerkit.scheduler.config.policy import SubmitPolicy
from learnerkit.scheduler.core.planning import Platform
from learnerkit.scheduler.evaluations.runner import EvaluatorResolver
from learnerkit.scheduler.manifest.model import FrameworkCatalog, JobManifest
from learnerkit.scheduler.modelcode.receive import ModelLimits
from learnerkit.scheduler.preemption.rules import PreemptionRules
from learnerkit.scheduler.provenance.writer import ProvenanceWriter


def _unknown_python(_image: str) -> str | None:
    return None


def _nothing_locked(_image: str) -> Mapping[str, str]:
    return {}


@dataclass(frozen=True)
class SchedulerOptions:
    platform: Platform
    catalog: FrameworkCatalog | None
    resolve_image: Callable[[JobManifest], str]
    policy: AdmissionPolicy = field(default_factory=AdmissionPolicy)
    """Quotas and the ready timeout."""
    preemption: PreemptionRules = field(default_factory=PreemptionRules)
    """Who may preempt, and the minimum run time."""
    submit_policy: SubmitPolicy = field(default_factory=SubmitPolicy)
    """What tenants may submit; its default allows no object store, so every job is refused until one is named."""
    instance: str | None = None
    """This scheduler's instance id (``$LEARNERKIT_SCHEDULER_INSTANCE``); None: derived from the etcd endpoints and
    root at the first start, and kept in etcd. It labels what the scheduler deploys; its orphan sweep removes
    only what carries its own id."""
    model_limits: ModelLimits = field(default_factory=ModelLimits)
    """What a model archive may expand to (the sidecars' own limits)."""
    packages: PackageIndex = field(default_factory=PackageIndex)
    """Where sidecars install a model's requirements from (``LEARNERKIT_PIP_*``)."""
    pids: PidsLimits = field(default_factory=PidsLimits)
    """The processes and threads each learner and sidecar may hold (the Docker backend's ``pids_limit``)."""
    python_of: Callable[[str], str | None] = _unknown_python
    """The Python version (``3.11``) of a learner image; None: the sidecar's own."""
    locked_of: Callable[[str], Mapping[str, str]] = _nothing_locked
    """The locked Python packages of a learner image (name -> version): a job's requirements may not replace them."""
    lease_ttl_s: float = 10.0
    """The sidecars' lease: a learner without one whose sidecar is gone from the backend is lost after twice this."""
    lease_renewal_grace_s: float = 300.0
    """How long a learner whose sidecar still runs may go without a lease before it is lost. A lapsed lease alone
    is a blip (etcd paused or out of reach): the sidecar renews it once etcd answers. A sidecar gone from the
    backend without a lease is lost after twice the lease's TTL instead."""
    interval_s: float = 0.5
    loop_stall_s: float = 60.0
    """``/healthz`` answers 503 once the control loop has completed no step for this long
    (``$LEARNERKIT_LOOP_STALL_S``): stuck, or failing every step (etcd or the backend not answering)."""
    resolve_evaluator: EvaluatorResolver | None = None
    """The evaluator image of an evaluation's kind, through the image gate; None: evaluations end ``crashed``."""
    nodes_interval_s: float = 10.0
    """How often the loop reads the backend's nodes again: nodes added are used, cordoned ones take no new learner."""
    node_lost_grace_s: float = 60.0
    """A node not Ready for this long (``$LEARNERKIT_NODE_LOST_GRACE_S``) is lost: its jobs are torn down and
    resume elsewhere from their last checkpoint, their attempt ending NODE_LOST. A node deleted is lost at once."""
    abandoned_upload_grace_s: float = 3600.0
    """An open multipart upload under an ended job's prefix older than this is aborted when the scheduler starts
    (:mod:`learnerkit.scheduler.core.uploads`)."""
    attempt_figures: bool = False
    """Read each ended attempt's lost steps and the next one's checkpoint digest back from the job's results store
    (:mod:`learnerkit.scheduler.core.attemptfigures`); the service sets it, tests without a store leave it off."""
    provenance: ProvenanceWriter | None = None
    """Signs every job's provenance as it ends (docs/provenance.md); None: no provenance is written."""
    model_catalog: str | None = None
    """The model catalog's registry, ``host:port``, where a job's ``catalog:`` field registers its model once its
    evaluations pass (docs/catalog.md); None: such a job's status says there is none."""


def derive_instance(etcd_endpoints: str, root: str) -> str:
    """An instance id from where the scheduler keeps its jobs: the same etcd and root give the same id."""
    endpoints = ",".join(sorted(e.strip() for e in etcd_endpoints.split(",") if e.strip()))
    return "lk-" + hashlib.sha256(f"{endpoints}|{root}".encode()).hexdigest()[:12]
