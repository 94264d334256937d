"""Submit -> learner start on a real one-node Kubernetes cluster (tests/k8s/cluster.py), images present.

It starts the cluster from the binaries ``make k8s-binaries`` cached (reporting how long that took), the
real etcd and SeaweedFS, and the scheduler with its Kubernetes backend, then submits one short FfDL job at a
time and measures, polling every 20 ms:
- submit -> the learner container running (as the kubelet reports it to the API server) (target p50 <= 3 s);
- submit -> PROCESSING (the sidecar has put the inputs in place and started the learner's command);
as the median and the largest of the jobs, each job run to COMPLETED before the next is submitted.

Usage: sudo .venv/bin/python bench/k8s_start.py [--jobs N]   (root: the kubelet and containerd need it)
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from learnerkit.dev.etcd import EtcdServer, etcd_binary  # noqa: E402
from learnerkit.dev.s3 import SeaweedServer, create_bucket  # noqa: E402
from learnerkit.scheduler.admission.admit import AdmissionPolicy  # noqa: E402
from learnerkit.scheduler.backends.deployment import Egress  # noqa: E402
from learnerkit.scheduler.backends.k8s import KubernetesBackend  # noqa: E402
from learnerkit.scheduler.backends.k8s_cluster import KubernetesCluster  # noqa: E402
from learnerkit.scheduler.backends.k8s_objects import LEARNER_CONTAINER  # noqa: E402
from learnerkit.scheduler.config.policy import SubmitPolicy, origin  # noqa: E402
from learnerkit.scheduler.core.options import SchedulerOptions  # noqa: E402
from learnerkit.scheduler.core.planning import Platform  # noqa: E402
from learnerkit.scheduler.images.catalog import ImageCatalog  # noqa: E402
from learnerkit_build.render import BuildInputs  # noqa: E402
from learnerkit_build.sidecarimage import build_sidecar  # noqa: E402
from learnerkit_build.smokedata import write_smoke_dataset  # noqa: E402
from tests.integration.scheduler.conftest import DATA_BUCKET, RESULTS_BUCKET, TERMINAL, Harness, manifest  # noqa: E402
from tests.k8s.cluster import LocalCluster, cached_binaries  # noqa: E402
from tests.k8s.conftest import LEARNER_IMAGE, NAMESPACE  # noqa: E402

TARGET_S = 3.0
POLL_S = 0.02


def until(predicate: Callable[[], bool], timeout: float = 300) -> float:
    """Poll until ``predicate`` holds; the monotonic time it was first seen true."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return time.monotonic()
        time.sleep(POLL_S)
    raise TimeoutError("the job did not get there in time")


def learner_running(backend: KubernetesBackend, job_id: str) -> bool:
    pods = backend.backend.status(job_id).pods
    return any(c.name == LEARNER_CONTAINER and c.state in ("running", "terminated") for p in pods for c in p.containers)


def build_inputs() -> BuildInputs:
    """As the tests and the Makefile: the local wheelhouse and the host CA bundle, when present."""
    wheelhouse, ca = Path("/opt/wheels"), Path("/etc/ssl/certs/ca-certificates.crt")
    return BuildInputs(wheelhouse=wheelhouse if wheelhouse.is_dir() else None, ca_bundle=ca if ca.is_file() else None)


def status(harness: Harness, job_id: str) -> str:
    return harness.call(harness.service.get("bench", job_id)).status


def one_job(harness: Harness, backend: KubernetesBackend, pod_s3: SimpleNamespace) -> tuple[float, float]:
    """Submit one job; seconds until its learner container runs and until PROCESSING. Waits until it is gone."""
    submitted = time.monotonic()
    job_id = harness.call(harness.service.submit("bench", manifest(pod_s3, "sleep 1"))).job_id
    running = until(lambda: learner_running(backend, job_id)) - submitted
    processing = until(lambda: status(harness, job_id) in {"PROCESSING", "STORING", *TERMINAL}) - submitted
    until(lambda: status(harness, job_id) in TERMINAL)
    until(lambda: not backend.backend.status(job_id).exists)
    return running, processing


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=7)
    args = parser.parse_args()
    binaries = cached_binaries()
    if binaries is None:
        sys.exit("no cached Kubernetes binaries: run `make k8s-binaries` first")
    work = Path(tempfile.mkdtemp(prefix="lk-k8s-bench-"))
    etcd = EtcdServer(etcd_binary(), work / "etcd" / "data")
    s3 = SeaweedServer(work / "s3")
    cluster = LocalCluster(binaries, work / "cluster")
    harness: Harness | None = None
    try:
        etcd.start()
        s3.start()
        cluster.start()
        print(f"cluster start (etcd, apiserver, scheduler, containerd, kubelet Ready): {cluster.started_s:.1f} s")
        sidecar = build_sidecar(REPO, build_inputs(), lambda line: None)
        sidecar_ref = sidecar.immutable_reference or sidecar.reference
        began = time.monotonic()
        cluster.import_images(LEARNER_IMAGE, sidecar_ref)
        print(f"image import (docker save | ctr import, learner + sidecar): {time.monotonic() - began:.1f} s")
        cluster.kubectl("create", "namespace", NAMESPACE)
        client = s3.client()
        for bucket in (DATA_BUCKET, RESULTS_BUCKET):
            create_bucket(client, bucket)
        client.upload_file(str(write_smoke_dataset(work / "smoke")), DATA_BUCKET, "smoke/train.csv")
        s3_port, etcd_port = cluster.forward(int(s3.endpoint_url.rsplit(":", 1)[1])), cluster.forward(etcd.client_port)
        pod_s3 = SimpleNamespace(
            endpoint_url=f"http://{cluster.gateway}:{s3_port}", access_key=s3.access_key, secret_key=s3.secret_key
        )
        catalog = ImageCatalog(REPO)
        options = SchedulerOptions(
            platform=Platform(etcd_endpoints=f"{cluster.gateway}:{etcd_port}", sidecar_image=sidecar_ref),
            catalog=catalog.frameworks(),
            resolve_image=catalog.resolve,
            policy=AdmissionPolicy(ready_timeout_s=180),
            submit_policy=SubmitPolicy(object_stores=(str(origin(pod_s3.endpoint_url)),)),
            interval_s=0.1,
        )
        gateway = f"{cluster.gateway}/32"
        backend = KubernetesBackend(
            KubernetesCluster.from_kubeconfig(str(cluster.kubeconfig), namespace=NAMESPACE),
            (Egress(gateway, etcd_port), Egress(gateway, s3_port)),
        )
        harness = Harness(etcd, options, backend=backend)
        running, processing = [], []
        for _ in range(args.jobs):
            to_running, to_processing = one_job(harness, backend, pod_s3)
            running.append(to_running)
            processing.append(to_processing)
        for label, figures in (("learner container running", running), ("PROCESSING", processing)):
            print(
                f"submit -> {label}: p50 {statistics.median(figures):.2f} s, max {max(figures):.2f} s "
                f"over {len(figures)} jobs (target p50 <= {TARGET_S:g} s for the first)"
            )
    finally:
        if harness is not None:
            harness.kill()
        cluster.stop()
        s3.stop()
        etcd.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
