"""`model serve --backend kubernetes` against kmock, an emulated API server over HTTP in this process.

kmock runs no kubelet: a test writes the pod's status (the init container running, the Ready condition, a server
that exited) as the kubelet would, and stands in for the exec channel with a recorder of what would be sent. The
official client is synchronous and kmock serves from the test's event loop, so each call runs in a worker thread.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
from kmock import KubernetesEmulator, method, resource

from learnerkit.scheduler.backends import k8s_modelobjects as mo
from learnerkit.scheduler.backends import k8s_modelservers
from learnerkit.scheduler.backends.k8s_modelservers import KubernetesModelServers
from learnerkit.scheduler.backends.modelservers import ServingError
from learnerkit.scheduler.errors import BackendError
from tests.waiting import await_until

pytestmark = pytest.mark.asyncio

NAMESPACE = "serving"
V1 = "sha256:" + "11" * 32
V2 = "sha256:" + "22" * 32
IMAGE = "registry.local/learnerkit/modelserver:2.13-cpu-py3.11"


class Sent:
    """What the exec channel would have carried: (pod, model folder, keys folder)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Path, Path]] = []

    def __call__(self, pod: str, model: Path, keys: Path) -> None:
        self.calls.append((pod, model, keys))


@pytest.fixture
def sent() -> Sent:
    return Sent()


@pytest.fixture
def servers(kmock: KubernetesEmulator, sent: Sent, monkeypatch: pytest.MonkeyPatch) -> KubernetesModelServers:
    monkeypatch.setattr(k8s_modelservers, "READY_TIMEOUT_S", 15.0)  # a failed test's roll-over ends soon after it
    for plural in (
        "v1/pods",
        "v1/services",
        "networking.k8s.io/v1/networkpolicies",
    ):  # kmock knows a resource from its objects, or declared
        kmock.resources[plural] = {}
    configuration = kubernetes.client.Configuration()
    configuration.host = str(kmock.url).rstrip("/")
    return KubernetesModelServers(kubernetes.client.ApiClient(configuration), NAMESPACE, send=sent)


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "model").mkdir()
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "0123.pub").write_text("key")
    return tmp_path / "model", tmp_path / "keys"


def live(kmock: KubernetesEmulator, plural: str, name: str) -> dict[str, Any] | None:
    try:
        found = kmock.objects[plural if "/" in plural else f"v1/{plural}", NAMESPACE, name]
    except KeyError:
        return None
    return None if found.deleted else dict(found.raw)


def kubelet(kmock: KubernetesEmulator, pod: str, status: dict[str, Any]) -> None:
    kmock.objects["v1/pods", NAMESPACE, pod].patch({"status": status})


POLICIES = "networking.k8s.io/v1/networkpolicies"
RECEIVING = {
    "initContainerStatuses": [
        {"name": "receive", "ready": False, "restartCount": 0, "image": IMAGE, "imageID": "", "state": {"running": {}}}
    ]
}
READY = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}


async def serve_with_kubelet(
    kmock: KubernetesEmulator, servers: KubernetesModelServers, sent: Sent, files: tuple[Path, Path], digest: str
) -> Any:
    """Serve ``digest``, playing the kubelet: the receiver runs, then (files sent) the server is ready."""
    task = asyncio.create_task(asyncio.to_thread(servers.roll_over, "acme", "digits", digest, *files, IMAGE))
    pod = mo.pod_name("acme", "digits", digest)
    await await_until(lambda: asyncio.sleep(0, live(kmock, "pods", pod)), message=f"pod {pod} created")
    kubelet(kmock, pod, RECEIVING)
    await await_until(lambda: asyncio.sleep(0, any(c[0] == pod for c in sent.calls)), message="files sent")
    kubelet(kmock, pod, READY)
    return await asyncio.wait_for(task, 10)


def selector(kmock: KubernetesEmulator) -> dict[str, str] | None:
    service = live(kmock, "services", mo.service_name("acme", "digits"))
    return None if service is None else dict(service["spec"]["selector"])


async def test_the_first_serve_sends_the_files_then_makes_the_service_once_ready(
    kmock: KubernetesEmulator, servers: KubernetesModelServers, sent: Sent, files: tuple[Path, Path]
) -> None:
    task = asyncio.create_task(asyncio.to_thread(servers.roll_over, "acme", "digits", V1, *files, IMAGE))
    pod = mo.pod_name("acme", "digits", V1)
    await await_until(lambda: asyncio.sleep(0, live(kmock, "pods", pod)), message="the pod")
    assert sent.calls == [] and selector(kmock) is None, "nothing is sent before the receiver runs"
    kubelet(kmock, pod, RECEIVING)
    await await_until(lambda: asyncio.sleep(0, sent.calls), message="files sent")
    assert sent.calls == [(pod, *files)]
    assert selector(kmock) is None, "no address before the server is ready"
    kubelet(kmock, pod, READY)
    served = await asyncio.wait_for(task, 10)
    assert selector(kmock) == mo.version_selector("acme", "digits", V1)
    assert served.url == f"http://{mo.service_name('acme', 'digits')}.{NAMESPACE}.svc:8080"
    assert (served.version, served.container) == (V1, pod)
    made = live(kmock, "pods", pod)
    assert made is not None and made["spec"]["containers"][0]["args"][-5:] == [
        "digits",
        "--version",
        V1,
        "--port",
        "8080",
    ]
    assert made["spec"]["automountServiceAccountToken"] is False
    assert len(sent.calls) == 1
    posts = [str(r.url.path).rsplit("/", 1)[-1] for r in kmock if r.method == method.POST]
    assert posts == ["networkpolicies", "pods", "services"], "the policy before the pod, the address once ready"
    policy = live(kmock, POLICIES, mo.service_name("acme", "digits"))
    assert policy is not None and policy["spec"]["egress"] == []


async def test_a_roll_over_moves_the_selector_only_once_the_new_pod_is_ready_then_removes_the_old(
    kmock: KubernetesEmulator, servers: KubernetesModelServers, sent: Sent, files: tuple[Path, Path]
) -> None:
    await serve_with_kubelet(kmock, servers, sent, files, V1)
    old, new = mo.pod_name("acme", "digits", V1), mo.pod_name("acme", "digits", V2)
    task = asyncio.create_task(asyncio.to_thread(servers.roll_over, "acme", "digits", V2, *files, IMAGE))
    await await_until(lambda: asyncio.sleep(0, live(kmock, "pods", new)), message="the new pod")
    kubelet(kmock, new, RECEIVING)
    await await_until(lambda: asyncio.sleep(0, any(c[0] == new for c in sent.calls)), message="files sent")
    patches = [r for r in kmock if r.method == method.PATCH]
    assert patches == [] and selector(kmock) == mo.version_selector("acme", "digits", V1)
    assert live(kmock, "pods", old) is not None, "the old pod serves until the switch"
    kubelet(kmock, new, READY)
    served = await asyncio.wait_for(task, 10)
    assert selector(kmock) == mo.version_selector("acme", "digits", V2)
    assert live(kmock, "pods", old) is None and live(kmock, "pods", new) is not None
    assert served.version == V2 and served.url.startswith(f"http://{mo.service_name('acme', 'digits')}.")
    order = [(r.method, str(r.url.path).rsplit("/", 2)[-2]) for r in kmock if r.method != method.GET]
    assert order.index((method.PATCH, "services")) < order.index((method.DELETE, "pods")), order


async def test_serving_the_served_version_again_changes_nothing(
    kmock: KubernetesEmulator, servers: KubernetesModelServers, sent: Sent, files: tuple[Path, Path]
) -> None:
    await serve_with_kubelet(kmock, servers, sent, files, V1)
    before = len(list(kmock))
    served = await asyncio.to_thread(servers.roll_over, "acme", "digits", V1, *files, IMAGE)
    writes = [r for r in list(kmock)[before:] if r.method != method.GET]
    assert writes == [] and served.version == V1 and len(sent.calls) == 1


async def test_a_server_that_refuses_the_version_is_removed_and_the_old_one_kept(
    kmock: KubernetesEmulator, servers: KubernetesModelServers, sent: Sent, files: tuple[Path, Path]
) -> None:
    await serve_with_kubelet(kmock, servers, sent, files, V1)
    new = mo.pod_name("acme", "digits", V2)
    task = asyncio.create_task(asyncio.to_thread(servers.roll_over, "acme", "digits", V2, *files, IMAGE))
    await await_until(lambda: asyncio.sleep(0, live(kmock, "pods", new)), message="the new pod")
    kubelet(kmock, new, RECEIVING)
    await await_until(lambda: asyncio.sleep(0, any(c[0] == new for c in sent.calls)), message="files sent")
    exited = {"terminated": {"exitCode": 2, "reason": "Error"}}
    kubelet(
        kmock,
        new,
        {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "server",
                    "ready": False,
                    "restartCount": 1,
                    "image": IMAGE,
                    "imageID": "",
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": exited,
                }
            ],
        },
    )
    with pytest.raises(ServingError, match=r"the model server of digits exited 2 \(Error\)"):
        await asyncio.wait_for(task, 10)
    assert live(kmock, "pods", new) is None, "the refused version's pod is deleted"
    assert live(kmock, "pods", mo.pod_name("acme", "digits", V1)) is not None
    assert selector(kmock) == mo.version_selector("acme", "digits", V1)


async def test_stop_removes_everything_of_the_name_and_nothing_else(
    kmock: KubernetesEmulator, servers: KubernetesModelServers, sent: Sent, files: tuple[Path, Path]
) -> None:
    await serve_with_kubelet(kmock, servers, sent, files, V1)
    other = mo.server_pod("acme", "digits2", V1, IMAGE, NAMESPACE, [])
    kmock.objects["v1/pods", NAMESPACE, other["metadata"]["name"]] = dict(other)
    stopped = await asyncio.to_thread(servers.stop, "acme", "digits")
    assert stopped == [V1]
    assert selector(kmock) is None and live(kmock, "pods", mo.pod_name("acme", "digits", V1)) is None
    assert live(kmock, POLICIES, mo.service_name("acme", "digits")) is None
    assert live(kmock, "pods", other["metadata"]["name"]) is not None
    with pytest.raises(ServingError, match="model digits is not served for tenant acme"):
        await asyncio.to_thread(servers.stop, "acme", "digits")


async def test_another_tenants_name_is_not_served_here(
    kmock: KubernetesEmulator, servers: KubernetesModelServers, sent: Sent, files: tuple[Path, Path]
) -> None:
    await serve_with_kubelet(kmock, servers, sent, files, V1)
    with pytest.raises(ServingError, match="not served for tenant other"):
        await asyncio.to_thread(servers.served, "other", "digits")
    assert (await asyncio.to_thread(servers.served, "acme", "digits")).version == V1


async def test_a_pod_running_another_image_than_the_gated_one_is_refused(
    kmock: KubernetesEmulator, servers: KubernetesModelServers, sent: Sent, files: tuple[Path, Path]
) -> None:
    gated, other = "sha256:" + "aa" * 32, "sha256:" + "bb" * 32
    task = asyncio.create_task(asyncio.to_thread(servers.roll_over, "acme", "digits", V1, *files, IMAGE, gated))
    pod = mo.pod_name("acme", "digits", V1)
    await await_until(lambda: asyncio.sleep(0, live(kmock, "pods", pod)), message="the pod")
    kubelet(kmock, pod, RECEIVING)
    await await_until(lambda: asyncio.sleep(0, sent.calls), message="files sent")
    running = {"name": "server", "ready": True, "restartCount": 0, "image": IMAGE, "state": {"running": {}}}
    kubelet(kmock, pod, {**READY, "containerStatuses": [{**running, "imageID": other}]})
    with pytest.raises(ServingError, match=f"runs the image {other}, not {gated}"):
        await asyncio.wait_for(task, 10)
    assert live(kmock, "pods", pod) is None and selector(kmock) is None, "nothing of the name is left"
    assert live(kmock, POLICIES, mo.service_name("acme", "digits")) is None
    # The same image, and one the node pulled by digest (a manifest, not comparable here), are served.
    for image_id in (gated, f"registry.local/learnerkit/modelserver@sha256:{'cc' * 32}"):
        task = asyncio.create_task(asyncio.to_thread(servers.roll_over, "acme", "digits", V1, *files, IMAGE, gated))
        await await_until(lambda: asyncio.sleep(0, live(kmock, "pods", pod)), message="the pod again")
        kubelet(kmock, pod, {**READY, "containerStatuses": [{**running, "imageID": image_id}]})
        assert (await asyncio.wait_for(task, 10)).version == V1
        await asyncio.to_thread(servers.stop, "acme", "digits")


async def test_a_first_serve_the_api_refuses_leaves_nothing(
    kmock: KubernetesEmulator, servers: KubernetesModelServers, files: tuple[Path, Path]
) -> None:
    kmock["post", resource("v1/pods")] << 403 << {"kind": "Status", "message": "pods are forbidden here"}
    with pytest.raises(BackendError, match=r"creating Pod serving/lk-model-digits-.*: 403 .*pods are forbidden here"):
        await asyncio.to_thread(servers.roll_over, "acme", "digits", V1, *files, IMAGE)
    assert live(kmock, POLICIES, mo.service_name("acme", "digits")) is None and selector(kmock) is None
