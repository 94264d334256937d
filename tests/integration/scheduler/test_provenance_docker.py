"""A job's signed provenance end to end on the Docker backend: a real Scheduler with real learner pairs, etcd and
SeaweedFS, its REST API and the `job` verbs a user runs. The job reads the smoke data and its model code, writes
results and metrics; its provenance verifies with `job verify` and the model signature with model_signing's own
command, and one byte changed in any downloaded item makes `job verify` name it."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import socket
import subprocess
import sys
import uuid
import zipfile
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from click.testing import CliRunner

from controller_sidecar.provenancerecord import RECORD_KEY
from learnerkit.cli import cli
from learnerkit.common import engine
from learnerkit.common.signing import create_signer, public_key_path, public_pem
from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.api.auth import add_token
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.factory import describe_image
from learnerkit.scheduler.images.gate import ImageGate
from learnerkit.scheduler.preemption.rules import PreemptionRules
from learnerkit.scheduler.provenance.writer import ProvenanceWriter
from learnerkit_build.recipes.render import BuildInputs
from tests.integration.scheduler.conftest import DATA_BUCKET, RESULTS_BUCKET, TERMINAL, Harness, manifest
from tests.integration.scheduler.test_evaluations_docker import EVALUATIONS, evaluation_data, settled_evaluations
from tests.integration.scheduler.test_evaluations_docker import FOLDER as EVAL_FOLDER
from tests.integration.scheduler.test_evaluations_docker import TRAIN as EVAL_TRAIN
from tests.integration.scheduler.test_evaluations_docker import built as built_image
from tests.integration.scheduler.test_preemption_docker import (
    TENANT,
    URGENT_EXTRA,
    VICTIM,
    VICTIM_EXTRA,
    preempted,
    running_with_metrics,
)
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(900)]

COMMAND = (
    "python3 train.py && sha256sum /job/data/train.csv > /job/results/data.sha256"
    ' && echo \'{"step": 1, "values": {"loss": 0.5}}\' >> /job/logs/metrics.jsonl'
)
TRAIN = "open('/job/results/model.bin', 'wb').write(b'weights' * 1000)\nprint('trained')\n"


@dataclass(frozen=True)
class Platform:
    harness: Harness
    url: str
    token: str
    key: Path

    def job(self, *args: str) -> tuple[int, str]:
        env = {"LEARNERKIT_SCHEDULER_URL": self.url, "LEARNERKIT_TOKEN": self.token, "COLUMNS": "200"}
        result = CliRunner().invoke(cli, ["job", *args], env=env)
        return result.exit_code, result.output


@pytest.fixture
def tagged_image(learner_image: str) -> Iterator[str]:
    """A tag of this test's own on the learner image: the reference the job runs by, moved later on purpose."""
    repository, tag = f"learnerkit-test/provenance-{uuid.uuid4().hex[:8]}", "1"
    engine.tag_image(learner_image, repository, tag)
    yield f"{repository}:{tag}"
    engine.engine().images.remove(f"{repository}:{tag}", noprune=True)


@pytest.fixture
def platform(
    etcd_server: Any, service_options: SchedulerOptions, scheduler_buckets: Any, tmp_path: Path
) -> Iterator[Platform]:
    with serving(etcd_server, service_options, tmp_path) as made:
        yield made


@pytest.fixture
def evaluating_platform(
    etcd_server: Any,
    service_options: SchedulerOptions,
    scheduler_buckets: Any,
    build_inputs: BuildInputs,
    tmp_path: Path,
) -> Iterator[Platform]:
    """The platform with the robustness evaluator, and the evaluation test's data and training script."""
    scheduler_buckets.put_object(Bucket=DATA_BUCKET, Key=f"{EVAL_FOLDER}/eval.csv", Body=evaluation_data().encode())
    scheduler_buckets.put_object(Bucket=DATA_BUCKET, Key=f"{EVAL_FOLDER}/train.py", Body=EVAL_TRAIN.encode())
    evaluators = {"robustness": built_image("robustness:1.20-cpu", build_inputs)}
    options = replace(service_options, resolve_evaluator=evaluators.__getitem__)
    with serving(etcd_server, options, tmp_path) as made:
        yield made


@contextmanager
def serving(etcd_server: Any, service_options: SchedulerOptions, tmp_path: Path) -> Iterator[Platform]:
    key = tmp_path / "platform.pem"
    signer = create_signer(key)
    writer = ProvenanceWriter(signer, describe_image(ImageGate(("*",), ())), service_options.platform.sidecar_image)
    # Jobs may be preempted one second after they run (only one test submits two jobs of different priorities).
    options = replace(service_options, provenance=writer, preemption=PreemptionRules(min_run_s=1.0))
    harness = Harness(etcd_server, options)
    tokens = tmp_path / "tokens.json"
    token = add_token(tokens, "team-a")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    app = create_app(harness.service, tokens, public_key=public_pem(signer))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    serving = asyncio.run_coroutine_threadsafe(server.serve(sockets=[sock]), harness.loop)
    wait_until(lambda: server.started, timeout=10, message="uvicorn to start")
    yield Platform(harness, f"http://127.0.0.1:{sock.getsockname()[1]}", token, key)
    server.should_exit = True
    serving.result(timeout=30)
    sock.close()
    harness.kill()


async def chunks(data: bytes) -> AsyncIterator[bytes]:
    yield data


def model_zip(tmp_path: Path) -> bytes:
    path = tmp_path / "model.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("train.py", TRAIN)
    return path.read_bytes()


def flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_completed_job_proves_where_its_model_came_from(
    platform: Platform, s3_server: Any, scheduler_buckets: Any, tagged_image: str, tmp_path: Path
) -> None:
    harness = platform.harness
    view = harness.call(
        harness.service.submit(
            "team-a", manifest(s3_server, COMMAND), image=tagged_image, model=chunks(model_zip(tmp_path))
        )
    )
    final = harness.wait_status("team-a", view.job_id, TERMINAL)
    assert final.status == "COMPLETED", final

    code, out = wait_until(
        lambda: (result := platform.job("provenance", view.job_id, "-o", "json"))[0] == 0 and result,
        timeout=60,
        message="the job's provenance to be written",
    )
    sheet = json.loads(out)
    assert [m["file"] for m in sheet["model"]] == [
        "attempt-1/learner-1/results/data.sha256",
        "attempt-1/learner-1/results/model.bin",
    ]
    assert [d["object"] for d in sheet["data"]] == [f"s3://{DATA_BUCKET}/smoke/train.csv"]
    assert sheet["image"]["reference"] == tagged_image
    assert sheet["metrics"]["loss"]["final"] == 0.5

    folder, data = tmp_path / "download", tmp_path / "data"
    code, out = platform.job("download", view.job_id, "--what", "all", "--to", str(folder))
    assert code == 0, out
    data.mkdir()
    scheduler_buckets.download_file(DATA_BUCKET, "smoke/train.csv", str(data / "train.csv"))
    code, out = platform.job("verify", str(folder), "--data", str(data), "-o", "json")
    report = json.loads(out)
    assert code == 0 and report["verified"], out
    states = {check["item"]: check["state"] for check in report["checks"]}
    assert {state for state in states.values()} == {"ok"}, states
    signature = [
        sys.executable,
        "-m",
        "model_signing",
        "verify",
        "key",
        "--signature",
        str(folder / "provenance/model.sig"),
    ]
    public = tmp_path / "platform.pub"
    public.write_text(CliRunner().invoke(cli, ["scheduler", "public-key", "--url", platform.url]).output)
    assert public.read_text() == public_key_path(platform.key).read_text()
    done = subprocess.run([*signature, "--public_key", str(public), str(folder)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr

    code, out = platform.job("verify", view.job_id, "--to", str(tmp_path / "by-id"), "-o", "json")
    assert code == 0 and json.loads(out)["verified"], out

    tampered = {
        "attempt-1/learner-1/results/model.bin": "result attempt-1/learner-1/results/model.bin",
        "provenance/manifest.json": "manifest",
        "model/model.zip": "model code model/model.zip",
        "attempt-1/learner-1/logs/metrics.jsonl": "metric history attempt-1/learner-1/logs/metrics.jsonl",
        "data:train.csv": f"training data s3://{DATA_BUCKET}/smoke/train.csv",
    }
    for where, named in tampered.items():
        path = data / where.removeprefix("data:") if where.startswith("data:") else folder / where
        original = path.read_bytes()
        flip(path)
        code, out = platform.job("verify", str(folder), "--data", str(data), "-o", "json")
        assert code == 1 and named in json.loads(out)["changed"], (where, out)
        path.write_bytes(original)

    repository, tag = tagged_image.rsplit(":", 1)
    engine.tag_image(harness.options.platform.sidecar_image, repository, tag)  # another image under the reference
    code, out = platform.job("verify", str(folder), "--data", str(data), "-o", "json")
    assert code == 1 and json.loads(out)["changed"] == [f"learner image {tagged_image}"], out


def test_job_verify_of_a_folder_without_provenance_says_so(platform: Platform, tmp_path: Path) -> None:
    code, out = platform.job("verify", str(tmp_path), "--public-key", str(public_key_path(platform.key)), "-o", "json")
    assert code == 1
    assert "no provenance here (provenance/provenance.intoto.json is missing)" in json.loads(out)["message"]


SMOKE = "SMOKE_MIN_STEP_SECONDS=0.1 python /opt/learner/smoke/train.py --steps 150 --checkpoint-every 10"


def test_a_job_resumed_twice_lists_three_attempts_each_with_the_checkpoint_it_started_from(
    platform: Platform, s3_server: Any, scheduler_buckets: Any, tagged_image: str
) -> None:
    harness, service = platform.harness, platform.harness.service
    extra = "learnerkit:\n  halt_grace: 20\n"
    job_id = harness.call(service.submit("team-a", manifest(s3_server, SMOKE, extra=extra), image=tagged_image)).job_id
    for _halt in range(2):
        # Metrics of this attempt in etcd (a deploy clears the last one's): it trained a step past what it
        # restored, and the halt makes it checkpoint there.
        wait_until(
            lambda: (
                (view := harness.call(service.get("team-a", job_id))).status == "PROCESSING"
                and bool(view.learners)
                and bool(view.learners[0].metrics)
            ),
            timeout=300,
            message=lambda: f"the attempt training: {harness.call(service.get('team-a', job_id))}",
        )
        harness.call(service.halt("team-a", job_id))
        assert harness.wait_status("team-a", job_id, TERMINAL).status == "HALTED"
        harness.call(service.resume("team-a", job_id))
    assert harness.wait_status("team-a", job_id, TERMINAL).status == "COMPLETED"

    def three_attempts() -> list[dict[str, Any]] | None:
        code, out = platform.job("provenance", job_id, "-o", "json")
        attempts = json.loads(out)["lineage"]["attempts"] if code == 0 else []
        return attempts if len(attempts) == 3 and attempts[-1]["endedBy"] == "COMPLETED" else None

    attempts = wait_until(three_attempts, timeout=60, message="the provenance of the completed job")
    assert [(a["number"], a["endedBy"], a["resumedFrom"]) for a in attempts] == [
        (1, "HALTED", None),
        (2, "HALTED", 1),
        (3, "COMPLETED", 2),
    ]
    assert attempts[0]["restoredStep"] is None
    assert all(len(a["nodes"]) == 1 for a in attempts), attempts
    for before, after in itertools.pairwise(attempts):
        prefix = f"{job_id}/attempt-{before['number']}/learner-1/checkpoints/"
        listed = scheduler_buckets.list_objects_v2(Bucket=RESULTS_BUCKET, Prefix=prefix)["Contents"]
        [key] = [
            o["Key"]
            for o in listed
            if o["Key"].endswith(".complete") and int(o["Key"].split("/")[-2][5:]) == after["restoredStep"]
        ]
        marker = scheduler_buckets.get_object(Bucket=RESULTS_BUCKET, Key=key)["Body"].read()
        assert after["checkpointSha256"] == hashlib.sha256(marker).hexdigest(), after
    assert attempts[1]["restoredStep"] >= 1 and attempts[2]["restoredStep"] > attempts[1]["restoredStep"]


def test_a_preempted_jobs_provenance_names_the_preemption_and_its_preemptor(platform: Platform, s3_server: Any) -> None:
    h = platform.harness
    victim = h.call(h.service.submit(TENANT, manifest(s3_server, VICTIM, cpus=1.5, extra=VICTIM_EXTRA)))
    running_with_metrics(h, victim.job_id)
    urgent = h.call(h.service.submit(TENANT, manifest(s3_server, "true", cpus=1.5, extra=URGENT_EXTRA)))
    preempted(h, victim.job_id)
    assert h.wait_status(TENANT, victim.job_id, TERMINAL).status == "COMPLETED"

    def lineage() -> dict[str, Any] | None:
        code, out = platform.job("provenance", victim.job_id, "-o", "json")
        found: dict[str, Any] = json.loads(out)["lineage"] if code == 0 else {}
        return found if len(found.get("attempts", [])) == 2 else None

    found = wait_until(lineage, timeout=60, message="the provenance of the preempted job")
    first, second = found["attempts"]
    assert (first["endedBy"], first["reason"]) == ("PREEMPTED", f"preempted by job {urgent.job_id}")
    assert (second["endedBy"], second["resumedFrom"]) == ("COMPLETED", 1)
    assert second["restoredStep"] is not None and second["checkpointSha256"], second
    assert found["preemptions"] == 1


def test_an_evaluated_jobs_rounds_are_signed_and_job_verify_names_a_changed_report(
    evaluating_platform: Platform, s3_server: Any, learner_image: str, tmp_path: Path
) -> None:
    """Issue 24's reports in the provenance: the round after training, then `job evaluate`'s, each a signed
    statement that `job verify` checks."""
    platform, harness = evaluating_platform, evaluating_platform.harness
    gentle = EVALUATIONS.split("  - name: harsh\n")[0]
    text = manifest(s3_server, "python /job/data/train.py", data=EVAL_FOLDER, extra=gentle)
    view = harness.call(harness.service.submit("team-a", text, image=learner_image))
    assert harness.wait_status("team-a", view.job_id, TERMINAL).status == "COMPLETED"
    code, out = platform.job("provenance", view.job_id, "-o", "json")  # waits for it, as the job has just ended
    assert code == 0 and json.loads(out)["job"] == view.job_id, out
    [passed] = settled_evaluations(harness, view.job_id, {"gentle"}).evaluations
    assert passed.outcome == "passed", passed
    harness.call(harness.service.evaluate("team-a", view.job_id, gentle))
    settled_evaluations(harness, view.job_id, {"gentle"})  # the round `evaluate` began

    def both_rounds() -> list[dict[str, Any]] | None:
        code, out = platform.job("provenance", view.job_id, "-o", "json")
        rounds: list[dict[str, Any]] = json.loads(out)["evaluations"] if code == 0 else []
        return rounds if len(rounds) == 2 else None

    rounds = wait_until(both_rounds, timeout=60, message="both evaluation rounds in the factsheet")
    assert [(r["round"], r["verdict"]) for r in rounds] == [(1, "passed"), (2, "passed")]
    code, out = platform.job("provenance", view.job_id)
    assert code == 0 and "round 1: gentle passed" in out and "round 2: gentle passed" in out, out

    folder = tmp_path / "by-id"
    code, out = platform.job("verify", view.job_id, "--to", str(folder), "-o", "json")
    report = json.loads(out)
    assert code == 0 and report["verified"], out
    states = {check["item"]: check["state"] for check in report["checks"]}
    first = "evaluations/round-1/gentle/results/evaluations/gentle.json"
    for item in (
        "evaluation round 1 signature",
        "evaluation round 2 signature",
        f"evaluation report {first}",
        "evaluation report evaluations/round-1/gentle/results/evaluations/gentle.txt",
        "evaluation report evaluations/round-2/gentle/results/evaluations/gentle.json",
    ):
        assert states.get(item) == "ok", (item, states)
    evaluators = [c["state"] for c in report["checks"] if c["item"].startswith("evaluator image")]
    assert evaluators == ["ok", "ok"], report["checks"]  # one per round
    # by job id, each round's evaluation data is hashed again as the scheduler streams it from the store
    data = [
        c["state"]
        for c in report["checks"]
        if c["item"].startswith(("evaluation round 1 data s3://", "evaluation round 2 data s3://"))
    ]
    assert data and set(data) == {"ok"}, report["checks"]

    flip(folder / first)
    code, out = platform.job("verify", str(folder), "-o", "json")
    assert code == 1 and json.loads(out)["changed"] == [f"evaluation report {first}"], out


def test_a_result_and_its_record_rewritten_while_halted_are_caught_after_the_job_completes(
    platform: Platform, s3_server: Any, scheduler_buckets: Any, tagged_image: str, tmp_path: Path
) -> None:
    """The tenant holds its bucket's keys: while its job is halted it replaces the first attempt's result and the
    sidecar's copy of the record beside it. The job resumes and completes; its statement is made from the records
    the sidecars put in etcd, so `job verify` names the forged result and exits 1."""
    harness, service = platform.harness, platform.harness.service
    command = "echo weights > /job/results/model.bin && sleep 20"  # the first attempt is halted in its sleep
    extra = "learnerkit:\n  halt_grace: 5\n"
    job_id = harness.call(
        service.submit("team-a", manifest(s3_server, command, extra=extra), image=tagged_image)
    ).job_id
    harness.wait_status("team-a", job_id, {"PROCESSING"})
    harness.call(service.halt("team-a", job_id))
    assert harness.wait_status("team-a", job_id, TERMINAL).status == "HALTED"
    learner = f"{job_id}/attempt-1/learner-1/"
    forged = b"a backdoored model"
    scheduler_buckets.put_object(Bucket=RESULTS_BUCKET, Key=learner + "results/model.bin", Body=forged)
    record = json.loads(scheduler_buckets.get_object(Bucket=RESULTS_BUCKET, Key=learner + RECORD_KEY)["Body"].read())
    [item] = [item for item in record["results"] if item["name"] == "results/model.bin"]
    item.update(sha256=hashlib.sha256(forged).hexdigest(), size=len(forged))
    scheduler_buckets.put_object(Bucket=RESULTS_BUCKET, Key=learner + RECORD_KEY, Body=json.dumps(record).encode())
    harness.call(service.resume("team-a", job_id))
    assert harness.wait_status("team-a", job_id, TERMINAL).status == "COMPLETED"
    code, out = platform.job("verify", job_id, "--to", str(tmp_path / "by-id"), "-o", "json")
    report = json.loads(out)
    assert code == 1 and report["changed"] == ["result attempt-1/learner-1/results/model.bin"], out
    assert report["complete"] is True and report["missing"] == [], out
