"""`job logs --attempt N` over the real REST API: a preempted then resumed job's first attempt's log, its halt
included, read back from the real SeaweedFS through a real Scheduler restored from the real etcd."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from controller_sidecar.logship import part_name
from learnerkit.cli import cli
from learnerkit.dev.s3 import create_bucket
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.api.auth import add_token
from learnerkit.scheduler.client.http import SchedulerClient
from learnerkit.scheduler.config.policy import origin
from learnerkit.scheduler.errors import ApiError
from learnerkit.scheduler.jobs.state import JobState, JobStatus
from learnerkit.scheduler.jobs.store import JobStore
from learnerkit.scheduler.manifest.parser import parse_manifest
from tests.integration.scheduler.restored import restored_scheduler

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(600)]

BUCKET = "logs-attempts"
FIRST = [b"step 10 loss 0.9\n", b"step 20 loss 0.7\nhalt requested: checkpoint at step 20\nhalted (exit 143)\n"]
SECOND = [b"restored step 20\nstep 30 loss 0.5\n"]


@dataclass(frozen=True)
class Served:
    url: str
    token: str
    job_id: str


def _manifest(s3: Any) -> str:
    return f"""\
name: preempted
cpus: 0.01
memory: 16Mb
learners: 1
data_stores:
  - id: s3
    type: s3_datastore
    training_data: {{container: {BUCKET}}}
    training_results: {{container: {BUCKET}}}
    connection: {{auth_url: "{s3.endpoint_url}", user_name: "{s3.access_key}", password: "{s3.secret_key}"}}
framework:
  name: pytorch
  version: "2.13"
  command: "true"
"""


@pytest.fixture
def served(etcd_server: Any, s3_server: Any, tmp_path: Path) -> Iterator[Served]:
    """A HALTED job in its second attempt, each attempt's log shipped in parts as the sidecar ships them."""
    s3 = s3_server.client()
    create_bucket(s3, BUCKET)
    job_id = f"job-{uuid.uuid4().hex[:12]}"
    for attempt, parts in ((1, FIRST), (2, SECOND)):
        for n, data in enumerate(parts, start=1):
            s3.put_object(Bucket=BUCKET, Key=f"{job_id}/attempt-{attempt}/learner-1/logs/{part_name(n)}", Body=data)
    tokens = tmp_path / "tokens.json"
    token = add_token(tokens, "team-a")
    text = _manifest(s3_server)

    async def write(store: JobStore) -> None:
        state = JobState(job_id, "team-a", "preempted", 1_800_000_000.0)
        spec = {"manifest": parse_manifest(text, "manifest.yml", None).to_dict(), "tenant": "team-a", "job_id": job_id}
        await store.create(state, spec, text, "manifest.yml")
        await store.save(
            state.evolve(status=JobStatus.HALTED, stage=Stage.DONE, attempt=2, reason="halted by its user")
        )

    with restored_scheduler(etcd_server, tokens, (str(origin(s3_server.endpoint_url)),), write) as (url, _):
        yield Served(url, token, job_id)


def test_each_attempts_log_is_read_back_whole_or_by_range(served: Served) -> None:
    client = SchedulerClient(served.url, served.token)
    first, second = b"".join(FIRST), b"".join(SECOND)
    assert client.logs(served.job_id).data == second, "the latest attempt by default, as before"
    whole = client.logs(served.job_id, attempt=1)
    assert (whole.data, whole.next_offset, whole.finished) == (first, len(first), True)
    tail = client.logs(served.job_id, attempt=1, tail=2)
    assert tail.data == b"halt requested: checkpoint at step 20\nhalted (exit 143)\n"
    start = len(FIRST[0]) - 5  # a window across the two parts
    window = client.logs(served.job_id, attempt=1, offset=start, length=12)
    assert (window.data, window.next_offset, window.finished) == (first[start : start + 12], start + 12, False)
    with pytest.raises(ApiError, match=r"400 attempt: job \S+ has attempts 1\.\.2; got 3"):
        client.logs(served.job_id, attempt=3)


def test_job_logs_attempt_prints_the_first_attempts_halt(served: Served) -> None:
    env = {"LEARNERKIT_SCHEDULER_URL": served.url, "LEARNERKIT_TOKEN": served.token}
    result = CliRunner().invoke(cli, ["job", "logs", served.job_id, "--attempt", "1", "-f"], env=env)
    assert result.exit_code == 0, result.output
    assert result.stdout.encode() == b"".join(FIRST)
