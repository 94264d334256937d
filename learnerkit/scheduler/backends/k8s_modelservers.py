"""Model servers on Kubernetes: the counterpart of ``modelservers`` (Docker) for `model serve --backend kubernetes`.

A served name is one Service (its stable address) and one pod per version it runs (``k8s_modelobjects``). A
roll-over creates the new version's pod, sends it the verified files (``k8s_modelfiles``), waits until the kubelet
reports it ready (the readiness probe on ``/v2/health/ready``; a NetworkPolicy, made first, denies the name's pods
every egress), only then moves the Service's selector to it, and
then deletes the old pods, which drain what they were answering on SIGTERM. `stop` deletes the Service and the
pods and waits until they are gone. Every object is found by its labels, checked again on the answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes.client

from learnerkit.scheduler.backends import k8s_modelobjects as mo
from learnerkit.scheduler.backends.k8s_cluster import HTTP_CONFLICT, HTTP_NOT_FOUND, api_errors_named
from learnerkit.scheduler.backends.k8s_modelfiles import send_files
from learnerkit.scheduler.backends.k8s_objects import MANAGED_BY, KubeObject, validate_objects
from learnerkit.scheduler.backends.modelservers import Served, ServingError
from learnerkit.scheduler.errors import BackendError

READY_TIMEOUT_S = 180.0
GONE_TIMEOUT_S = 120.0
ENDPOINTS_TIMEOUT_S = 30.0
POLL_S = 0.25
LOG_LINES = 20
SendFiles = Callable[[str, Path, Path], None]
"""Puts a version's files (folder, keys folder) into the named pod's ``receive`` container."""


class KubernetesModelServers:
    """Served models in one namespace; ``send`` replaces the exec channel (tests: kmock has none)."""

    def __init__(self, api: Any, namespace: str, *, send: SendFiles | None = None, validate: bool = True) -> None:
        self.api = api
        self.namespace = namespace
        self.validate = validate
        self._core = kubernetes.client.CoreV1Api(api)
        self._net = kubernetes.client.NetworkingV1Api(api)
        self._send = send or (lambda pod, model, keys: send_files(api, namespace, pod, model, keys))

    @property
    def host(self) -> str:
        return str(self.api.configuration.host)

    def roll_over(
        self, tenant: str, name: str, digest: str, folder: Path, keys: Path, image: str, gated_id: str | None = None
    ) -> Served:
        """``name`` served at its Service by a ready pod of ``digest``: created (or kept), the Service pointed at it
        once it is ready, then every pod of another version deleted. A pod created here is deleted again, and the
        Service left as it was, when it never gets ready or runs another image than ``gated_id`` (the image ID
        the gates checked on this host; comparable where the node reports an image ID, not a registry digest)."""
        key_files = sorted(path.name for path in keys.glob("*.pub"))
        pod = mo.server_pod(tenant, name, digest, image, self.namespace, key_files)
        service = self._service(tenant, name)
        service_object = mo.model_service(tenant, name, digest, self.namespace)
        pods = self._pods(tenant, name)
        wanted = mo.version_label(digest)
        old = [p for p in pods if p.metadata.labels.get(mo.VERSION_LABEL) != wanted]
        same = [p for p in pods if p.metadata.labels.get(mo.VERSION_LABEL) == wanted and not _deleting(p)]
        policy = mo.model_policy(tenant, name, self.namespace)
        if self.validate:
            validate_objects([pod, service_object, policy])
        fresh = service is None and not pods
        self._ensure_policy(tenant, name, policy)  # before any pod: none runs unfenced
        created = not same
        pod_name = pod["metadata"]["name"]
        if created:
            try:
                with api_errors_named("creating", f"Pod {self.namespace}/{pod_name}", self.host):
                    self._core.create_namespaced_pod(self.namespace, pod)
            except BackendError:
                if fresh:
                    self._delete_policy(mo.service_name(tenant, name))
                raise
        try:
            if created or not _ready(same[0]):
                self._wait_ready(pod_name, name, (folder, keys))
            if gated_id is not None:
                _check_image(self._read_pod(pod_name), gated_id)
            if service is None:
                with api_errors_named(
                    "creating", f"Service {self.namespace}/{mo.service_name(tenant, name)}", self.host
                ):
                    self._core.create_namespaced_service(self.namespace, service_object)
            elif service.spec.selector != mo.version_selector(tenant, name, digest):
                self._point(service.metadata.name, mo.version_selector(tenant, name, digest))
        except (ServingError, BackendError):
            if created:
                self._delete_pod(pod_name)
            if fresh:  # the name was not served: nothing of it is left
                self._delete_policy(mo.service_name(tenant, name))
            raise
        if old:  # switched: the new pod serves; on a failure here the old ones are only kept
            self._wait_endpoints(mo.service_name(tenant, name), pod_name)
        for previous in old:
            self._delete_pod(previous.metadata.name)
        return self._described(tenant, name, digest, pod_name)

    def stop(self, tenant: str, name: str) -> list[str]:
        """Delete the Service of ``name`` (no new request reaches it), then its pods (each drains what it is
        answering on SIGTERM), and wait until none is left; the versions they served (ServingError for none)."""
        service, pods, policy = self._service(tenant, name), self._pods(tenant, name), self._policy(tenant, name)
        if service is None and not pods and policy is None:
            raise ServingError(f"model {name} is not served for tenant {tenant} in namespace {self.namespace}")
        if service is not None:
            with api_errors_named("deleting", f"Service {self.namespace}/{service.metadata.name}", self.host):
                _gone_ok(lambda: self._core.delete_namespaced_service(service.metadata.name, self.namespace))
        for pod in pods:
            self._delete_pod(pod.metadata.name)
        if policy is not None:
            self._delete_policy(policy.metadata.name)
        deadline = time.monotonic() + GONE_TIMEOUT_S
        while left := self._left(tenant, name):
            if time.monotonic() >= deadline:
                raise ServingError(f"{name}: still there after {GONE_TIMEOUT_S:g} s: {', '.join(left)}")
            time.sleep(POLL_S)
        return [(p.metadata.annotations or {}).get(mo.DIGEST_ANNOTATION, "") for p in pods]

    def _left(self, tenant: str, name: str) -> list[str]:
        """``Kind name`` of every object of the served name still there."""
        service, policy = self._service(tenant, name), self._policy(tenant, name)
        return [
            *(f"Pod {p.metadata.name}" for p in self._pods(tenant, name)),
            *([f"Service {service.metadata.name}"] if service is not None else []),
            *([f"NetworkPolicy {policy.metadata.name}"] if policy is not None else []),
        ]

    def _policy(self, tenant: str, name: str) -> Any | None:
        wanted = mo.service_name(tenant, name)
        with api_errors_named("reading", f"NetworkPolicy {self.namespace}/{wanted}", self.host):
            try:
                found = self._net.read_namespaced_network_policy(wanted, self.namespace)
            except kubernetes.client.ApiException as e:
                if e.status == HTTP_NOT_FOUND:
                    return None
                raise
        return found if _ours(found, tenant, name) else None

    def _ensure_policy(self, tenant: str, name: str, policy: KubeObject) -> None:
        what = f"NetworkPolicy {self.namespace}/{policy['metadata']['name']}"
        if self._policy(tenant, name) is not None:
            return
        try:
            with api_errors_named("creating", what, self.host):
                self._net.create_namespaced_network_policy(self.namespace, policy)
        except BackendError as e:
            if e.status != HTTP_CONFLICT:
                raise
            if self._policy(tenant, name) is None:
                raise BackendError(f"creating {what}: it exists and is not {tenant}'s {name}", status=e.status) from e

    def _delete_policy(self, policy: str) -> None:
        with api_errors_named("deleting", f"NetworkPolicy {self.namespace}/{policy}", self.host):
            _gone_ok(lambda: self._net.delete_namespaced_network_policy(policy, self.namespace))

    def served(self, tenant: str, name: str) -> Served:
        """The version the Service points at; ServingError when ``name`` is not served."""
        service = self._service(tenant, name)
        if service is None:
            raise ServingError(f"model {name} is not served for tenant {tenant} in namespace {self.namespace}")
        version = (service.spec.selector or {}).get(mo.VERSION_LABEL)
        pod = next((p for p in self._pods(tenant, name) if p.metadata.labels.get(mo.VERSION_LABEL) == version), None)
        if pod is None:
            raise ServingError(f"model {name}: its Service points at no pod (version {version})")
        digest = (pod.metadata.annotations or {}).get(mo.DIGEST_ANNOTATION, "")
        return self._described(tenant, name, digest, pod.metadata.name)

    def _described(self, tenant: str, name: str, digest: str, pod: str) -> Served:
        url = mo.service_url(tenant, name, self.namespace)
        return Served(name, digest, url, pod, mo.service_name(tenant, name))

    def _service(self, tenant: str, name: str) -> Any | None:
        wanted = mo.service_name(tenant, name)
        with api_errors_named("reading", f"Service {self.namespace}/{wanted}", self.host):
            try:
                found = self._core.read_namespaced_service(wanted, self.namespace)
            except kubernetes.client.ApiException as e:
                if e.status == HTTP_NOT_FOUND:
                    return None
                raise
        return found if _ours(found, tenant, name) else None

    def _pods(self, tenant: str, name: str) -> list[Any]:
        selector = mo.model_selector(tenant, name)
        with api_errors_named("listing", f"Pods in {self.namespace} ({selector})", self.host):
            items = self._core.list_namespaced_pod(self.namespace, label_selector=selector).items
        return [p for p in items if _ours(p, tenant, name)]

    def _point(self, service: str, selector: dict[str, str]) -> None:
        """Move the Service to the version ``selector`` names (a merge patch: the selector's keys are the same)."""
        with api_errors_named("switching", f"Service {self.namespace}/{service}", self.host):
            self._core.patch_namespaced_service(service, self.namespace, {"spec": {"selector": selector}})

    def _delete_pod(self, pod: str) -> None:
        with api_errors_named("deleting", f"Pod {self.namespace}/{pod}", self.host):
            _gone_ok(lambda: self._core.delete_namespaced_pod(pod, self.namespace))

    def _read_pod(self, pod: str) -> Any:
        with api_errors_named("reading", f"Pod {self.namespace}/{pod}", self.host):
            return self._core.read_namespaced_pod(pod, self.namespace)

    def _wait_endpoints(self, service: str, pod: str) -> None:
        """Where the cluster keeps the Service's Endpoints (its endpoints controller), until they name ``pod`` alone:
        kube-proxy routes by them, so an old pod deleted before would still be sent new connections. A cluster
        without that controller has no Endpoints object (404): nothing to wait for."""
        deadline = time.monotonic() + ENDPOINTS_TIMEOUT_S
        while time.monotonic() < deadline:
            with api_errors_named("reading", f"Endpoints {self.namespace}/{service}", self.host):
                try:
                    found = self._core.read_namespaced_endpoints(service, self.namespace)
                except kubernetes.client.ApiException as e:
                    if e.status == HTTP_NOT_FOUND:
                        return
                    raise
            targets = {
                (a.target_ref.name if a.target_ref else None)
                for subset in found.subsets or []
                for a in [*(subset.addresses or []), *(subset.not_ready_addresses or [])]
            }
            if targets == {pod}:
                return
            time.sleep(POLL_S)
        raise ServingError(
            f"Service {self.namespace}/{service} did not reach pod {pod} alone within "
            f"{ENDPOINTS_TIMEOUT_S:g} s: its old pods are kept"
        )

    def _wait_ready(self, pod: str, name: str, send: tuple[Path, Path] | None) -> None:
        """Send the files once ``receive`` runs (it waits for them), then wait for the Ready condition;
        ServingError naming the server's last log lines when it exits (a refused signature) or the deadline passes."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            found = self._read_pod(pod)
            if send is not None and _running(found, mo.RECEIVE_CONTAINER, init=True):
                self._send(pod, *send)
                send = None
            if _ready(found):
                return
            ended = _terminated(found, mo.SERVER_CONTAINER)
            if ended is not None:
                raise ServingError(f"the model server of {name} exited {ended}: {self._log_tail(pod)}")
            if (found.status.phase if found.status else None) in ("Failed", "Succeeded"):
                raise ServingError(f"the model server pod of {name} ended {found.status.phase}: {found.status.reason}")
            time.sleep(POLL_S)
        raise ServingError(f"the model server of {name} was not ready within {READY_TIMEOUT_S:.0f} s")

    def _log_tail(self, pod: str) -> str:
        try:
            text = self._core.read_namespaced_pod_log(
                pod, self.namespace, container=mo.SERVER_CONTAINER, tail_lines=LOG_LINES, previous=False
            )
        except kubernetes.client.ApiException as e:
            return f"(no log: {e.status} {e.reason})"
        return str(text).strip()


def _ours(obj: Any, tenant: str, name: str) -> bool:
    """Labelled as this served name's and annotated with its exact tenant and name (the label is a hash)."""
    labels, notes = obj.metadata.labels or {}, obj.metadata.annotations or {}
    return (
        labels.get("app.kubernetes.io/managed-by") == MANAGED_BY
        and labels.get(mo.MODEL_LABEL) == mo.model_key(tenant, name)
        and notes.get(mo.TENANT_ANNOTATION) == tenant
        and notes.get(mo.NAME_ANNOTATION) == name
    )


def _deleting(pod: Any) -> bool:
    return pod.metadata.deletion_timestamp is not None


def _ready(pod: Any) -> bool:
    conditions = (pod.status.conditions if pod.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions) and not _deleting(pod)


def _statuses(pod: Any, init: bool) -> list[Any]:
    if pod.status is None:
        return []
    return list((pod.status.init_container_statuses if init else pod.status.container_statuses) or [])


def _running(pod: Any, container: str, init: bool = False) -> bool:
    return any(s.name == container and s.state and s.state.running for s in _statuses(pod, init))


def _terminated(pod: Any, container: str) -> str | None:
    """``code N (reason)`` of the container's last end, while it is not running again."""
    for status in _statuses(pod, init=False):
        if status.name != container or not status.state or status.state.running:
            continue
        ended = status.state.terminated or (status.last_state.terminated if status.last_state else None)
        if ended is not None:
            return f"{ended.exit_code} ({ended.reason})"
    return None


def _check_image(pod: Any, gated_id: str) -> None:
    """ServingError when the node reports running an image ID other than the gated one. A ``repo@sha256:...``
    (pulled from a registry) names a manifest, not an image ID: it cannot be compared here and passes."""
    for status in _statuses(pod, init=False):
        if status.name == mo.SERVER_CONTAINER and status.image_id:
            runs = str(status.image_id).removeprefix("docker-pullable://")
            if "@" not in runs and runs != gated_id:
                raise ServingError(
                    f"Pod {pod.metadata.name} runs the image {runs}, not {gated_id}, which passed the test and scan "
                    "gates here: import the gated image into the cluster"
                )


def _gone_ok(call: Callable[[], Any]) -> None:
    try:
        call()
    except kubernetes.client.ApiException as e:
        if e.status != HTTP_NOT_FOUND:
            raise
