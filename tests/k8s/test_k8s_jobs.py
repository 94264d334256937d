"""FfDL manifests through the scheduler and its Kubernetes backend on a real kube-apiserver, kube-scheduler and
kubelet (learnerkit/dev/k8scluster/): the real etcd and S3 behind them, the project's own learner and sidecar
images."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client import CoreV1Api

from learnerkit.dev.k8scluster import LocalCluster
from learnerkit.dev.k8scluster.host import NETNS
from learnerkit.scheduler.backends.k8s import KubernetesBackend
from learnerkit.scheduler.backends.k8s_objects import GPU_RESOURCE, LEARNER_CONTAINER, PodLayout
from learnerkit.scheduler.core.options import SchedulerOptions
from tests.integration.conftest import REPO
from tests.integration.scheduler.conftest import GATE, HELD, RESULTS_BUCKET, TERMINAL, Harness, manifest
from tests.integration.scheduler.test_scheduler_docker import DDP_SCRIPT
from tests.k8s.conftest import LEARNER_IMAGE, NAMESPACE, job_objects_left
from tests.waiting import wait_until

pytestmark = [pytest.mark.k8s, pytest.mark.services, pytest.mark.timeout(900)]

SMOKE = "python /opt/learner/smoke/train.py --steps {steps} --checkpoint-every 10"


def stored(client: Any, key: str) -> bytes:
    return bytes(client.get_object(Bucket=RESULTS_BUCKET, Key=key)["Body"].read())


def gone(api: Any, job_id: str) -> None:
    """Wait until nothing of the job is left: a deleted pod stays (terminating) until the kubelet has stopped it."""
    wait_until(
        lambda: job_objects_left(api, job_id) == [], timeout=120, message=lambda: str(job_objects_left(api, job_id))
    )


def explain(cluster: LocalCluster, job_id: str) -> str:
    """The job's pods as ``kubectl describe`` shows them, and each container's log: for a failure message."""
    selector = f"-l=learnerkit.io/job-id={job_id}"
    described = cluster.kubectl("-n", NAMESPACE, "describe", "pods", selector)
    logs = cluster.kubectl("-n", NAMESPACE, "logs", selector, "--all-containers", "--tail=40")
    return f"{described}\n{logs}"


def test_a_1_20_server_gets_the_classic_layout(k8s_backend: KubernetesBackend) -> None:
    assert k8s_backend.backend.layout is PodLayout.CLASSIC


def test_manifest_runs_to_completed_with_logs_results_and_metrics(
    k8s_harness: Harness, pod_s3: SimpleNamespace, scheduler_buckets: Any, k8s_api: Any, k8s_cluster: LocalCluster
) -> None:
    view = k8s_harness.call(k8s_harness.service.submit("team-a", manifest(pod_s3, SMOKE.format(steps=30))))
    final = k8s_harness.wait_status("team-a", view.job_id, TERMINAL | {"STORING"})
    assert final.status in ("COMPLETED", "STORING"), f"{final}\n{explain(k8s_cluster, view.job_id)}"
    final = k8s_harness.wait_status("team-a", view.job_id, TERMINAL)
    assert final.status == "COMPLETED", final
    summary = json.loads(stored(scheduler_buckets, f"{view.job_id}/attempt-1/learner-1/results/summary.json"))
    assert summary["final_step"] == 30
    assert final.learners[0].status == "COMPLETED" and {"loss", "accuracy"} <= set(final.learners[0].metrics)
    log = k8s_harness.call(k8s_harness.service.logs("team-a", view.job_id))
    assert log.finished and b"done: steps 1..30" in log.read()
    gone(k8s_api, view.job_id)


def test_cancel_in_processing_leaves_nothing(
    k8s_harness: Harness, pod_s3: SimpleNamespace, scheduler_buckets: Any, k8s_api: Any, k8s_cluster: LocalCluster
) -> None:
    view = k8s_harness.call(k8s_harness.service.submit("team-a", manifest(pod_s3, "sleep 300")))
    k8s_harness.wait_status("team-a", view.job_id, {"PROCESSING"}, timeout=240)
    assert job_objects_left(k8s_api, view.job_id) != []
    # The pod's network namespace is mounted under the cluster's folder, not in the host's /var/run/netns, where a
    # cluster beside this one would take it for its own (an nsfs mount's inode is the namespace's).
    # A machine where nothing ever named a namespace has no /var/run/netns at all.
    ours = {Path(mount).stat().st_ino for mount in k8s_cluster.pod_network_namespaces()}
    hosts = {path.stat().st_ino for path in NETNS.iterdir()} if NETNS.is_dir() else set()
    assert ours and not ours & hosts
    cancelled = k8s_harness.call(k8s_harness.service.cancel("team-a", view.job_id))
    assert cancelled.status == "CANCELLED"
    gone(k8s_api, view.job_id)


def test_halt_then_resume_continues_from_the_checkpoint(
    k8s_harness: Harness, pod_s3: SimpleNamespace, scheduler_buckets: Any, k8s_api: Any
) -> None:
    extra = "learnerkit:\n  halt_grace: 20\n"
    command = "SMOKE_MIN_STEP_SECONDS=0.1 " + SMOKE.format(steps=80)
    view = k8s_harness.call(k8s_harness.service.submit("team-a", manifest(pod_s3, command, extra=extra)))
    k8s_harness.wait_status("team-a", view.job_id, {"PROCESSING"}, timeout=240)
    wait_until(
        lambda: k8s_harness.call(k8s_harness.service.get("team-a", view.job_id)).learners[0].metrics,
        timeout=120,
        message="metrics in etcd",
    )
    k8s_harness.call(k8s_harness.service.halt("team-a", view.job_id))
    halted = k8s_harness.wait_status("team-a", view.job_id, TERMINAL)
    assert halted.status == "HALTED", halted
    gone(k8s_api, view.job_id)
    k8s_harness.call(k8s_harness.service.resume("team-a", view.job_id))
    final = k8s_harness.wait_status("team-a", view.job_id, TERMINAL)
    assert final.status == "COMPLETED", final
    summary = json.loads(stored(scheduler_buckets, f"{view.job_id}/attempt-2/learner-1/results/summary.json"))
    assert summary["start_step"] > 1 and summary["final_step"] == 80
    gone(k8s_api, view.job_id)


def test_two_learner_ddp_job_rendezvouses_and_shares_the_job_folder(
    k8s_harness: Harness, pod_s3: SimpleNamespace, scheduler_buckets: Any, k8s_api: Any, k8s_cluster: LocalCluster
) -> None:
    scheduler_buckets.put_object(Bucket="sched-data", Key="ddp/ddp.py", Body=DDP_SCRIPT.encode())
    extra = "learnerkit:\n  distributed: ddp\n"
    # Each learner leaves its pod name in the job's shared folder (the RWX claim) before the rendezvous and reads
    # both after it, as FfDL examples leave host files there.
    shared = "$JOB_SHARED_DIR"
    command = (
        f"echo $DOWNWARD_API_POD_NAME > {shared}/$LEARNER_ID && python $DATA_DIR/ddp.py"
        f" && cat {shared}/1 {shared}/2 > $RESULT_DIR/shared.txt"
    )
    job = manifest(pod_s3, command, data="ddp", learners=2, extra=extra)
    view = k8s_harness.call(k8s_harness.service.submit("team-a", job))
    final = k8s_harness.wait_status("team-a", view.job_id, TERMINAL)
    assert final.status == "COMPLETED", f"{final}\n{explain(k8s_cluster, view.job_id)}"
    results = [
        json.loads(stored(scheduler_buckets, f"{view.job_id}/attempt-1/learner-{n}/results/ddp.json")) for n in (1, 2)
    ]
    assert sorted(r["rank"] for r in results) == [0, 1]
    pods = f"lk-{view.job_id}-1\nlk-{view.job_id}-2\n".encode()
    for n in (1, 2):
        assert stored(scheduler_buckets, f"{view.job_id}/attempt-1/learner-{n}/results/shared.txt") == pods
    assert {r["sum"] for r in results} == {3.0} and {r["master"] for r in results} == {
        f"lk-{view.job_id}-1.lk-{view.job_id}"
    }
    gone(k8s_api, view.job_id)


def test_gpu_job_runs_on_fake_gpus_and_one_asking_too_many_is_refused_with_the_reason(
    k8s_cluster: LocalCluster,
    etcd_server: Any,
    k8s_options: SchedulerOptions,
    k8s_backend: KubernetesBackend,
    pod_s3: SimpleNamespace,
    scheduler_buckets: Any,
    k8s_api: Any,
) -> None:
    # The scheduler reads the nodes when it starts: the node advertises its GPUs before that.
    k8s_cluster.patch_node_status({"status": {"capacity": {GPU_RESOURCE: "2"}, "allocatable": {GPU_RESOURCE: "2"}}})
    harness = Harness(etcd_server, k8s_options, backend=k8s_backend)
    try:
        image = f"learnerkit:\n  image: {LEARNER_IMAGE}\n"
        fits = manifest(pod_s3, "echo gpus=$GPU_COUNT").replace("gpus: 0", "gpus: 1") + image
        too_many = manifest(pod_s3, "true").replace("gpus: 0", "gpus: 4") + image
        view = harness.call(harness.service.submit("team-a", fits))
        final = harness.wait_status("team-a", view.job_id, TERMINAL)
        assert final.status == "COMPLETED", final.reason
        assert b"gpus=1" in harness.call(harness.service.logs("team-a", view.job_id)).read()
        refused = harness.call(harness.service.submit("team-a", too_many))
        reason = wait_until(
            lambda: harness.call(harness.service.get("team-a", refused.job_id)).reason,
            timeout=60,
            message="a reason on the GPU job that cannot fit",
        )
        assert "4" in reason and "GPU" in reason.upper(), reason
        assert job_objects_left(k8s_api, refused.job_id) == []
    finally:
        harness.kill()
        gone = {GPU_RESOURCE: None}
        k8s_cluster.patch_node_status({"status": {"capacity": gone, "allocatable": gone}})


def test_scheduler_restart_leaves_the_running_job_alone(
    k8s_harness: Harness,
    pod_s3: SimpleNamespace,
    scheduler_buckets: Any,
    k8s_api: Any,
    k8s_backend: KubernetesBackend,
    k8s_cluster: LocalCluster,
) -> None:
    view = k8s_harness.call(k8s_harness.service.submit("team-a", manifest(pod_s3, HELD)))
    k8s_harness.wait_status("team-a", view.job_id, {"PROCESSING"}, timeout=240)
    # The kubelet reports container states to the API a little after the sidecar reports PROCESSING to etcd.
    before = wait_until(lambda: learner_started(k8s_api, view.job_id), timeout=60, message="the learner running")
    k8s_harness.kill()
    again = Harness(k8s_harness.etcd_server, k8s_harness.options, backend=k8s_backend)
    try:
        assert learner_started(k8s_api, view.job_id) == before, "the pod was replaced or its learner restarted"
        let_go(k8s_cluster, view.job_id)
        final = again.wait_status("team-a", view.job_id, TERMINAL)
        assert final.status == "COMPLETED", final
        gone(k8s_api, view.job_id)
    finally:
        again.kill()


def test_a_forged_exit_record_does_not_end_the_learner_and_what_it_writes_after_is_stored(
    k8s_harness: Harness, pod_s3: SimpleNamespace, scheduler_buckets: Any, k8s_api: Any
) -> None:
    """Issue 27 D12 on Kubernetes: the command writes its own ``learner.exit`` (completed), then a result, then
    exits 3. The sidecar waits for the learner's processes to leave the pod's PID namespace, so the job ends
    FAILED with the command's real code and the result written after the forgery is stored."""
    forge = (
        "echo before > $RESULT_DIR/before.txt"
        """ && echo '{"exit_code": 0, "reason": "completed"}' > $JOB_STATE_DIR/learner.exit"""
        " && sleep 5 && echo after > $RESULT_DIR/after.txt && exit 3"
    )
    view = k8s_harness.call(k8s_harness.service.submit("team-a", manifest(pod_s3, forge)))
    final = k8s_harness.wait_status("team-a", view.job_id, TERMINAL, timeout=300)
    assert final.status == "FAILED", final
    assert final.learners[0].exit_code == 3, final
    prefix = f"{view.job_id}/attempt-1/learner-1/results"
    assert stored(scheduler_buckets, f"{prefix}/before.txt") == b"before\n"
    assert stored(scheduler_buckets, f"{prefix}/after.txt") == b"after\n"
    gone(k8s_api, view.job_id)


def let_go(cluster: LocalCluster, job_id: str) -> None:
    """End a `HELD` learner: make the file it waits for in its pod's /tmp."""
    cluster.kubectl("-n", NAMESPACE, "exec", f"lk-{job_id}-1", "-c", LEARNER_CONTAINER, "--", "sh", "-c", f": > {GATE}")


def learner_started(api: Any, job_id: str) -> tuple[str, str] | None:
    """The learner pod's UID and when its learner container started running (None before it runs)."""
    pods = CoreV1Api(api).list_namespaced_pod(NAMESPACE, label_selector=f"learnerkit.io/job-id={job_id}").items
    for pod in pods:
        for status in pod.status.container_statuses or []:
            if status.name == LEARNER_CONTAINER and status.state.running is not None:
                return pod.metadata.uid, str(status.state.running.started_at)
    return None


def test_the_schedulers_own_manifests_pass_the_real_server(k8s_cluster: LocalCluster) -> None:
    """deploy/kubernetes (kustomize) as `kubectl apply --dry-run=server` sends it: admission and validation."""
    k8s_cluster.kubectl("create", "namespace", "learnerkit-system")
    applied = k8s_cluster.kubectl("apply", "--dry-run=server", "-k", str(REPO / "deploy" / "kubernetes"))
    for kind in ("deployment.apps", "serviceaccount", "role.rbac", "rolebinding.rbac", "clusterrole.rbac", "service/"):
        assert kind in applied, applied
