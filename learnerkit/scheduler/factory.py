"""``create_scheduler``: the real scheduler behind ``learnerkit scheduler serve``, on Docker or Kubernetes.

Nothing here does I/O until the API server's lifespan runs: then it pins the sidecar image (by ID or digest),
connects etcd, rebuilds the jobs and starts the scheduling loop, and on shutdown stops the loop (running jobs go
on; a restart finds them).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import os
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime

from controller_sidecar.etcdstore import EtcdStore, LockHeldError
from controller_sidecar.settings import EtcdSettings as SidecarEtcdSettings
from learnerkit.common.engine import EngineError, image_id
from learnerkit.common.keyring import published_keys
from learnerkit.common.project import find_project_root
from learnerkit.common.signing import load_signer, public_pem
from learnerkit.scheduler.admission.admit import AdmissionPolicy
from learnerkit.scheduler.api.hosting import HostedScheduler
from learnerkit.scheduler.backends.deployment import Egress
from learnerkit.scheduler.backends.docker import DockerBackend
from learnerkit.scheduler.backends.k8s import KubernetesBackend
from learnerkit.scheduler.backends.k8s_cluster import KubernetesCluster
from learnerkit.scheduler.backends.k8s_objects import SIDECAR_METRICS_PORT
from learnerkit.scheduler.backends.protocol import Backend
from learnerkit.scheduler.config.packageindex import sidecar_packages
from learnerkit.scheduler.config.policy import SubmitPolicy
from learnerkit.scheduler.config.settings import BackendKind, SchedulerSettings
from learnerkit.scheduler.config.tenants import Tenants, load_tenants
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.core.planning import Platform
from learnerkit.scheduler.core.scheduler import Scheduler
from learnerkit.scheduler.errors import SettingsError
from learnerkit.scheduler.events.hub import EventHub
from learnerkit.scheduler.events.source import follow_etcd
from learnerkit.scheduler.images.catalog import ImageCatalog
from learnerkit.scheduler.images.gate import ImageGate
from learnerkit.scheduler.images.sidecar import pin_sidecar
from learnerkit.scheduler.jobs.store import JobStore
from learnerkit.scheduler.preemption.rules import PreemptionRules
from learnerkit.scheduler.provenance.facts import ImageFact
from learnerkit.scheduler.provenance.writer import ProvenanceWriter
from learnerkit_build.builds.sidecarimage import sidecar_reference
from learnerkit_build.recipes.pipconfig import pip_config
from learnerkit_build.scan.records import load_record

LOGGER = logging.getLogger(__name__)


def egress_from(specs: tuple[str, ...]) -> tuple[Egress, ...]:
    """``CIDR:port`` entries into NetworkPolicy egress rules; the error names the setting."""
    rules = []
    for spec in specs:
        cidr, _, port = spec.rpartition(":")
        try:
            ipaddress.ip_network(cidr)
        except ValueError:
            raise SettingsError(f"LEARNERKIT_K8S_EGRESS: {spec!r} is not CIDR:port") from None
        if not port.isdigit():
            raise SettingsError(f"LEARNERKIT_K8S_EGRESS: {spec!r} is not CIDR:port")
        rules.append(Egress(cidr, int(port)))
    return tuple(rules)


def backend_for(settings: SchedulerSettings) -> tuple[Backend, int]:
    """The backend of the settings, and the sidecars' metrics port on it."""
    if settings.backend.kind is BackendKind.KUBERNETES:
        cluster = KubernetesCluster.from_kubeconfig(namespace=settings.backend.namespace)
        backend = settings.backend
        return (
            KubernetesBackend(cluster, egress_from(backend.egress), backend.shared_storage_class, backend.shared_size),
            SIDECAR_METRICS_PORT,
        )
    # On the Docker engine sidecars share the host network: no fixed port, or two would clash.
    return DockerBackend(settings.backend.job_disk), 0


def submit_policy(settings: SchedulerSettings, tenants: Tenants) -> SubmitPolicy:
    """What tenants may submit: the limits and trust settings, and the tenants file's priority ranges."""
    limits, trust = settings.limits, settings.trust
    return tenants.applied_to(
        SubmitPolicy(
            max_manifest_bytes=limits.max_manifest_bytes,
            parse_seconds=limits.parse_budget_s,
            max_learners=limits.max_learners,
            object_stores=trust.allowed_stores(settings.s3),
            host_paths=trust.host_paths,
            defaults=limits.defaults,
        )
    )


def describe_image(gate: ImageGate) -> Callable[[str], ImageFact]:
    """An image as the provenance names it: the reference the gate checked, the ID the engine has, and the digests
    of the build tool's SBOM and scan report of that ID with the scan's verdict, where there are records."""

    def describe(image: str) -> ImageFact:
        reference = gate.named(image)
        try:
            digest = image if image.startswith("sha256:") else image_id(reference) or ""
        except EngineError:
            digest = ""  # Kubernetes: the engine that ran it is the cluster's, not this one
        if not digest and "@sha256:" in reference:
            digest = "sha256:" + reference.rpartition("@sha256:")[2]  # deployed by its registry digest
        record = load_record(digest) if digest else None
        if record is None:
            return ImageFact(reference, digest)
        verdict = "passed" if record.passed else "failed"
        return ImageFact(reference, digest, {"sbom": record.sbom_sha256, "scan": record.report_sha256}, verdict)

    return describe


LOCK_TTL_S = 15
"""A scheduler that dies leaves its etcd root to the next one after this long."""


@asynccontextmanager
async def sole_scheduler(etcd: EtcdStore, settings: SchedulerSettings) -> AsyncIterator[None]:
    """Hold ``<root>.lock`` on a lease while the scheduler serves: two schedulers on one etcd root would admit,
    deploy and end the same jobs. The second is refused, naming the first."""
    holder = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "api": f"{settings.api.host}:{settings.api.port}",
        "since": datetime.now(UTC).isoformat(),
    }
    key = f"{settings.etcd.root}.lock"
    try:
        async with etcd.hold_lock(key, json.dumps(holder), LOCK_TTL_S):
            yield
    except LockHeldError as e:
        raise SettingsError(
            f"another scheduler serves the etcd root {settings.etcd.root}: {e}. Stop it, or give this one its own "
            "root (LEARNERKIT_ETCD_ROOT)"
        ) from e


def create_scheduler(settings: SchedulerSettings) -> HostedScheduler:
    """Refuses (ConfigError naming ``$LEARNERKIT_SIGNING_KEY``) without a readable platform signing key."""
    signer = load_signer(settings.signing.key, settings.signing.source, settings.signing.passphrase)
    keys = published_keys(settings.signing.key, signer)
    catalog = ImageCatalog(find_project_root(), settings.backend.registry)
    backend, metrics_port = backend_for(settings)
    gate = ImageGate(
        settings.trust.images,
        catalog.references() if settings.trust.project_images else (),
        pin_ids=settings.backend.kind is BackendKind.DOCKER,  # deploy what was checked; Kubernetes pulls by name
    )
    tenants = load_tenants(settings.limits.tenants)
    sidecar_image = settings.backend.sidecar_image or sidecar_reference()
    docker = settings.backend.kind is BackendKind.DOCKER
    packages = sidecar_packages(settings.packages, pip_config(find_project_root()), can_mount=docker)
    options = SchedulerOptions(
        platform=Platform(
            etcd_endpoints=",".join(settings.etcd.endpoints),
            sidecar_image=sidecar_image,
            metrics_port=metrics_port,
            etcd_root=settings.etcd.root,
            sidecar_mounts=packages.mounts,
            sidecar_files=packages.files,
        ),
        catalog=catalog.frameworks(),
        resolve_image=gate.gated(catalog.resolve),
        policy=AdmissionPolicy(quotas=tenants.quotas(), default_quota=tenants.default.quota, weights=tenants.weights()),
        preemption=PreemptionRules(
            min_run_s=settings.limits.preemption_min_run_s,
            max_preemptions=settings.limits.preemption_max_per_job,
            may_preempt=tenants.may_preempt(),
            default_may_preempt=tenants.default.preempt_others,
        ),
        submit_policy=submit_policy(settings, tenants),
        instance=settings.trust.instance,
        packages=packages.index,
        python_of=lambda image: catalog.python_of(gate.named(image)),
        locked_of=lambda image: catalog.locked_of(gate.named(image)),
        resolve_evaluator=gate.gated_evaluator(catalog.evaluator),
        pids=settings.limits.pids,
        abandoned_upload_grace_s=settings.s3.abandoned_upload_grace_s,
        provenance=ProvenanceWriter(signer, describe_image(gate), sidecar_image),
        model_catalog=settings.catalog_registry,
        node_lost_grace_s=settings.limits.node_lost_grace_s,
        loop_stall_s=settings.limits.loop_stall_s,
        attempt_figures=True,
    )
    store = JobStore(root=settings.etcd.root)
    scheduler = Scheduler(store, backend, options)
    events = EventHub(settings.etcd.root, streams_per_address=max(1, settings.api.max_connections_per_address // 2))
    etcd_settings = SidecarEtcdSettings(
        endpoints=settings.etcd.endpoints,
        username=settings.etcd.username,
        password=settings.etcd.password,
        root=settings.etcd.root,
    )

    @asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        platform = scheduler.shared.options.platform
        pinned = await asyncio.to_thread(
            pin_sidecar, platform.sidecar_image, by_id=settings.backend.kind is BackendKind.DOCKER
        )
        provenance = options.provenance and replace(options.provenance, sidecar_image=pinned)
        scheduler.shared.options = replace(
            options, platform=replace(platform, sidecar_image=pinned), provenance=provenance
        )
        LOGGER.info("sidecar image %s, deployed as %s", platform.sidecar_image, pinned)
        etcd = await EtcdStore.connect(etcd_settings)
        try:
            async with sole_scheduler(etcd, settings):
                store.attach(etcd)
                await scheduler.loop.rebuild()
                stop = asyncio.Event()
                loop = asyncio.create_task(scheduler.loop.run(stop), name="scheduler loop")
                sweep = asyncio.create_task(scheduler.abort_abandoned_uploads(), name="abandoned uploads")
                stream = asyncio.create_task(follow_etcd(events, etcd), name="event stream")
                try:
                    yield
                finally:
                    stop.set()
                    sweep.cancel()
                    stream.cancel()
                    await asyncio.gather(sweep, stream, return_exceptions=True)
                    await loop
        finally:
            await etcd.close()

    return HostedScheduler(
        facade=scheduler,
        registry=scheduler.shared.metrics.registry,
        operator_registry=scheduler.shared.metrics.operator_registry,
        lifespan=lifespan,
        public_key=public_pem(signer),
        keys=tuple(keys),
        health=scheduler.loop.stalled,
        signer=signer,
        events=events,
    )
