"""`job metrics` and `job download` as a user runs them: the CLI over the real REST API, served on the loop of
a real Scheduler with real learner pairs, etcd and S3. The job's script writes TensorBoard scalars with
PyTorch's own SummaryWriter; the manifest asks for them with FfDL's ``evaluation_metrics: tensorboard``."""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from click.testing import CliRunner

from learnerkit.cli import cli
from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.api.auth import add_token
from learnerkit_build.recipes.render import BuildInputs
from tests.integration.scheduler.conftest import DATA_BUCKET, TERMINAL, Harness, manifest
from tests.integration.tbwriters import HERE, PYTORCH, learner_image
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(900)]

STEPS = 6
COMMAND = (
    f"python /job/data/torch_scalars.py /job/logs/tb/run {STEPS} && echo stored > /job/results/out.txt"
    " && mkdir -p /job/results/sub && head -c 300000 /dev/urandom > /job/results/sub/blob.bin"
)


@dataclass(frozen=True)
class Api:
    url: str
    team_a: str
    team_b: str

    def job(self, token: str, *args: str) -> tuple[int, str]:
        env = {"LEARNERKIT_SCHEDULER_URL": self.url, "LEARNERKIT_TOKEN": token, "COLUMNS": "80"}
        result = CliRunner().invoke(cli, ["job", *args], env=env)
        return result.exit_code, result.output


@pytest.fixture
def api(harness: Harness, tmp_path: Path) -> Iterator[Api]:
    """The REST API over the harness's Scheduler, on its own event loop (the scheduler's etcd client lives there)."""
    tokens = tmp_path / "tokens.json"
    team_a, team_b = add_token(tokens, "team-a"), add_token(tokens, "team-b")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(harness.service, tokens), log_level="warning"))
    serving = asyncio.run_coroutine_threadsafe(server.serve(sockets=[sock]), harness.loop)
    wait_until(lambda: server.started, timeout=10, message="uvicorn to start")
    yield Api(f"http://127.0.0.1:{sock.getsockname()[1]}", team_a, team_b)
    server.should_exit = True
    serving.result(timeout=30)
    sock.close()


def test_tensorboard_scalars_appear_in_job_metrics_and_results_download_for_the_tenant_only(
    harness: Harness, api: Api, s3_server: Any, scheduler_buckets: Any, build_inputs: BuildInputs, tmp_path: Path
) -> None:
    scheduler_buckets.upload_file(str(HERE / "torch_scalars.py"), DATA_BUCKET, "tb/torch_scalars.py")
    extra = f"""\
        evaluation_metrics:
          type: tensorboard
          in: "$LOG_DIR/tb"
        learnerkit:
          image: {learner_image(PYTORCH, build_inputs)}
        """
    text = manifest(s3_server, COMMAND, data="tb", extra=extra)
    job_id = harness.call(harness.service.submit("team-a", text)).job_id
    final = harness.wait_status("team-a", job_id, TERMINAL)
    assert final.status == "COMPLETED", final
    assert final.learners[0].metrics["run/train/loss"] == pytest.approx(1.0 / STEPS), "the latest value, in etcd"

    code, out = api.job(api.team_a, "metrics", job_id, "--output", "json")
    assert code == 0, out
    records = json.loads(out)["records"]
    assert {record["source"] for record in records} == {"tensorboard"}
    loss = [(r["step"], r["values"]["run/train/loss"]) for r in records if "run/train/loss" in r["values"]]
    assert loss == [(step, pytest.approx(1.0 / (step + 1))) for step in range(STEPS)]
    lr = [(r["step"], r["values"]["run/train/lr"]) for r in records if "run/train/lr" in r["values"]]
    assert lr == [(step, pytest.approx(0.5**step)) for step in range(STEPS)]
    code, table = api.job(api.team_a, "metrics", job_id)
    assert code == 0 and "run/train/lr" in table
    assert max(len(line) for line in table.splitlines()) <= 80

    to = tmp_path / "download"
    code, out = api.job(api.team_a, "download", job_id, "--to", str(to), "--output", "json")
    assert code == 0, out
    summary = json.loads(out)
    assert sorted(item["path"] for item in summary["files"]) == [
        "attempt-1/learner-1/results/out.txt",
        "attempt-1/learner-1/results/sub/blob.bin",
    ]
    assert (to / "attempt-1/learner-1/results/out.txt").read_text() == "stored\n"
    assert (to / "attempt-1/learner-1/results/sub/blob.bin").stat().st_size == 300_000
    code, out = api.job(api.team_a, "download", job_id, "--to", str(tmp_path / "model"), "--what", "model")
    assert code == 0 and f"model: job {job_id} stored no model" in out

    stranger = tmp_path / "stranger"
    for args in (("metrics", job_id), ("download", job_id, "--to", str(stranger), "--what", "all")):
        code, out = api.job(api.team_b, *args, "--output", "json")
        assert code == 1
        assert json.loads(out) == {"error": "JobNotFoundError", "message": f"no job {job_id!r}"}
    assert not stranger.exists()
    request = urllib.request.Request(
        f"{api.url}/v1/jobs/{job_id}/files/attempt-1/learner-1/results/out.txt",
        headers={"Authorization": f"Bearer {api.team_b}"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 404
