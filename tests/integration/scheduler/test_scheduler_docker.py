"""The scheduler end to end on the Docker backend: FfDL manifests in, real learner pairs, real etcd and S3."""

from __future__ import annotations

import json
import textwrap
from typing import Any

import pytest

from learnerkit.common import engine
from learnerkit.pair.docker import JOB_LABEL
from learnerkit.scheduler.errors import JobStateError, UnknownJobError
from tests.integration.scheduler.conftest import DATA_BUCKET, RESULTS_BUCKET, TERMINAL, Harness, leftovers, manifest
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(900)]

SMOKE = "python /opt/learner/smoke/train.py --steps {steps} --checkpoint-every 10"
DDP_SCRIPT = """\
import json, os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([rank + 1.0])
dist.all_reduce(total)
result = {"rank": rank, "world": world, "sum": total.item(), "master": os.environ["MASTER_ADDR"]}
with open(os.path.join(os.environ["RESULT_DIR"], "ddp.json"), "w") as out:
    json.dump(result, out)
dist.destroy_process_group()
print("ddp", result, flush=True)
"""


def stored(client: Any, key: str) -> bytes:
    return bytes(client.get_object(Bucket=RESULTS_BUCKET, Key=key)["Body"].read())


def test_manifest_runs_to_completed_and_leaves_nothing_behind(
    harness: Harness, s3_server: Any, scheduler_buckets: Any
) -> None:
    view = harness.call(harness.service.submit("team-a", manifest(s3_server, SMOKE.format(steps=30))))
    assert view.status == "QUEUED" and view.tenant == "team-a"
    final = harness.wait_status("team-a", view.job_id, TERMINAL)
    assert final.status == "COMPLETED", final
    summary = json.loads(stored(scheduler_buckets, f"{view.job_id}/attempt-1/learner-1/results/summary.json"))
    assert summary["final_step"] == 30
    assert final.learners[0].status == "COMPLETED" and {"loss", "accuracy"} <= set(final.learners[0].metrics)
    assert final.results == f"s3://{RESULTS_BUCKET}/{view.job_id}/attempt-1/"
    log = harness.call(harness.service.logs("team-a", view.job_id))
    assert log.finished and b"done: steps 1..30" in log.read()
    assert leftovers(view.job_id) == []
    with pytest.raises(UnknownJobError):
        harness.call(harness.service.get("team-b", view.job_id))
    assert view.job_id not in [job.job_id for job in harness.call(harness.service.list_jobs("team-b"))]


def test_halt_then_resume_continues_from_the_checkpoint(
    harness: Harness, s3_server: Any, scheduler_buckets: Any
) -> None:
    extra = "learnerkit:\n  halt_grace: 20\n"
    command = "SMOKE_MIN_STEP_SECONDS=0.1 " + SMOKE.format(steps=80)
    view = harness.call(harness.service.submit("team-a", manifest(s3_server, command, extra=extra)))
    harness.wait_status("team-a", view.job_id, {"PROCESSING"})
    wait_until(
        lambda: harness.call(harness.service.get("team-a", view.job_id)).learners[0].metrics,
        timeout=120,
        message="metrics in etcd",
    )
    harness.call(harness.service.halt("team-a", view.job_id))
    halted = harness.wait_status("team-a", view.job_id, TERMINAL)
    assert halted.status == "HALTED", halted
    assert leftovers(view.job_id) == []
    with pytest.raises(JobStateError):
        harness.call(harness.service.halt("team-a", view.job_id))
    harness.call(harness.service.resume("team-a", view.job_id))
    final = harness.wait_status("team-a", view.job_id, TERMINAL)
    assert final.status == "COMPLETED", final
    summary = json.loads(stored(scheduler_buckets, f"{view.job_id}/attempt-2/learner-1/results/summary.json"))
    assert summary["start_step"] > 1 and summary["final_step"] == 80


@pytest.mark.parametrize("phase", ["DOWNLOADING", "PROCESSING", "STORING"])
def test_cancel_leaves_nothing_behind(harness: Harness, s3_server: Any, scheduler_buckets: Any, phase: str) -> None:
    if phase == "DOWNLOADING":
        for i in range(150):
            scheduler_buckets.put_object(Bucket="sched-data", Key=f"bulk/f-{i:03d}.bin", Body=bytes(512 * 1024))
        job = manifest(s3_server, "true", data="bulk")
    elif phase == "PROCESSING":
        job = manifest(s3_server, "sleep 300")
    else:
        job = manifest(s3_server, "head -c 400000000 /dev/zero > $RESULT_DIR/big.bin")
    view = harness.call(harness.service.submit("team-a", job))
    harness.wait_status("team-a", view.job_id, {phase}, timeout=240)
    cancelled = harness.call(harness.service.cancel("team-a", view.job_id))
    assert cancelled.status == "CANCELLED"
    assert leftovers(view.job_id) == []
    assert harness.call(harness.service.get("team-a", view.job_id)).status == "CANCELLED"


def test_two_learner_ddp_job_with_gloo(harness: Harness, s3_server: Any, scheduler_buckets: Any) -> None:
    scheduler_buckets.put_object(Bucket="sched-data", Key="ddp/ddp.py", Body=DDP_SCRIPT.encode())
    extra = "learnerkit:\n  distributed: ddp\n"
    job = manifest(s3_server, "python $DATA_DIR/ddp.py", data="ddp", learners=2, extra=extra)
    view = harness.call(harness.service.submit("team-a", job))
    final = harness.wait_status("team-a", view.job_id, TERMINAL)
    assert final.status == "COMPLETED", final
    results = [
        json.loads(stored(scheduler_buckets, f"{view.job_id}/attempt-1/learner-{n}/results/ddp.json")) for n in (1, 2)
    ]
    assert sorted(r["rank"] for r in results) == [0, 1]
    assert {r["sum"] for r in results} == {3.0} and {r["world"] for r in results} == {2}
    assert leftovers(view.job_id) == []


def test_failed_job_auto_resumes_from_its_checkpoint(harness: Harness, s3_server: Any, scheduler_buckets: Any) -> None:
    # The first attempt checkpoints and crashes; the second finds the checkpoint restored and succeeds. The script
    # is a file: a command's line breaks become spaces, as on FfDL.
    script = (
        "import learner, sys\n"
        "if learner.latest_checkpoint() is None:\n"
        "    with learner.new_checkpoint(7) as d: (d / 'state').write_text('7')\n"
        "    sys.exit(3)\n"
        "print('resumed at', learner.latest_checkpoint().step)\n"
    )
    scheduler_buckets.put_object(Bucket=DATA_BUCKET, Key="resume/resume.py", Body=script.encode())
    extra = "learnerkit:\n  max_restarts: 1\n"
    job = manifest(s3_server, "python $DATA_DIR/resume.py", data="resume", extra=extra)
    view = harness.call(harness.service.submit("team-a", job))
    final = harness.wait_status("team-a", view.job_id, TERMINAL, timeout=300)
    assert final.status == "COMPLETED" and final.restarts == 1, final
    assert b"resumed at 7" in harness.call(harness.service.logs("team-a", view.job_id)).read()


def test_scheduler_restart_rebuilds_state_without_disturbing_running_jobs(
    harness: Harness, s3_server: Any, scheduler_buckets: Any, etcd_server: Any
) -> None:
    running = harness.call(harness.service.submit("team-a", manifest(s3_server, "sleep 8", cpus=1.5)))
    harness.wait_status("team-a", running.job_id, {"PROCESSING"})
    queued = harness.call(harness.service.submit("team-a", manifest(s3_server, "true", cpus=1.5)))
    wait_until(
        lambda: harness.call(harness.service.get("team-a", queued.job_id)).reason,
        timeout=30,
        message="a reason on the queued job",
    )
    learner = engine.engine().containers.list(filters={"label": f"{JOB_LABEL}={running.job_id}"})[0]
    started_at = learner.attrs["State"]["StartedAt"]
    harness.kill()
    again = Harness(etcd_server, harness.options)
    try:
        assert again.call(again.service.get("team-a", queued.job_id)).status == "QUEUED"
        learner.reload()
        assert learner.status == "running" and learner.attrs["State"]["StartedAt"] == started_at, "job restarted"
        final = again.wait_status("team-a", running.job_id, TERMINAL)
        assert final.status == "COMPLETED", final
        done = again.wait_status("team-a", queued.job_id, TERMINAL)
        assert done.status == "COMPLETED", done
        listed = [job.job_id for job in again.call(again.service.list_jobs("team-a"))]
        assert listed.count(running.job_id) == 1 and listed.count(queued.job_id) == 1
    finally:
        again.kill()


def test_unknown_framework_version_is_refused_with_its_field(harness: Harness, s3_server: Any) -> None:
    job = manifest(s3_server, "true").replace('version: "2.13"', 'version: "0.1"')
    with pytest.raises(Exception, match=r"framework\.version"):
        harness.call(harness.service.submit("team-a", textwrap.dedent(job)))
