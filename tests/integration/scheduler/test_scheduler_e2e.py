"""The scheduler as a user runs it: `learnerkit dev up --with-scheduler`, then the `learnerkit job` CLI over the
real REST API, the real service, etcd, SeaweedFS and the Docker engine (the path `make demo` takes)."""

from __future__ import annotations

import json
import os
import shlex
import ssl
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from learnerkit_build.builds.sidecarimage import build_sidecar
from learnerkit_build.imagetest.smokedata import write_smoke_dataset
from learnerkit_build.recipes.render import BuildInputs
from tests.integration.conftest import REPO
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(600)]


def run(argv: list[str], env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=420, cwd=REPO)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def learnerkit(env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-m", "learnerkit", *args], env, check)


@pytest.fixture(scope="module")
def shell(tmp_path_factory: pytest.TempPathFactory, build_inputs: BuildInputs) -> Iterator[dict[str, str]]:
    """The environment after `dev up --with-scheduler --with-prometheus` and `eval "$(learnerkit dev env)"`."""
    build_sidecar(REPO, build_inputs, lambda line: None)
    state = tmp_path_factory.mktemp("e2e-services")
    env = {**os.environ, "LEARNERKIT_SERVICES_DIR": str(state)}
    try:
        learnerkit(env, "dev", "up", "--with-scheduler", "--with-prometheus", "--any-port")
        words = shlex.split(learnerkit(env, "dev", "env").stdout)
        env.update(dict(word.split("=", 1) for word in words if "=" in word and word != "export"))
        env["LEARNERKIT_SERVICES_STATE"] = str(state)
        yield env
    finally:
        learnerkit(env, "dev", "down", check=False)


def manifest_file(folder: Path) -> Path:
    """The demo's manifest, trained shorter; `job submit` fills in the dev S3 endpoint and keys from the shell."""
    text = (REPO / "examples" / "pytorch-smoke" / "manifest.yml").read_text()
    path = folder / "manifest.yml"
    path.write_text(text.replace("--steps 200", "--steps 40").replace("0.05", "0.01"))
    return path


def s3(env: dict[str, str]) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=env["S3_ENDPOINT_URL"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name="us-east-1",
    )


def test_a_manifest_submitted_over_http_is_followed_to_completed(shell: dict[str, str], tmp_path: Path) -> None:
    data = write_smoke_dataset(tmp_path / "data")
    learnerkit(shell, "dev", "upload", str(data.parent), "s3://training-data/pytorch-smoke/")
    manifest = manifest_file(tmp_path)

    submitted = json.loads(learnerkit(shell, "job", "submit", str(manifest), "--output", "json").stdout)
    job_id = submitted["job_id"]
    assert submitted["status"] == "QUEUED" and submitted["tenant"] == "demo"
    followed = learnerkit(shell, "job", "status", job_id, "--follow", "--output", "json")
    final = json.loads(followed.stdout.strip().splitlines()[-1])
    assert final["status"] == "COMPLETED", final
    assert {"loss", "accuracy"} <= set(final["learners"][0]["metrics"])
    log = learnerkit(shell, "job", "logs", job_id).stdout
    assert "done: steps 1..40" in log
    summary = s3(shell).get_object(Bucket="training-results", Key=f"{job_id}/attempt-1/learner-1/results/summary.json")
    assert json.loads(summary["Body"].read())["final_step"] == 40

    listed = json.loads(learnerkit(shell, "job", "list", "--output", "json").stdout)
    assert [job["job_id"] for job in listed].count(job_id) == 1

    # As `make demo` ends: the provenance the dev scheduler signed with the key `dev up` made, verified.
    wait_until(
        lambda: learnerkit(shell, "job", "provenance", job_id, check=False).returncode == 0,
        timeout=60,
        message="the job's provenance",
    )
    learnerkit(shell, "job", "download", job_id, "--what", "all", "--to", str(tmp_path / "download"))
    verified = learnerkit(shell, "job", "verify", str(tmp_path / "download"), "--data", str(data.parent), "-o", "json")
    report = json.loads(verified.stdout)
    assert report["verified"] and report["changed"] == []
    key = Path(shell["LEARNERKIT_SERVICES_STATE"]) / "scheduler" / "signing-key.pub"
    assert learnerkit(shell, "scheduler", "public-key").stdout == key.read_text()

    tokens = Path(shell["LEARNERKIT_SERVICES_STATE"]) / "scheduler" / "tokens.json"
    other = learnerkit(shell, "scheduler", "token", "add", "other-team", "--tokens", str(tokens), "--output", "json")
    stranger = {**shell, "LEARNERKIT_TOKEN": json.loads(other.stdout)["token"]}
    refused = learnerkit(stranger, "job", "status", job_id, "--output", "json", check=False)
    assert refused.returncode != 0 and "no job" in refused.stdout + refused.stderr
    assert json.loads(learnerkit(stranger, "job", "list", "--output", "json").stdout) == []

    assert shell["LEARNERKIT_SCHEDULER_URL"].startswith("https://"), "dev up serves the API over TLS"
    tls = ssl.create_default_context(cafile=shell["LEARNERKIT_SCHEDULER_CA"])
    with urllib.request.urlopen(f"{shell['LEARNERKIT_SCHEDULER_URL']}/metrics", timeout=10, context=tls) as answer:
        metrics = answer.read().decode()
        assert answer.headers["Strict-Transport-Security"] == "max-age=31536000"
    assert 'learnerkit_scheduler_jobs{status="COMPLETED"} 1.0' in metrics
    query = urllib.parse.urlencode({"query": 'learnerkit_scheduler_jobs{status="COMPLETED"}'})

    def scraped() -> list[Any]:
        with urllib.request.urlopen(f"{shell['PROMETHEUS_URL']}/api/v1/query?{query}", timeout=10) as answer:
            result: list[Any] = json.load(answer)["data"]["result"]
        return [sample for sample in result if sample["value"][1] == "1"]

    wait_until(scraped, timeout=90, interval=1, message="Prometheus to scrape the scheduler's completed job")
