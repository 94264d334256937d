"""The pod layout chosen from the server's version: native sidecar from 1.29, the classic layout before."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from learnerkit.pair.spec import SIDECAR_UID
from learnerkit.scheduler.backends import k8s_objects as ko
from learnerkit.scheduler.backends.k8s import KubernetesBackend
from learnerkit.scheduler.backends.k8s_cluster import ContainerStatus, JobStatus, KubernetesCluster, PodStatus
from learnerkit.scheduler.errors import BackendError
from tests.unit.scheduler.backends.test_k8s_objects import make_job


@pytest.mark.parametrize(
    ("major", "minor", "layout"),
    [
        ("1", "20", ko.PodLayout.CLASSIC),
        ("1", "28", ko.PodLayout.CLASSIC),
        ("1", "29", ko.PodLayout.NATIVE_SIDECAR),
        ("1", "30+", ko.PodLayout.NATIVE_SIDECAR),
        ("1", "28+", ko.PodLayout.CLASSIC),
        ("2", "0", ko.PodLayout.NATIVE_SIDECAR),
    ],
)
def test_layout_follows_the_server_version(major: str, minor: str, layout: ko.PodLayout) -> None:
    assert ko.layout_for_version(major, minor) is layout


def test_a_version_that_is_not_a_number_is_refused() -> None:
    with pytest.raises(ValueError, match="not a number"):
        ko.layout_for_version("1", "")


def _pod(layout: ko.PodLayout) -> dict[str, Any]:
    [pod] = [obj for obj in ko.job_objects(make_job(), layout) if obj["kind"] == "Pod"]
    return pod["spec"]


def _config(container: dict[str, Any]) -> dict[str, Any]:
    env = {item["name"]: item.get("value") for item in container["env"]}
    loaded: dict[str, Any] = json.loads(env["LEARNERKIT_SIDECAR_CONFIG_JSON"])
    return loaded


def test_classic_layout_runs_two_ordinary_containers_and_the_sidecar_exits_when_done() -> None:
    spec = _pod(ko.PodLayout.CLASSIC)
    assert [c["name"] for c in spec["initContainers"]] == [ko.FOLDERS_CONTAINER]
    sidecar, learner = spec["containers"]
    assert (sidecar["name"], learner["name"]) == (ko.SIDECAR_CONTAINER, ko.LEARNER_CONTAINER)
    assert "restartPolicy" not in sidecar and "lifecycle" not in sidecar
    assert _config(sidecar)["exit_when_done"] is True
    assert spec["restartPolicy"] == "Never"
    assert {"name": "TINI_SUBREAPER", "value": "1"} in sidecar["env"]


def test_native_layout_keeps_the_sidecar_up_as_an_init_container() -> None:
    spec = _pod(ko.PodLayout.NATIVE_SIDECAR)
    folders, sidecar = spec["initContainers"]
    assert (folders["name"], sidecar["name"]) == (ko.FOLDERS_CONTAINER, ko.SIDECAR_CONTAINER)
    assert sidecar["restartPolicy"] == "Always"
    assert _config(sidecar)["exit_when_done"] is False
    assert "lifecycle" not in sidecar
    assert [c["name"] for c in spec["containers"]] == [ko.LEARNER_CONTAINER]


@pytest.mark.parametrize("layout", list(ko.PodLayout))
def test_the_job_folders_are_made_group_writable_before_either_container_starts(layout: ko.PodLayout) -> None:
    """The learner contract's folders, by the sidecar's user, before the sidecar or the learner (whichever the
    kubelet starts first) could make them its own; nothing else in the job volume, and no credentials."""
    job = make_job()
    [folders] = [c for c in _pod(layout)["initContainers"] if c["name"] == ko.FOLDERS_CONTAINER]
    assert folders["image"] == job.learners[0].sidecar_image
    assert folders["command"] == [
        "mkdir", "-p", "-m", "0775",
        "/job/checkpoints", "/job/control", "/job/data", "/job/logs", "/job/model", "/job/results",
    ]  # fmt: skip
    assert folders["securityContext"] == ko.restricted_security_context(SIDECAR_UID)
    assert folders["volumeMounts"] == [{"name": "job", "mountPath": "/job"}]
    assert "env" not in folders and "envFrom" not in folders


def test_both_layouts_validate_and_differ_only_in_where_the_sidecar_runs() -> None:
    classic, native = _pod(ko.PodLayout.CLASSIC), _pod(ko.PodLayout.NATIVE_SIDECAR)
    ko.validate_objects(ko.job_objects(make_job(2), ko.PodLayout.CLASSIC))
    assert classic["initContainers"] == native["initContainers"][:1]
    assert {k: v for k, v in classic.items() if k not in ("containers", "initContainers")} == {
        k: v for k, v in native.items() if k not in ("containers", "initContainers")
    }


class _VersionedApi:
    """An ``ApiClient`` stand-in that answers only ``GET /version`` (counting the calls)."""

    def __init__(self, minor: str) -> None:
        self.minor = minor
        self.calls = 0
        self.configuration = SimpleNamespace(host="https://cluster.test")

    def select_header_accept(self, accepts: list[str]) -> str:
        return accepts[0]

    def call_api(self, path: str, method: str, *args: Any, **kwargs: Any) -> Any:
        assert (path, method) == ("/version/", "GET")
        self.calls += 1
        return SimpleNamespace(major="1", minor=self.minor)


@pytest.mark.parametrize(("minor", "layout"), [("20", ko.PodLayout.CLASSIC), ("31", ko.PodLayout.NATIVE_SIDECAR)])
def test_cluster_asks_the_server_once_for_its_layout(minor: str, layout: ko.PodLayout) -> None:
    api = _VersionedApi(minor)
    cluster = KubernetesCluster(api)
    assert cluster.layout is layout
    assert cluster.layout is layout
    assert api.calls == 1


def test_an_unreadable_version_names_the_server() -> None:
    api = _VersionedApi("x")
    with pytest.raises(BackendError, match=r"cluster\.test"):
        _ = KubernetesCluster(api).layout


class _Cluster:
    def __init__(self, layout: ko.PodLayout, pods: tuple[PodStatus, ...]) -> None:
        self.layout, self.pods = layout, pods

    def status(self, job_id: str) -> JobStatus:
        return JobStatus(job_id, self.pods)


def _status(learner_id: int, phase: str, sidecar: ContainerStatus) -> PodStatus:
    learner = ContainerStatus(ko.LEARNER_CONTAINER, "running")
    return PodStatus(f"lk-j-{learner_id}", learner_id, phase, True, (sidecar, learner))


def test_classic_sidecar_exit_code_is_reported_and_a_native_restart_is_not() -> None:
    ended = ContainerStatus(ko.SIDECAR_CONTAINER, "terminated", exit_code=3)
    pods = (_status(1, "Running", ended), _status(2, "Running", ContainerStatus(ko.SIDECAR_CONTAINER, "running")))
    classic = KubernetesBackend(_Cluster(ko.PodLayout.CLASSIC, pods))  # type: ignore[arg-type]
    native = KubernetesBackend(_Cluster(ko.PodLayout.NATIVE_SIDECAR, pods))  # type: ignore[arg-type]
    assert classic.sidecars("j").exited == {1: 3}
    assert native.sidecars("j").exited == {}


def test_a_failed_pod_counts_as_an_exited_sidecar_in_both_layouts() -> None:
    pods = (_status(1, "Failed", ContainerStatus(ko.SIDECAR_CONTAINER, "running")),)
    for layout in ko.PodLayout:
        assert KubernetesBackend(_Cluster(layout, pods)).sidecars("j").exited == {1: 1}  # type: ignore[arg-type]
