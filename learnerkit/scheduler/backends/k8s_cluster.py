"""Deploy, inspect and remove a job's learners on Kubernetes with the official Python client.

Every object carries the job's labels, so teardown and listing find them after a scheduler restart.
Errors are translated here, at the API boundary: an ``ApiException`` becomes a ``BackendError`` that
names the object; a 409 on create is the object already being there (a redeploy), which is fine when the
existing object belongs to the same job.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import kubernetes.client
import kubernetes.config
import urllib3.exceptions
from kubernetes.client.rest import ApiException

from learnerkit.scheduler.backends.deployment import JobDeployment
from learnerkit.scheduler.backends.k8s_objects import (
    INSTANCE_LABEL,
    JOB_LABEL,
    LEARNER_LABEL,
    MANAGED_BY,
    KubeObject,
    PodLayout,
    describe,
    job_objects,
    job_selector,
    layout_for_version,
    validate_objects,
)
from learnerkit.scheduler.errors import BackendError

HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409
DELETION_WAIT_S = 120.0
"""How long a deploy waits for the job's previous object of the same name to finish being deleted (a pod
stops within its termination grace once its kubelet has seen the deletion)."""
DELETION_POLL_S = 0.5
TEARDOWN_ORDER = ("Pod", "PersistentVolumeClaim", "Service", "NetworkPolicy", "Secret")
"""Pods first, so that nothing runs without its policy or its credentials."""


@dataclass(frozen=True)
class _Kind:
    """The client calls for one kind; each takes and returns the client's own types."""

    create: Callable[..., Any]
    read: Callable[..., Any]
    delete: Callable[..., Any]
    list: Callable[..., Any]


@dataclass(frozen=True)
class ContainerStatus:
    name: str
    state: str
    """``waiting``, ``running`` or ``terminated`` (``unknown`` before the kubelet reports)."""
    ready: bool = False
    reason: str | None = None
    exit_code: int | None = None
    restarts: int = 0
    image_id: str = ""
    """The image the runtime runs, as the kubelet reports it (``imageID``: ``repo@sha256:...``, or the runtime's
    image ID); empty before the container has started."""
    message: str | None = None
    """A terminated container's termination message (with ``FallbackToLogsOnError``, its log's end on an error)."""


@dataclass(frozen=True)
class PodStatus:
    name: str
    learner_id: int
    phase: str
    ready: bool
    containers: tuple[ContainerStatus, ...]
    """The sidecar first (an init container in the native layout), then the learner."""
    reason: str | None = None
    """Why a pod is pending or failed: unschedulable (with the scheduler's message), image pull, eviction."""


@dataclass(frozen=True)
class JobStatus:
    job_id: str
    pods: tuple[PodStatus, ...]

    @property
    def exists(self) -> bool:
        return bool(self.pods)


@dataclass(frozen=True)
class Deployed:
    job_id: str
    created: tuple[str, ...]
    """``Kind namespace/name`` of each object this call created."""
    existing: tuple[str, ...]
    """Objects that were already there (a redeploy): left as they are."""


def connect(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """An API client from a kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``), else the in-cluster account."""
    try:
        return kubernetes.config.new_client_from_config(config_file=kubeconfig, context=context)
    except kubernetes.config.ConfigException as from_file:
        try:
            kubernetes.config.load_incluster_config()
        except kubernetes.config.ConfigException as e:
            raise BackendError(f"no Kubernetes configuration: {from_file}; not in a cluster either: {e}") from e
        return kubernetes.client.ApiClient()


def _api_message(e: ApiException) -> str:
    """The API's own ``Status.message`` where the body carries one, else the HTTP reason."""
    body = e.body.decode("utf-8", "replace") if isinstance(e.body, bytes) else e.body
    if body:
        try:
            status = json.loads(body)
        except ValueError:
            return f"{e.status} {e.reason}: {body[:500]}"
        if isinstance(status, dict) and status.get("message"):
            return f"{e.status} {e.reason}: {status['message']}"
    return f"{e.status} {e.reason}"


@contextmanager
def api_errors_named(action: str, what: str, host: str) -> Iterator[None]:
    """Turn the client's exceptions into a ``BackendError`` that says what was done to which object."""
    try:
        yield
    except ApiException as e:
        raise BackendError(f"{action} {what}: {_api_message(e)}", status=e.status) from e
    except urllib3.exceptions.HTTPError as e:
        raise BackendError(f"{action} {what}: cannot reach the Kubernetes API at {host}: {e}") from e


class KubernetesCluster:
    """Deploys jobs as labelled Kubernetes objects; ``.api`` is the raw ``ApiClient`` (escape hatch)."""

    def __init__(
        self, api: Any, *, namespace: str = "default", validate: bool = True, layout: PodLayout | None = None
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.validate = validate
        """Validate every object against the pinned schema before sending it (fails before any call)."""
        self._layout = layout
        core = kubernetes.client.CoreV1Api(api)
        net = kubernetes.client.NetworkingV1Api(api)
        self._kinds = {
            "Pod": _Kind(
                core.create_namespaced_pod,
                core.read_namespaced_pod,
                core.delete_namespaced_pod,
                core.list_namespaced_pod,
            ),
            "Service": _Kind(
                core.create_namespaced_service,
                core.read_namespaced_service,
                core.delete_namespaced_service,
                core.list_namespaced_service,
            ),
            "NetworkPolicy": _Kind(
                net.create_namespaced_network_policy,
                net.read_namespaced_network_policy,
                net.delete_namespaced_network_policy,
                net.list_namespaced_network_policy,
            ),
            "Secret": _Kind(
                core.create_namespaced_secret,
                core.read_namespaced_secret,
                core.delete_namespaced_secret,
                core.list_namespaced_secret,
            ),
            "PersistentVolumeClaim": _Kind(
                core.create_namespaced_persistent_volume_claim,
                core.read_namespaced_persistent_volume_claim,
                core.delete_namespaced_persistent_volume_claim,
                core.list_namespaced_persistent_volume_claim,
            ),
        }

    @classmethod
    def from_kubeconfig(
        cls, kubeconfig: str | None = None, *, context: str | None = None, namespace: str = "default"
    ) -> KubernetesCluster:
        return cls(connect(kubeconfig, context), namespace=namespace)

    @property
    def host(self) -> str:
        return str(self.api.configuration.host)

    @property
    def layout(self) -> PodLayout:
        """The pod layout for this server, from its ``/version`` (asked once)."""
        if self._layout is None:
            with api_errors_named("reading", "the server's version", self.host):
                version = kubernetes.client.VersionApi(self.api).get_code()
            try:
                self._layout = layout_for_version(version.major, version.minor)
            except ValueError as e:
                raise BackendError(f"{self.host}: {e}") from e
        return self._layout

    def deploy(self, job: JobDeployment) -> Deployed:
        """Create the job's objects; an object that exists already (same job) is kept, so a redeploy is a no-op.

        On a failure the objects this call created are removed again, then the error is raised.
        """
        objects = job_objects(job, self.layout)
        if self.validate:
            validate_objects(objects)
        created: list[KubeObject] = []
        existing: list[KubeObject] = []
        try:
            for obj in objects:
                (created if self._create(obj, job.job_id) else existing).append(obj)
        except BackendError:
            for obj in reversed(created):
                self._delete(obj["kind"], obj["metadata"]["name"], obj["metadata"]["namespace"])
            raise
        return Deployed(job.job_id, tuple(map(describe, created)), tuple(map(describe, existing)))

    def _create(self, obj: KubeObject, job_id: str) -> bool:
        """True when created; False when it was there and belongs to ``job_id`` (a 409 on a redeploy).

        The job's object of an earlier attempt still being deleted (a halted or preempted job's pod in its
        termination grace) is not a redeploy: the new one is created once the old one is gone.
        """
        kind, name, namespace = obj["kind"], obj["metadata"]["name"], obj["metadata"]["namespace"]
        deadline = time.monotonic() + DELETION_WAIT_S
        while True:
            try:
                with api_errors_named("creating", describe(obj), self.host):
                    self._kinds[kind].create(namespace, obj)
            except BackendError as e:
                if e.status != HTTP_CONFLICT:
                    raise
                found = self._read(kind, name, namespace, describe(obj))
                if found is None:
                    continue  # deleted between the create and the read
                owner = (found.metadata.labels or {}).get(JOB_LABEL)
                if owner != job_id:
                    raise BackendError(
                        f"creating {describe(obj)}: it exists and belongs to {owner or 'no learnerkit job'}, "
                        f"not {job_id}",
                        status=HTTP_CONFLICT,
                    ) from e
                if found.metadata.deletion_timestamp is None:
                    return False
                if time.monotonic() >= deadline:
                    raise BackendError(
                        f"creating {describe(obj)}: the previous one is still being deleted after {DELETION_WAIT_S:g}s",
                        status=HTTP_CONFLICT,
                    ) from e
                time.sleep(DELETION_POLL_S)
                continue
            return True

    def _read(self, kind: str, name: str, namespace: str, what: str) -> Any | None:
        """The object, or None when it is gone."""
        try:
            with api_errors_named("reading", what, self.host):
                return self._kinds[kind].read(name, namespace)
        except BackendError as e:
            if e.status == HTTP_NOT_FOUND:
                return None
            raise

    def _delete(self, kind: str, name: str, namespace: str, **options: Any) -> bool:
        """Delete one object (``options``: the delete call's, e.g. ``grace_period_seconds``); False when it was
        gone already."""
        try:
            with api_errors_named("deleting", f"{kind} {namespace}/{name}", self.host):
                self._kinds[kind].delete(name, namespace, **options)
        except BackendError as e:
            if e.status == HTTP_NOT_FOUND:
                return False
            raise
        return True

    def _owned(self, kind: str, job_id: str | None, namespace: str) -> list[Any]:
        """The job's objects of one kind (every learnerkit job's when ``job_id`` is None).

        The labels are checked again on the answer: a selector the server ignored must not make teardown
        delete another job's objects.
        """
        selector = job_selector(job_id) if job_id else f"app.kubernetes.io/managed-by={MANAGED_BY}"
        with api_errors_named("listing", f"{kind}s in {namespace} ({selector})", self.host):
            items = self._kinds[kind].list(namespace, label_selector=selector).items
        return [
            item
            for item in items
            if (labels := item.metadata.labels or {}).get("app.kubernetes.io/managed-by") == MANAGED_BY
            and (job_id is None or labels.get(JOB_LABEL) == job_id)
        ]

    def status(self, job_id: str, namespace: str | None = None) -> JobStatus:
        """Each learner pod's phase, readiness, container states and, for a pending pod, why."""
        pods = self._owned("Pod", job_id, namespace or self.namespace)
        found = sorted((_pod_status(pod) for pod in pods), key=lambda pod: pod.learner_id)
        return JobStatus(job_id, tuple(found))

    def teardown(self, job_id: str, namespace: str | None = None) -> list[str]:
        """Delete everything labelled with the job; returns ``Kind namespace/name`` of what was deleted."""
        namespace = namespace or self.namespace
        deleted: list[str] = []
        for kind in TEARDOWN_ORDER:
            for item in self._owned(kind, job_id, namespace):
                if self._delete(kind, item.metadata.name, namespace):
                    deleted.append(f"{kind} {namespace}/{item.metadata.name}")
        return deleted

    def delete_pods_on(self, job_id: str, nodes: frozenset[str], namespace: str | None = None) -> list[str]:
        """Force-delete (``gracePeriodSeconds=0``) the job's pods bound to ``nodes``, as ``kubectl delete --force
        --grace-period=0`` does for a dead node's pods: the API server removes them at once instead of waiting for
        a kubelet that will never confirm. Returns ``Pod namespace/name`` of each deleted."""
        namespace = namespace or self.namespace
        deleted: list[str] = []
        for pod in self._owned("Pod", job_id, namespace):
            name = pod.metadata.name
            if pod.spec.node_name in nodes and self._delete("Pod", name, namespace, grace_period_seconds=0):
                deleted.append(f"Pod {namespace}/{name}")
        return deleted

    def list_jobs(self, namespace: str | None = None, instance: str | None = None) -> list[str]:
        """Job IDs with any object left in the namespace (a half torn-down job included); with ``instance``,
        only of the jobs that scheduler instance deployed.

        An object already being deleted does not count: deleted is all a teardown can do to it, and a finished
        job's claim held by its protection finalizer (until its pods are gone, or for good where no controller
        removes the finalizer) would otherwise make every start sweep the job again."""
        namespace = namespace or self.namespace
        jobs = {
            (item.metadata.labels or {}).get(JOB_LABEL)
            for kind in TEARDOWN_ORDER
            for item in self._owned(kind, None, namespace)
            if item.metadata.deletion_timestamp is None
            and (instance is None or (item.metadata.labels or {}).get(INSTANCE_LABEL) == instance)
        }
        return sorted(job for job in jobs if job)


def _container_status(name: str, raw: Any | None) -> ContainerStatus:
    if raw is None or raw.state is None:
        return ContainerStatus(name=name, state="unknown")
    state, image_id, restarts = raw.state, raw.image_id or "", raw.restart_count or 0
    if state.terminated is not None:
        return ContainerStatus(
            name=name,
            state="terminated",
            reason=state.terminated.reason,
            exit_code=state.terminated.exit_code,
            message=state.terminated.message or None,
            restarts=restarts,
            image_id=image_id,
        )
    if state.waiting is not None:
        return ContainerStatus(
            name=name, state="waiting", reason=state.waiting.reason, restarts=restarts, image_id=image_id
        )
    return ContainerStatus(name=name, state="running", ready=bool(raw.ready), restarts=restarts, image_id=image_id)


def _pod_status(pod: Any) -> PodStatus:
    status = pod.status
    conditions = {item.type: item for item in (status.conditions if status else None) or []}
    raw = {
        item.name: item
        for item in [
            *((status.init_container_statuses or []) if status else []),
            *((status.container_statuses or []) if status else []),
        ]
    }
    names = [item.name for item in (pod.spec.init_containers or [])] + [item.name for item in pod.spec.containers]
    containers = tuple(_container_status(name, raw.get(name)) for name in names)
    reason = status.reason if status else None
    if reason and status.message:
        reason = f"{reason}: {status.message}"
    scheduled = conditions.get("PodScheduled")
    if scheduled is not None and scheduled.status == "False":
        reason = f"{scheduled.reason}: {scheduled.message}" if scheduled.message else scheduled.reason
    elif reason is None:
        reason = next((item.reason for item in containers if item.state == "waiting" and item.reason), None)
    ready = conditions.get("Ready")
    return PodStatus(
        name=pod.metadata.name,
        learner_id=int((pod.metadata.labels or {}).get(LEARNER_LABEL, "0")),
        phase=(status.phase if status else None) or "Unknown",
        ready=ready is not None and ready.status == "True",
        containers=containers,
        reason=reason,
    )
