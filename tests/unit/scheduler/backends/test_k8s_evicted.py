"""A learner whose pod the kubelet evicts: the job's reason says so, with the kubelet's message, instead of "its
sidecar exited with status 1" (issue 27: an evicted pod's reason was not passed through). A sidecar that dies
before it reports: the reason ends with its log's last line (a tier failure said only "exited with status 1")."""

from __future__ import annotations

from kubernetes.client import (
    V1Container,
    V1ContainerState,
    V1ContainerStateTerminated,
    V1ContainerStatus,
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
    V1PodStatus,
)

from learnerkit.scheduler.backends import k8s_objects as ko
from learnerkit.scheduler.backends.k8s import KubernetesBackend
from learnerkit.scheduler.backends.k8s_cluster import ContainerStatus, JobStatus, PodStatus, _pod_status
from learnerkit.scheduler.backends.protocol import SidecarStates
from learnerkit.scheduler.core.liveness import LOG_ENDING_CHARS, LivenessTimes, lost_learners
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.jobs.state import JobState
from learnerkit.scheduler.manifest.parser import parse_manifest

EVICTION = "The node was low on resource: ephemeral-storage. Container learner was using 21Gi."
MANIFEST = """\
name: j
cpus: 1
memory: 1Gb
learners: 1
data_stores:
  - id: s3
    type: s3_datastore
    training_data: {container: data}
    training_results: {container: results}
    connection: {auth_url: "http://127.0.0.1:8333", user_name: a, password: b}
framework: {name: custom, version: img, command: run}
"""


def evicted_pod() -> V1Pod:
    killed = V1ContainerStatus(
        name=ko.LEARNER_CONTAINER,
        image="learner",
        image_id="",
        ready=False,
        restart_count=0,
        state=V1ContainerState(terminated=V1ContainerStateTerminated(exit_code=137, reason="Error")),
    )
    return V1Pod(
        metadata=V1ObjectMeta(name="lk-j-1", labels={ko.LEARNER_LABEL: "1"}),
        spec=V1PodSpec(containers=[V1Container(name=ko.LEARNER_CONTAINER)]),
        status=V1PodStatus(phase="Failed", reason="Evicted", message=EVICTION, container_statuses=[killed]),
    )


class Cluster:
    layout = ko.PodLayout.NATIVE_SIDECAR

    def __init__(self, pod: PodStatus) -> None:
        self.pod = pod

    def status(self, job_id: str) -> JobStatus:
        return JobStatus(job_id, (self.pod,))


def test_an_evicted_pods_status_keeps_the_kubelets_reason_and_message() -> None:
    assert _pod_status(evicted_pod()).reason == f"Evicted: {EVICTION}"


def test_the_backend_says_what_ended_a_failed_pod() -> None:
    backend = KubernetesBackend(Cluster(_pod_status(evicted_pod())))  # type: ignore[arg-type]
    states = backend.sidecars("j")
    assert states.exited == {1: 1}
    assert states.ended_by == {1: f"Evicted: {EVICTION}"}


def test_a_running_pod_is_ended_by_nothing() -> None:
    running = PodStatus("lk-j-1", 1, "Running", True, (ContainerStatus(ko.SIDECAR_CONTAINER, "running"),))
    backend = KubernetesBackend(Cluster(running))  # type: ignore[arg-type]
    assert backend.sidecars("j") == SidecarStates({}, frozenset({1}), {})


def test_the_lost_learners_reason_names_the_eviction() -> None:
    tracked = Tracked(JobState("j", "team", "j", 0.0), parse_manifest(MANIFEST), MANIFEST, "m.yml")
    sidecars = SidecarStates({1: 1}, frozenset(), {1: f"Evicted: {EVICTION}"})
    lost = lost_learners(tracked, sidecars, LivenessTimes(100.0, 100.0, 0.0), lease_ttl_s=10.0, renewal_grace_s=30.0)
    assert lost == {1: f"its pod ended before a final status (Evicted: {EVICTION})"}


def test_a_sidecar_that_exited_with_nothing_said_keeps_its_exit_status_reason() -> None:
    tracked = Tracked(JobState("j", "team", "j", 0.0), parse_manifest(MANIFEST), MANIFEST, "m.yml")
    lost = lost_learners(
        tracked, SidecarStates({1: 3}), LivenessTimes(100.0, 100.0, 0.0), lease_ttl_s=10.0, renewal_grace_s=30.0
    )
    assert lost == {1: "its sidecar exited with status 3 before reporting a final status"}


TRACEBACK = 'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\nRuntimeError: etcd refused\n'


def classic_pod_whose_sidecar_died(message: str | None) -> V1Pod:
    died = V1ContainerStatus(
        name=ko.SIDECAR_CONTAINER,
        image="sidecar",
        image_id="",
        ready=False,
        restart_count=0,
        state=V1ContainerState(terminated=V1ContainerStateTerminated(exit_code=1, reason="Error", message=message)),
    )
    return V1Pod(
        metadata=V1ObjectMeta(name="lk-j-1", labels={ko.LEARNER_LABEL: "1"}),
        spec=V1PodSpec(containers=[V1Container(name=ko.SIDECAR_CONTAINER), V1Container(name=ko.LEARNER_CONTAINER)]),
        status=V1PodStatus(phase="Running", container_statuses=[died]),
    )


class ClassicCluster(Cluster):
    layout = ko.PodLayout.CLASSIC


def test_the_lost_learners_reason_ends_with_the_dead_sidecars_last_line() -> None:
    backend = KubernetesBackend(ClassicCluster(_pod_status(classic_pod_whose_sidecar_died(TRACEBACK))))  # type: ignore[arg-type]
    sidecars = backend.sidecars("j")
    assert sidecars.exited == {1: 1}
    assert sidecars.log_tails == {1: TRACEBACK}
    tracked = Tracked(JobState("j", "team", "j", 0.0), parse_manifest(MANIFEST), MANIFEST, "m.yml")
    lost = lost_learners(tracked, sidecars, LivenessTimes(100.0, 100.0, 0.0), lease_ttl_s=10.0, renewal_grace_s=30.0)
    assert lost == {
        1: "its sidecar exited with status 1 before reporting a final status; its log ends: RuntimeError: etcd refused"
    }


def test_a_long_last_line_is_cut_to_a_readable_length_keeping_its_start_and_its_end() -> None:
    """The end of a long line is where its final cause is (seen cut off: which write a lapsed lease held back)."""
    tracked = Tracked(JobState("j", "team", "j", 0.0), parse_manifest(MANIFEST), MANIFEST, "m.yml")
    line = "ERROR uploading: " + "x" * 1000 + " (etcd unanswered); the write: checkpoints/step-20"
    sidecars = SidecarStates({1: 1}, log_tails={1: "first\n" + line + "\n\n"})
    (reason,) = lost_learners(
        tracked, sidecars, LivenessTimes(100.0, 100.0, 0.0), lease_ttl_s=10.0, renewal_grace_s=30.0
    ).values()
    ending = reason.split("; its log ends: ")[1]
    assert len(ending) == LOG_ENDING_CHARS
    assert ending.startswith("ERROR uploading: xxx") and ending.endswith("the write: checkpoints/step-20")
    assert ending.count("…") == 1
