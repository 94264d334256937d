"""The Kubernetes backend's API traffic against kmock, an emulated API server over real HTTP.

kmock keeps objects in memory and answers create/read/list/delete like an API server, but it runs no
controllers (pods never start; a test writes their status), ignores label selectors on lists (the backend
re-checks labels), records a creation even when a reaction refuses it, and admits anything (schema
validation is the object builders' job). The official client is synchronous and kmock serves from the
test's event loop, so every backend call runs in a worker thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, TypeVar

import kubernetes.client
import pytest
from kmock import KubernetesEmulator, method, resource

from controller_sidecar.endpoints import Endpoints
from learnerkit.pair.spec import PairSpec
from learnerkit.scheduler.backends import deployment as dep
from learnerkit.scheduler.backends import k8s_objects as ko
from learnerkit.scheduler.backends.k8s import KubernetesBackend
from learnerkit.scheduler.backends.k8s_cluster import KubernetesCluster
from learnerkit.scheduler.backends.k8s_objects import PodLayout
from learnerkit.scheduler.backends.protocol import LearnerEnd, NodeHealth
from learnerkit.scheduler.errors import BackendError

pytestmark = pytest.mark.asyncio

T = TypeVar("T")
NAMESPACE = "training"
LAYOUT = PodLayout.NATIVE_SIDECAR
"""kmock answers no ``/version``: the layout is pinned (tests/k8s has the real server choose)."""
RESOURCES = {
    "Pod": "v1/pods",
    "Service": "v1/services",
    "Secret": "v1/secrets",
    "NetworkPolicy": "networking.k8s.io/v1/networkpolicies",
    "PersistentVolumeClaim": "v1/persistentvolumeclaims",
}


def make_job(job_id: str = "job-7", learners: int = 2) -> dep.JobDeployment:
    endpoints = Endpoints(
        "10.20.0.4:2379", s3_endpoint_url="http://10.30.0.5:8333", s3_access_key="AK", s3_secret_key="SK"
    )
    pods = tuple(
        PairSpec(
            job_id=job_id,
            learner_id=n,
            num_learners=learners,
            learner_image="registry.local/learnerkit/pytorch:2.13-cpu-py3.11",
            sidecar_image="registry.local/learnerkit/sidecar:0.1.0",
            command=("python", "train.py"),
            sidecar_config={"results": {"bucket": "results", "prefix": f"{job_id}/"}},
            endpoints=endpoints,
            cpus=1,
            memory_bytes=1 << 30,
            namespace=NAMESPACE,
        )
        for n in range(1, learners + 1)
    )
    return dep.JobDeployment(
        job_id,
        pods,
        distributed=learners > 1,
        platform_egress=(dep.Egress("10.20.0.4/32", 2379), dep.Egress("10.30.0.5/32", 8333)),
        namespace=NAMESPACE,
    )


async def call(fn: Callable[..., T], *args: Any) -> T:
    return await asyncio.to_thread(fn, *args)


def stored(emulator: KubernetesEmulator) -> set[tuple[str, str, str]]:
    """(resource, namespace, name) of every object the emulator holds now (deleted ones excluded)."""
    return {
        (f"{key[0].group}/{key[0].version}/{key[0].plural}".lstrip("/"), str(key[1]), str(key[2]))
        for key, obj in emulator.objects.items()
        if not obj.deleted
    }


def expected(job: dep.JobDeployment) -> set[tuple[str, str, str]]:
    return {(RESOURCES[obj["kind"]], NAMESPACE, obj["metadata"]["name"]) for obj in ko.job_objects(job)}


@pytest.fixture
def backend(kmock: KubernetesEmulator) -> KubernetesCluster:
    configuration = kubernetes.client.Configuration()
    configuration.host = str(kmock.url).rstrip("/")
    return KubernetesCluster(kubernetes.client.ApiClient(configuration), namespace=NAMESPACE, layout=LAYOUT)


async def test_deploy_creates_exactly_the_jobs_objects(kmock: KubernetesEmulator, backend: KubernetesCluster) -> None:
    job = make_job()
    deployed = await call(backend.deploy, job)
    assert stored(kmock) == expected(job)
    assert len(deployed.created) == 6
    assert deployed.existing == ()
    pod = kmock.objects["v1/pods", NAMESPACE, "lk-job-7-2"]
    assert [c.get("restartPolicy") for c in pod["spec"]["initContainers"]] == [None, "Always"]
    assert pod["metadata"]["labels"][ko.JOB_LABEL] == "job-7"
    posts = [str(request.url.path) for request in kmock if request.method == method.POST]
    assert posts == [
        f"/api/v1/namespaces/{NAMESPACE}/secrets",
        f"/apis/networking.k8s.io/v1/namespaces/{NAMESPACE}/networkpolicies",
        f"/api/v1/namespaces/{NAMESPACE}/services",
        f"/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims",
        f"/api/v1/namespaces/{NAMESPACE}/pods",
        f"/api/v1/namespaces/{NAMESPACE}/pods",
    ]
    claim = kmock.objects["v1/persistentvolumeclaims", NAMESPACE, "lk-job-7-shared"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pod["spec"]["volumes"][1] == {"name": "shared", "persistentVolumeClaim": {"claimName": "lk-job-7-shared"}}


async def test_redeploy_is_idempotent(kmock: KubernetesEmulator, backend: KubernetesCluster) -> None:
    job = make_job()
    await call(backend.deploy, job)
    again = await call(backend.deploy, job)
    assert again.created == ()
    assert len(again.existing) == 6
    assert stored(kmock) == expected(job)


async def test_conflict_with_a_foreign_object_is_an_error(
    kmock: KubernetesEmulator, backend: KubernetesCluster
) -> None:
    kmock.objects["v1/secrets", NAMESPACE, "lk-job-7-sidecar"] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "lk-job-7-sidecar", "namespace": NAMESPACE, "labels": {"team": "other"}},
    }
    with pytest.raises(
        BackendError, match=r"Secret training/lk-job-7-sidecar: it exists and belongs to no learnerkit job"
    ):
        await call(backend.deploy, make_job())
    assert stored(kmock) == {("v1/secrets", NAMESPACE, "lk-job-7-sidecar")}


async def test_a_failed_deploy_removes_what_it_created(kmock: KubernetesEmulator, backend: KubernetesCluster) -> None:
    kmock["post", resource("v1/pods")] << 403 << {"kind": "Status", "message": "pods are forbidden here"}
    with pytest.raises(
        BackendError, match=r"creating Pod training/lk-job-7-1: 403 .*pods are forbidden here"
    ) as caught:
        await call(backend.deploy, make_job())
    assert caught.value.status == 403
    # kmock records a creation even when a reaction answers it with an error: the refused pod stays in
    # its memory. What matters is that everything created before it was deleted again.
    assert stored(kmock) == {("v1/pods", NAMESPACE, "lk-job-7-1")}
    deletes = [str(request.url.path).rsplit("/", 2)[-2:] for request in kmock if request.method == method.DELETE]
    assert deletes == [
        ["persistentvolumeclaims", "lk-job-7-shared"],
        ["services", "lk-job-7"],
        ["networkpolicies", "lk-job-7"],
        ["secrets", "lk-job-7-sidecar"],
    ]


async def test_status_reads_pods_and_says_why_one_is_pending(
    kmock: KubernetesEmulator, backend: KubernetesCluster
) -> None:
    await call(backend.deploy, make_job())
    kmock.objects["v1/pods", NAMESPACE, "lk-job-7-1"].patch(
        {
            "status": {
                "phase": "Running",
                "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
                "initContainerStatuses": [
                    {
                        "name": ko.FOLDERS_CONTAINER,
                        "ready": False,
                        "restartCount": 0,
                        "image": "s",
                        "imageID": "",
                        "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
                    },
                    {
                        "name": "sidecar",
                        "ready": True,
                        "restartCount": 0,
                        "image": "s",
                        "imageID": "",
                        "state": {"running": {}},
                    },
                ],
                "containerStatuses": [
                    {
                        "name": "learner",
                        "ready": True,
                        "restartCount": 0,
                        "image": "l",
                        "imageID": "",
                        "state": {"running": {}},
                    }
                ],
            }
        }
    )
    kmock.objects["v1/pods", NAMESPACE, "lk-job-7-2"].patch(
        {
            "status": {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/3 nodes are available: 3 Insufficient cpu.",
                    }
                ],
            }
        }
    )
    status = await call(backend.status, "job-7")
    first, second = status.pods
    assert (first.name, first.learner_id, first.phase, first.ready) == ("lk-job-7-1", 1, "Running", True)
    assert [(c.name, c.state) for c in first.containers] == [
        (ko.FOLDERS_CONTAINER, "terminated"),
        ("sidecar", "running"),
        ("learner", "running"),
    ]
    assert first.reason is None
    assert (second.phase, second.ready) == ("Pending", False)
    assert second.reason == "Unschedulable: 0/3 nodes are available: 3 Insufficient cpu."
    assert [c.state for c in second.containers] == ["unknown", "unknown", "unknown"]


async def test_status_reports_a_failed_learner(kmock: KubernetesEmulator, backend: KubernetesCluster) -> None:
    await call(backend.deploy, make_job(learners=1))
    kmock.objects["v1/pods", NAMESPACE, "lk-job-7-1"].patch(
        {
            "status": {
                "phase": "Failed",
                "containerStatuses": [
                    {
                        "name": "learner",
                        "ready": False,
                        "restartCount": 0,
                        "image": "l",
                        "imageID": "",
                        "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
                    }
                ],
            }
        }
    )
    (pod,) = (await call(backend.status, "job-7")).pods
    [learner] = [c for c in pod.containers if c.name == ko.LEARNER_CONTAINER]
    assert (learner.state, learner.exit_code, learner.reason) == ("terminated", 137, "OOMKilled")


async def test_teardown_deletes_everything_and_spares_other_jobs(
    kmock: KubernetesEmulator, backend: KubernetesCluster
) -> None:
    job, other = make_job("job-7"), make_job("job-8", learners=1)
    await call(backend.deploy, job)
    await call(backend.deploy, other)
    assert await call(backend.list_jobs) == ["job-7", "job-8"]
    deleted = await call(backend.teardown, "job-7")
    assert len(deleted) == 6
    assert deleted[:2] == ["Pod training/lk-job-7-1", "Pod training/lk-job-7-2"]
    assert deleted[-1] == "Secret training/lk-job-7-sidecar"
    assert stored(kmock) == expected(other)
    assert await call(backend.list_jobs) == ["job-8"]
    assert await call(backend.teardown, "job-7") == []
    assert not (await call(backend.status, "job-7")).exists


async def test_a_finished_jobs_claim_held_by_its_finalizer_is_no_orphan(
    kmock: KubernetesEmulator, backend: KubernetesCluster
) -> None:
    """After the teardown the API server keeps the claim, marked deleted, until the pvc-protection controller lets
    it go: the orphan sweep at each start must not take the job for one (it said "removing orphaned job" each
    time). A claim nobody deleted still makes its job an orphan."""
    service_side = KubernetesBackend(backend, egress=(dep.Egress("10.20.0.4/32", 2379),))
    job = replace(make_job("job-7", learners=2), instance="lk-this")
    await call(service_side.deploy, job)
    [claim] = [obj for obj in ko.job_objects(job) if obj["kind"] == "PersistentVolumeClaim"]
    await call(service_side.teardown, "job-7")
    terminating = {"deletionTimestamp": "2026-11-24T20:00:00Z", "finalizers": ["kubernetes.io/pvc-protection"]}
    key = ("v1/persistentvolumeclaims", NAMESPACE, claim["metadata"]["name"])
    kmock.objects[key] = {**claim, "metadata": {**claim["metadata"], **terminating}}
    assert await call(service_side.job_ids, "lk-this") == set()
    kmock.objects[key] = dict(claim)
    assert await call(service_side.job_ids, "lk-this") == {"job-7"}


async def test_deploy_after_teardown_creates_again(kmock: KubernetesEmulator, backend: KubernetesCluster) -> None:
    job = make_job()
    await call(backend.deploy, job)
    await call(backend.teardown, "job-7")
    again = await call(backend.deploy, job)
    assert len(again.created) == 6
    assert stored(kmock) == expected(job)


async def test_an_unreachable_api_names_the_host() -> None:
    configuration = kubernetes.client.Configuration()
    configuration.host = "http://127.0.0.1:9"
    configuration.retries = 0
    backend = KubernetesCluster(kubernetes.client.ApiClient(configuration), namespace=NAMESPACE, layout=LAYOUT)
    with pytest.raises(
        BackendError, match=r"listing Pods in training .*cannot reach the Kubernetes API at http://127.0.0.1:9"
    ):
        await call(backend.status, "job-7")


async def test_the_service_side_deploys_sees_pods_start_and_tears_down(
    kmock: KubernetesEmulator, backend: KubernetesCluster
) -> None:
    service_side = KubernetesBackend(backend, egress=(dep.Egress("10.20.0.4/32", 2379),))
    job = replace(make_job("job-8", learners=2), instance="lk-this")
    await call(service_side.deploy, job)
    await call(service_side.deploy, replace(make_job("job-9", learners=1), instance="lk-other"))
    assert await call(service_side.job_ids, "lk-this") == {"job-8"}, "another scheduler instance's job is not ours"
    await call(service_side.teardown, "job-9")
    assert not await call(service_side.started, "job-8", 2)
    for n in (1, 2):
        kmock.objects["v1/pods", NAMESPACE, f"lk-job-8-{n}"].patch({"status": {"phase": "Running"}})
    assert await call(service_side.started, "job-8", 2)
    kmock.objects["v1/pods", NAMESPACE, "lk-job-8-2"].patch({"status": {"phase": "Failed"}})
    assert (await call(service_side.sidecars, "job-8")).exited == {2: 1}
    await call(service_side.teardown, "job-8")
    assert stored(kmock) == set()


def _container(name: str, state: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "ready": "running" in state, "restartCount": 0, "image": name, "imageID": "", "state": state}


async def test_learners_ended_reports_a_terminated_learner_container(
    kmock: KubernetesEmulator, backend: KubernetesCluster
) -> None:
    """A learner image without learner-run: its container ended while the native sidecar still runs (the pod
    stays Running, so ``sidecars`` shows none exited); ``learners_ended`` reports the learner and its code."""
    service_side = KubernetesBackend(backend)
    await call(service_side.deploy, make_job("job-8", learners=3))
    learner_states = {1: {"terminated": {"exitCode": 0, "reason": "Completed"}}, 2: {"running": {}}, 3: {"waiting": {}}}
    for n, state in learner_states.items():
        kmock.objects["v1/pods", NAMESPACE, f"lk-job-8-{n}"].patch(
            {
                "status": {
                    "phase": "Running" if n < 3 else "Pending",
                    "initContainerStatuses": [_container(ko.SIDECAR_CONTAINER, {"running": {}})],
                    "containerStatuses": [_container(ko.LEARNER_CONTAINER, state)],
                }
            }
        )
    assert await call(service_side.learners_ended, "job-8") == {1: LearnerEnd(0)}
    assert (await call(service_side.sidecars, "job-8")).exited == {}
    kmock.objects["v1/pods", NAMESPACE, "lk-job-8-2"].patch(
        {"status": {"containerStatuses": [_container(ko.LEARNER_CONTAINER, {"terminated": {"exitCode": 3}})]}}
    )
    assert await call(service_side.learners_ended, "job-8") == {1: LearnerEnd(0), 2: LearnerEnd(3)}
    await call(service_side.teardown, "job-8")
    assert await call(service_side.learners_ended, "job-8") == {}


def api_node(name: str, *, ready: str = "True", cordoned: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {
            "allocatable": {"cpu": "8", "memory": "16Gi"},
            "conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": "2026-11-24T21:00:00Z"}],
        },
    }


async def test_node_health_tells_cordoned_not_ready_and_deleted_nodes_apart(
    kmock: KubernetesEmulator, backend: KubernetesCluster
) -> None:
    nodes = {"n1": api_node("n1"), "n2": api_node("n2", cordoned=True), "n3": api_node("n3", ready="Unknown")}
    for name, raw in nodes.items():
        kmock.objects["v1/nodes", None, name] = raw
    cluster = KubernetesBackend(backend)
    assert [node.name for node in await call(cluster.nodes)] == ["n1"]  # only a ready, schedulable node takes learners
    health = await call(cluster.node_health)
    assert health == {
        "n1": NodeHealth(),
        "n2": NodeHealth(cordoned=True),
        "n3": NodeHealth(not_ready_since=datetime(2026, 11, 24, 21, tzinfo=UTC).timestamp()),
    }
    del kmock.objects["v1/nodes", None, "n3"]
    assert sorted(await call(cluster.node_health)) == ["n1", "n2"]  # deleted: absent


async def test_the_learner_images_digest_is_read_from_the_pods_image_id(
    kmock: KubernetesEmulator, backend: KubernetesCluster
) -> None:
    """The kubelet names the image a container runs by its registry digest (``imageID``): the provenance's digest
    of the learner image on a cluster, where the scheduler's own engine has none."""
    service_side = KubernetesBackend(backend, egress=(dep.Egress("10.20.0.4/32", 2379),))
    await call(service_side.deploy, make_job(learners=1))
    assert await call(service_side.learner_image_digest, "job-7") == "", "no container started yet"
    digest = "sha256:" + "5" * 64
    learner = _container("learner", {"running": {}})
    learner["imageID"] = f"registry.local/learnerkit/pytorch@{digest}"
    sidecar = {**_container("sidecar", {"running": {}}), "imageID": "registry.local/sidecar@sha256:" + "6" * 64}
    kmock.objects["v1/pods", NAMESPACE, "lk-job-7-1"].patch(
        {"status": {"phase": "Running", "initContainerStatuses": [sidecar], "containerStatuses": [learner]}}
    )
    assert await call(service_side.learner_image_digest, "job-7") == digest


async def test_the_pip_ca_bundle_is_sent_in_the_secret_before_the_pods_and_goes_with_the_job(
    kmock: KubernetesEmulator, backend: KubernetesCluster
) -> None:
    """Issue 40: the CA bundle the sidecars' pip trusts is in the job's Secret, which exists before any pod
    mounts it and is deleted with the job's other objects."""
    pem = "-----BEGIN CERTIFICATE-----\nMIIBproxyCA\n-----END CERTIFICATE-----\n"
    plain = make_job()
    job = replace(
        plain, learners=tuple(replace(p, sidecar_files={"/etc/learnerkit/pip/ca.pem": pem}) for p in plain.learners)
    )
    await call(backend.deploy, job)
    secret = kmock.objects["v1/secrets", NAMESPACE, "lk-job-7-sidecar"]
    assert secret["stringData"]["file.etc.learnerkit.pip.ca.pem"] == pem
    posts = [str(request.url.path).rsplit("/", 1)[-1] for request in kmock if request.method == method.POST]
    assert posts.index("secrets") < posts.index("pods")
    await call(backend.teardown, "job-7")
    assert stored(kmock) == set()
