"""Submit -> learner start on a real one-node Kubernetes cluster (learnerkit/dev/k8scluster/), images present.

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
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace

from benchjobs import DATA_BUCKET, RESULTS_BUCKET, manifest

from controller_sidecar.etcdstore import EtcdStore
from learnerkit.dev.etcd import EtcdServer, etcd_binary
from learnerkit.dev.k8scluster import LocalCluster, cached_binaries
from learnerkit.dev.s3 import SeaweedServer, create_bucket
from learnerkit.scheduler.admission.admit import AdmissionPolicy
from learnerkit.scheduler.backends.deployment import Egress
from learnerkit.scheduler.backends.k8s import KubernetesBackend
from learnerkit.scheduler.backends.k8s_cluster import KubernetesCluster
from learnerkit.scheduler.backends.k8s_objects import LEARNER_CONTAINER
from learnerkit.scheduler.config.policy import SubmitPolicy, origin
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.core.planning import Platform
from learnerkit.scheduler.core.scheduler import Scheduler
from learnerkit.scheduler.images.catalog import ImageCatalog
from learnerkit.scheduler.jobs.state import JobStatus
from learnerkit.scheduler.jobs.store import JobStore
from learnerkit_build.builds.sidecarimage import build_sidecar
from learnerkit_build.imagetest.smokedata import write_smoke_dataset
from learnerkit_build.recipes.render import BuildInputs

REPO = Path(__file__).resolve().parents[1]
TENANT = "bench"
NAMESPACE = "learnerkit"
LEARNER_IMAGE = "learnerkit/pytorch:2.13-cpu-py3.11"
"""The image the manifest's framework (PyTorch 2.13, no GPU) resolves to: imported into the node beforehand."""
TARGET_S = 3.0
POLL_S = 0.02


async def until(predicate: Callable[[], Awaitable[bool]], timeout: float = 300) -> float:
    """Poll until ``predicate`` holds; the monotonic time it was first seen true."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await predicate():
            return time.monotonic()
        await asyncio.sleep(POLL_S)
    raise TimeoutError("the job did not get there in time")


def learner_running(backend: KubernetesBackend, job_id: str) -> bool:
    pods = backend.backend.status(job_id).pods
    return any(c.name == LEARNER_CONTAINER and c.state in ("running", "terminated") for p in pods for c in p.containers)


def build_inputs() -> BuildInputs:
    """As the tests and the Makefile: the local wheelhouse and the host CA bundle, when present."""
    wheelhouse, ca = Path("/opt/wheels"), Path("/etc/ssl/certs/ca-certificates.crt")
    return BuildInputs(wheelhouse=wheelhouse if wheelhouse.is_dir() else None, ca_bundle=ca if ca.is_file() else None)


async def one_job(service: Scheduler, backend: KubernetesBackend, pod_s3: SimpleNamespace) -> tuple[float, float]:
    """Submit one job; seconds until its learner container runs and until PROCESSING. Waits until it is gone."""

    async def status() -> JobStatus:
        return JobStatus((await service.get(TENANT, job_id)).status)

    async def running() -> bool:
        return await asyncio.to_thread(learner_running, backend, job_id)

    async def processing() -> bool:
        return await status() in (JobStatus.PROCESSING, JobStatus.STORING) or (await status()).terminal

    async def ended() -> bool:
        return (await status()).terminal

    async def gone() -> bool:
        return not (await asyncio.to_thread(backend.backend.status, job_id)).exists

    submitted = time.monotonic()
    job_id = (await service.submit(TENANT, manifest(pod_s3, "sleep 1", cpus=0.5, memory="1Gb"))).job_id
    to_running = await until(running) - submitted
    to_processing = await until(processing) - submitted
    await until(ended)
    await until(gone)
    return to_running, to_processing


async def measure(
    etcd: EtcdServer, options: SchedulerOptions, backend: KubernetesBackend, pod_s3: SimpleNamespace, jobs: int
) -> tuple[list[float], list[float]]:
    """The scheduler and its loop on this event loop, as `scheduler serve` runs them, and ``jobs`` jobs in turn."""
    store = await EtcdStore.connect(etcd.settings())
    service = Scheduler(JobStore(store), backend, options)
    await service.loop.rebuild()
    stop = asyncio.Event()
    loop = asyncio.create_task(service.loop.run(stop), name="scheduler loop")
    running, processing = [], []
    try:
        for _ in range(jobs):
            to_running, to_processing = await one_job(service, backend, pod_s3)
            running.append(to_running)
            processing.append(to_processing)
    finally:
        stop.set()
        await loop
        await store.close()
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
        running, processing = asyncio.run(measure(etcd, options, backend, pod_s3, args.jobs))
        for label, figures in (("learner container running", running), ("PROCESSING", processing)):
            print(
                f"submit -> {label}: p50 {statistics.median(figures):.2f} s, max {max(figures):.2f} s "
                f"over {len(figures)} jobs (target p50 <= {TARGET_S:g} s for the first)"
            )
    finally:
        cluster.stop()
        s3.stop()
        etcd.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
