"""`learnerkit scheduler serve --backend kubernetes` and the `learnerkit job` CLI over its REST API, on the real
one-node cluster: the path a user takes, with `$KUBECONFIG` and the `LEARNERKIT_K8S_*` settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from learnerkit.dev.k8scluster import SHARED_CLASS, LocalCluster
from learnerkit.dev.ports import free_port
from learnerkit.scheduler.core.options import SchedulerOptions
from tests.integration.conftest import REPO
from tests.integration.scheduler.conftest import RESULTS_BUCKET, manifest
from tests.k8s.conftest import NAMESPACE, job_objects_left
from tests.waiting import wait_until

pytestmark = [pytest.mark.k8s, pytest.mark.services, pytest.mark.timeout(900)]


def learnerkit(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "learnerkit", *args], capture_output=True, text=True, env=env, timeout=600, cwd=REPO
    )
    assert done.returncode == 0, f"learnerkit {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


@pytest.fixture
def served(
    k8s_cluster: LocalCluster,
    pod_etcd_port: int,
    pod_s3: SimpleNamespace,
    k8s_options: SchedulerOptions,
    scheduler_buckets: Any,
    tmp_path: Path,
) -> Iterator[dict[str, str]]:
    """The environment of a user whose scheduler serves on this cluster: URL and token set."""
    gateway = k8s_cluster.gateway
    env = {
        **os.environ,
        "KUBECONFIG": str(k8s_cluster.kubeconfig),
        "LEARNERKIT_K8S_NAMESPACE": NAMESPACE,
        "LEARNERKIT_K8S_SHARED_STORAGE_CLASS": SHARED_CLASS,
        "LEARNERKIT_K8S_EGRESS": f"{gateway}/32:{pod_etcd_port},{gateway}/32:{pod_s3.port}",
        "LEARNERKIT_SIDECAR_IMAGE": k8s_options.platform.sidecar_image,
        "AWS_ACCESS_KEY_ID": pod_s3.access_key,
        "AWS_SECRET_ACCESS_KEY": pod_s3.secret_key,
    }
    tokens = tmp_path / "tokens.json"
    added = learnerkit(env, "scheduler", "token", "add", "team-k8s", "--tokens", str(tokens), "--output", "json")
    signing_key = tmp_path / "signing-key.pem"
    learnerkit(env, "scheduler", "key", "create", "--key", str(signing_key), "--output", "json")
    port = free_port()
    argv = [
        *(sys.executable, "-m", "learnerkit", "scheduler", "serve", "--backend", "kubernetes"),
        *("--port", str(port), "--tokens", str(tokens), "--signing-key", str(signing_key), "--trust-project-images"),
        *("--etcd-endpoints", f"{gateway}:{pod_etcd_port}", "--s3-endpoint", pod_s3.endpoint_url),
    ]
    log = (tmp_path / "serve.log").open("wb")
    server = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(
            lambda: server.poll() is not None or healthy(url),
            timeout=60,
            message=lambda: (tmp_path / "serve.log").read_text(),
        )
        assert server.poll() is None, (tmp_path / "serve.log").read_text()
        yield {**env, "LEARNERKIT_SCHEDULER_URL": url, "LEARNERKIT_TOKEN": json.loads(added)["token"]}
    finally:
        server.terminate()
        server.wait(timeout=60)
        log.close()


def test_job_cli_through_scheduler_serve_runs_a_manifest_to_completed(
    served: dict[str, str], pod_s3: SimpleNamespace, scheduler_buckets: Any, k8s_api: Any, tmp_path: Path
) -> None:
    path = tmp_path / "manifest.yml"
    path.write_text(manifest(pod_s3, "python /opt/learner/smoke/train.py --steps 20 --checkpoint-every 10"))
    submitted = json.loads(learnerkit(served, "job", "submit", str(path), "--output", "json"))
    job_id = submitted["job_id"]
    followed = learnerkit(served, "job", "status", job_id, "--follow", "--output", "json")
    final = json.loads(followed.strip().splitlines()[-1])
    assert final["status"] == "COMPLETED", final
    assert {"loss", "accuracy"} <= set(final["learners"][0]["metrics"])
    assert "done: steps 1..20" in learnerkit(served, "job", "logs", job_id)
    key = f"{job_id}/attempt-1/learner-1/results/summary.json"
    assert json.loads(scheduler_buckets.get_object(Bucket=RESULTS_BUCKET, Key=key)["Body"].read())["final_step"] == 20
    wait_until(lambda: job_objects_left(k8s_api, job_id) == [], timeout=120, message="the job's objects to go")
