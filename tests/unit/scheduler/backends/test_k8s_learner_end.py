"""On Kubernetes the sidecar cannot see the learner's processes, so a command that writes its own learner.exit got
its job COMPLETED while it ran (issue 27 D12): the scheduler now takes a learner's COMPLETED only once the pod's
learner container has ended, and with the runtime's exit code. The Kubernetes backend over a fake cluster."""

from __future__ import annotations

from datetime import UTC, datetime

from controller_sidecar.status import Phase, StatusRecord
from learnerkit.scheduler.backends import k8s_objects as ko
from learnerkit.scheduler.backends.k8s import KubernetesBackend
from learnerkit.scheduler.backends.k8s_cluster import ContainerStatus, JobStatus, PodStatus
from learnerkit.scheduler.core.endcheck import confirmed_records
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.jobs.aggregate import aggregate
from learnerkit.scheduler.jobs.state import JobState
from learnerkit.scheduler.jobs.state import JobStatus as Status
from learnerkit.scheduler.manifest.parser import parse_manifest

MANIFEST = """\
name: j
cpus: 1
memory: 1Gb
learners: 2
data_stores:
  - id: s3
    type: s3_datastore
    training_data: {container: data}
    training_results: {container: results}
    connection: {auth_url: "http://127.0.0.1:8333", user_name: a, password: b}
framework: {name: custom, version: img, command: run}
"""


class Cluster:
    """The cluster's status of the job's pods, as the kubelet reports them."""

    layout = ko.PodLayout.NATIVE_SIDECAR

    def __init__(self, *learners: ContainerStatus) -> None:
        sidecar = ContainerStatus(ko.SIDECAR_CONTAINER, "running")
        self.pods = tuple(
            PodStatus(f"lk-j-{n}", n, "Running", True, (sidecar, learner)) for n, learner in enumerate(learners, 1)
        )

    def status(self, job_id: str) -> JobStatus:
        return JobStatus(job_id, self.pods)


def completed_job() -> Tracked:
    tracked = Tracked(JobState("j", "team", "j", 0.0), parse_manifest(MANIFEST), MANIFEST, "m.yml")
    first = tracked.state.first_sequence
    tracked.records = {
        n: StatusRecord(Phase.COMPLETED, datetime.now(UTC), n, first + 4, message="completed", exit_code=0)
        for n in (1, 2)
    }
    return tracked


def job_status(*learners: ContainerStatus) -> tuple[Status, str]:
    backend = KubernetesBackend(Cluster(*learners))  # type: ignore[arg-type]
    tracked = completed_job()
    records = confirmed_records(tracked, backend.learners_running("j"), backend.learners_ended("j"))
    result = aggregate(2, records, first_sequence=tracked.state.first_sequence)
    return result.status, result.reason


def done(code: int) -> ContainerStatus:
    return ContainerStatus(ko.LEARNER_CONTAINER, "terminated", exit_code=code)


def test_a_learner_that_reported_completed_while_its_container_runs_is_not_done() -> None:
    status, _ = job_status(done(0), ContainerStatus(ko.LEARNER_CONTAINER, "running"))
    assert status is Status.STORING


def test_the_runtimes_exit_code_refutes_a_forged_exit_record() -> None:
    status, reason = job_status(done(0), done(3))
    assert status is Status.FAILED
    assert reason == (
        "learner 2 failed: exit code 3 the learner container ended with exit code 3 (the runtime's), though "
        "learner.exit said completed: the command wrote its own exit record"
    )


def test_learners_whose_containers_ended_with_zero_complete_the_job() -> None:
    assert job_status(done(0), done(0)) == (Status.COMPLETED, "")
