"""A job a real learner pair ran, registered in the model catalog through the scheduler: a real Scheduler on the
Docker backend with etcd and SeaweedFS signs the job's provenance as it ends; `learnerkit model register JOB`
asks its REST API, which reads the job's outputs from the results store and stores the version in Debian's
docker-registry."""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.request
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from click.testing import CliRunner

from learnerkit.cli import cli
from learnerkit.common.keyring import PublishedKey
from learnerkit.common.signing import create_signer, load_public_key, public_key_path, public_pem
from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.api.auth import add_token
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.factory import describe_image
from learnerkit.scheduler.images.gate import ImageGate
from learnerkit.scheduler.provenance.writer import ProvenanceWriter
from tests.integration.scheduler.conftest import TERMINAL, Harness, manifest
from tests.integration.scheduler.test_provenance_docker import COMMAND, chunks, model_zip
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(900)]


def test_a_completed_job_is_registered_through_the_scheduler(
    etcd_server: Any,
    s3_server: Any,
    service_options: SchedulerOptions,
    scheduler_buckets: Any,
    registry: str,
    learner_image: str,
    tmp_path: Path,
) -> None:
    key = tmp_path / "platform.pem"
    signer = create_signer(key)
    writer = ProvenanceWriter(signer, describe_image(ImageGate(("*",), ())), service_options.platform.sidecar_image)
    harness = Harness(etcd_server, replace(service_options, provenance=writer))
    tokens = tmp_path / "tokens.json"
    token, other = add_token(tokens, "team-a"), add_token(tokens, "team-b")
    published = [PublishedKey(load_public_key(public_key_path(key)).keyid, public_pem(signer), True)]
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    app = create_app(harness.service, tokens, keys=published, catalog=registry)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    serving = asyncio.run_coroutine_threadsafe(server.serve(sockets=[sock]), harness.loop)
    try:
        wait_until(lambda: server.started, timeout=10, message="uvicorn to start")
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"

        def register(as_token: str, job: str) -> tuple[int, Any]:
            env = {"LEARNERKIT_SCHEDULER_URL": url, "LEARNERKIT_TOKEN": as_token}
            args = ["model", "register", job, "--name", name, "--output", "json"]
            result = CliRunner().invoke(cli, args, env=env)
            return result.exit_code, json.loads(result.output)

        name = f"smoke-{uuid.uuid4().hex[:6]}"
        job = harness.call(
            harness.service.submit(
                "team-a", manifest(s3_server, COMMAND), image=learner_image, model=chunks(model_zip(tmp_path))
            )
        ).job_id
        assert harness.wait_status("team-a", job, TERMINAL).status == "COMPLETED"
        code, version = wait_until(
            lambda: (answer := register(token, job))[0] == 0 and answer,
            timeout=60,
            message=lambda: f"the job's registration: {register(token, job)}",
        )
        assert version["name"] == name and version["version"].startswith("sha256:") and version["job"] == job
        assert {f["path"] for f in version["files"]} == {
            "attempt-1/learner-1/results/data.sha256",
            "attempt-1/learner-1/results/model.bin",
        }
        assert version["lineage"]["learnerImage"]["reference"] == learner_image, version["lineage"]
        code, refused = register(other, job)
        assert code == 1 and f"no job {job!r}" in refused["message"], refused
        headers = {"Authorization": f"Bearer {token}"}
        answer = _get(f"{url}/v1/models/{name}/verify/{version['version']}", headers)
        # The evaluations' gate fails: this job ran none, so no alias may point at the version. The scan gate
        # holds only where this host's scan of the learner image passed (a fresh machine's new image has no scan
        # record: the gate then names the missing verdict); every other gate holds.
        scanned = describe_image(ImageGate(("*",), ()))(learner_image).verdict == "passed"
        assert answer["failed"] == (["evaluation thresholds"] if scanned else ["scan gate", "evaluation thresholds"])
        assert {"weights signature", "provenance", "model card", "lineage"} <= set(answer["passed"]), answer
    finally:
        server.should_exit = True
        serving.result(timeout=30)
        sock.close()
        harness.kill()


def _get(url: str, headers: dict[str, str]) -> Any:
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=60) as response:
        return json.load(response)
