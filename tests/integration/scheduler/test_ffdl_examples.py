"""FfDL's own example shapes run for real on the Docker backend: a `command: >` block whose continuation lines are
more indented, two learners, no `cpus`, a `mount_cos` store serving both data and results; and the tf-summary
shape (TensorFlow `latest-py3`, one flag per line, no `memory`).

The model code is written here in FfDL's style (argparse, FfDL's variables) and placed as an object of the data
store, run from `$DATA_DIR` (a job's own model code is tested in test_model_code.py).
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from learnerkit.dev.scheduler import host_defaults
from learnerkit.scheduler.config.settings import resource_defaults
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.manifest.defaultresults import default_results
from learnerkit.scheduler.manifest.model import ResourceDefaults
from tests.integration.scheduler.conftest import DATA_BUCKET, RESULTS_BUCKET, TERMINAL, Harness, leftovers

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(900)]

RENDEZVOUS = '''\
"""Each learner leaves its host name in the job folder and reports what it sees there once every learner has
written its own: the learners wait for each other at a torch.distributed TCPStore on learner 1, as distributed
PyTorch jobs meet."""
import argparse, json, os, socket
from datetime import timedelta

from torch.distributed import TCPStore

parser = argparse.ArgumentParser()
parser.add_argument("--greeting", required=True)
parser.add_argument("--timeout", type=float, required=True)
parser.add_argument("--out", required=True)
args = parser.parse_args()

shared = os.environ["JOB_SHARED_DIR"]
me = int(os.environ["LEARNER_ID"])
count = int(os.environ["NUM_LEARNERS"])
with open(os.path.join(shared, f"host-{me}.tmp"), "w") as out:
    out.write(socket.gethostname())
os.rename(os.path.join(shared, f"host-{me}.tmp"), os.path.join(shared, f"host-{me}"))
leader = f"{os.environ['LEARNER_NAME_PREFIX']}-1" if count > 1 else "127.0.0.1"
store = TCPStore(leader, 29500, count, me == 1, timeout=timedelta(seconds=args.timeout))
store.set(f"written-{me}", "1")
store.wait([f"written-{n}" for n in range(1, count + 1)])  # every host file is in the job folder now
peers = {n: open(os.path.join(shared, f"host-{n}")).read() for n in range(1, count + 1)}
names = "TRAINING_ID DLAAS_JOB_ID LEARNER_NAME_PREFIX DOWNWARD_API_POD_NAME LEARNER_ID NUM_LEARNERS"
for name in names.split():
    print(f"{name}={os.environ[name]}", flush=True)
print(f"{args.greeting} from {socket.gethostname()}; peers " + " ".join(f"{n}:{peers[n]}" for n in sorted(peers)))
mounted = any(line.split()[4] == shared for line in open("/proc/self/mountinfo"))
print(f"job folder: {'a volume of its own' if mounted else 'a folder of the learner volume'}", flush=True)
with open(os.path.join(os.environ["RESULT_DIR"], args.out), "w") as out:
    json.dump({"learner": me, "peers": {str(n): host for n, host in peers.items()}}, out)
store.set(f"done-{me}", "1")
if me == 1:  # the store lives in learner 1: it stays until every learner is done with it
    store.wait([f"done-{n}" for n in range(1, count + 1)])
'''


def ffdl_manifest(s3: Any) -> str:
    """FfDL's horovod/tf-model shapes: no cpus, two learners, mount_cos for data and results, a folded command."""
    return textwrap.dedent(
        f"""\
        name: ffdl-rendezvous
        description: two learners meet in the job folder
        version: "1.0"
        gpus: 0
        memory: 1Gb
        learners: 2

        data_stores:
          - id: sl-internal-os
            type: mount_cos
            training_data:
              container: {DATA_BUCKET}/ffdl
            training_results:
              container: {RESULTS_BUCKET}
            connection:
              auth_url: {s3.endpoint_url}
              user_name: {s3.access_key}
              password: {s3.secret_key}

        framework:
          name: caffe2
          version: "0.8.1"
          command: >
            python3 ${{DATA_DIR}}/rendezvous.py --greeting hello
              --timeout 120
              --out meeting.json
        """
    )


@pytest.fixture
def small_defaults_harness(
    etcd_server: Any, service_options: SchedulerOptions, scheduler_buckets: Any
) -> Iterator[Harness]:
    """FfDL's 5 CPUs do not fit this 2-core host: the scheduler's setting gives a manifest without cpus less."""
    policy = replace(service_options.submit_policy, defaults=ResourceDefaults(cpus=0.5, memory_bytes=2**30))
    made = Harness(etcd_server, replace(service_options, submit_policy=policy))
    yield made
    made.kill()


def test_two_learners_share_the_job_folder_and_see_ffdls_variables(
    small_defaults_harness: Harness, s3_server: Any, scheduler_buckets: Any
) -> None:
    harness = small_defaults_harness
    scheduler_buckets.put_object(Bucket=DATA_BUCKET, Key="ffdl/rendezvous.py", Body=RENDEZVOUS.encode())
    view = harness.call(harness.service.submit("team-a", ffdl_manifest(s3_server)))
    manifest = harness.service.shared.jobs[view.job_id].manifest
    assert manifest.resources.defaulted == ("cpus",) and manifest.resources.cpus == 0.5
    assert manifest.framework.target == "pytorch"
    final = harness.wait_status("team-a", view.job_id, TERMINAL)
    assert final.status == "COMPLETED", final.reason
    hosts = {1: f"lk-{view.job_id}-1", 2: f"lk-{view.job_id}-2"}
    for n in (1, 2):
        log = harness.call(harness.service.logs("team-a", view.job_id, learner_id=n)).read().decode()
        # The folded command ran as one command: its continuation lines' arguments reached the script.
        assert f"hello from {hosts[n]}; peers 1:{hosts[1]} 2:{hosts[2]}" in log, log
        for line in (
            f"TRAINING_ID={view.job_id}",
            f"DLAAS_JOB_ID={view.job_id}",
            f"LEARNER_NAME_PREFIX=lk-{view.job_id}",
            f"DOWNWARD_API_POD_NAME={hosts[n]}",
            f"LEARNER_ID={n}",
            "NUM_LEARNERS=2",
        ):
            assert line in log.splitlines(), (line, log)
        assert "job folder: a volume of its own" in log.splitlines(), log
        # What the learner wrote to RESULT_DIR landed in the mount_cos store's results bucket.
        key = f"{view.job_id}/attempt-1/learner-{n}/results/meeting.json"
        body = json.loads(scheduler_buckets.get_object(Bucket=RESULTS_BUCKET, Key=key)["Body"].read())
        assert body == {"learner": n, "peers": {"1": hosts[1], "2": hosts[2]}}
    assert leftovers(view.job_id) == []


def test_a_single_learner_writes_to_its_job_folder_without_a_volume_of_its_own(
    small_defaults_harness: Harness, s3_server: Any, scheduler_buckets: Any
) -> None:
    """A learner alone has its job folder on its own pair volume (made by its sidecar, group-writable): the
    same contract, one volume and one helper container fewer per job."""
    harness = small_defaults_harness
    scheduler_buckets.put_object(Bucket=DATA_BUCKET, Key="ffdl/rendezvous.py", Body=RENDEZVOUS.encode())
    view = harness.call(harness.service.submit("team-a", ffdl_manifest(s3_server).replace("learners: 2", "")))
    final = harness.wait_status("team-a", view.job_id, TERMINAL)
    log = harness.call(harness.service.logs("team-a", view.job_id)).read().decode()
    assert final.status == "COMPLETED", (final.reason, log)
    host = f"lk-{view.job_id}-1"
    assert f"hello from {host}; peers 1:{host}" in log, log
    assert "job folder: a folder of the learner volume" in log.splitlines(), log
    assert "NUM_LEARNERS=1" in log.splitlines(), log
    assert leftovers(view.job_id) == []


SUMMARY = '''\
"""Reports the memory limit the learner runs under and the flags its one-flag-per-line command gave."""
import argparse, pathlib

parser = argparse.ArgumentParser()
parser.add_argument("--max_steps", type=int, required=True)
parser.add_argument("--learning_rate", type=float, required=True)
args = parser.parse_args()
cgroup = pathlib.Path("/sys/fs/cgroup")
v2, v1 = cgroup / "memory.max", cgroup / "memory" / "memory.limit_in_bytes"
limit = (v2 if v2.exists() else v1).read_text().strip()
print(f"steps {args.max_steps} rate {args.learning_rate} memory limit {limit}", flush=True)
'''


def test_a_manifest_without_memory_runs_with_ffdls_default_on_the_newest_tensorflow(
    harness: Harness, s3_server: Any, scheduler_buckets: Any
) -> None:
    """FfDL's tf-summary-model shape: tensorflow `latest-py3`, s3_datastore, one flag per line, no memory."""
    scheduler_buckets.put_object(Bucket=DATA_BUCKET, Key="ffdl-summary/summary.py", Body=SUMMARY.encode())
    text = ffdl_manifest(s3_server).replace("memory: 1Gb\n", "cpus: 0.5\n").replace("learners: 2", "learners: 1")
    text = text.replace("type: mount_cos", "type: s3_datastore").replace(
        f"{DATA_BUCKET}/ffdl\n", f"{DATA_BUCKET}/ffdl-summary\n"
    )
    folded = "  command: >\n    python3 ${DATA_DIR}/summary.py\n    --max_steps 400\n    --learning_rate 0.001\n"
    text = text.split("framework:\n")[0] + "framework:\n  name: tensorflow\n  version: latest-py3\n" + folded
    view = harness.call(harness.service.submit("team-a", text))
    manifest = harness.service.shared.jobs[view.job_id].manifest
    assert manifest.resources.defaulted == ("memory",) and manifest.resources.memory_bytes == 12 * 2**30
    final = harness.wait_status("team-a", view.job_id, TERMINAL)
    log = harness.call(harness.service.logs("team-a", view.job_id)).read().decode()
    assert final.status == "COMPLETED", (final.reason, log)
    assert f"steps 400 rate 0.001 memory limit {12 * 2**30}" in log, log
    assert leftovers(view.job_id) == []


HELD_OUT = '''\
"""Writes its greeting where FfDL's scripts write results."""
import os, sys

with open(os.path.join(os.environ["RESULT_DIR"], "greeting.txt"), "w") as out:
    out.write(sys.argv[1])
print(f"wrote {sys.argv[1]}", flush=True)
'''


COLLECTORS = {
    None: None,
    "logger": "simple_log_collector",
    "none": "simple_log_collector",
    "null": "simple_log_collector",
    "nil": "simple_log_collector",
    "tensorboard_extractor": "tensorboard",
    "optivist": "emetrics_file",
    "file": "emetrics_file",
}
"""Each `evaluation_metrics.type` FfDL's collector selection read (None: the section left out; `null` as a
manifest writes it, YAML's null), and the collector the stored spec names (none without the section)."""


def held_out(s3: Any, written: str | None, cpus: bool) -> str:
    """An FfDL user's manifest: the resources they cared to give, no training_results, FfDL's collector name."""
    resources = "cpus: 0.5\nmemory: 1000MiB\n" if cpus else ""
    metrics = f"\nevaluation_metrics:\n  type: {written}\n" if written else ""
    if written == "tensorboard_extractor":
        metrics += '  in: "$JOB_STATE_DIR/logs/tb"\n'
    stores = textwrap.dedent(
        f"""
        # Object stores that allow the system to retrieve training data.
        data_stores:
          - id: hmo
            type: s3_datastore
            training_data:
              container: {DATA_BUCKET}/ffdl-heldout
            connection:
              type: s3_datastore
              auth_url: {s3.endpoint_url}
              user_name: {s3.access_key}
              password: {s3.secret_key}

        framework:
          name: pytorch
          version: latest
          command: >
            python3 ${{DATA_DIR}}/greet.py
              {written or "absent"}
        """
    )
    return f'name: held out {written}\nversion: "1.0"\ngpus: 0\n{resources}{stores}{metrics}'


def test_held_out_ffdl_manifests_run_on_the_local_defaults(
    etcd_server: Any, service_options: SchedulerOptions, s3_server: Any, scheduler_buckets: Any
) -> None:
    """As their authors wrote them: with and without cpus and memory, no training_results, each collector name
    FfDL read. The local environment's defaults (`learnerkit dev up --with-scheduler`) fit this host, and the
    results go to the default results store, in the tenant's folder."""
    defaults = replace(resource_defaults(host_defaults()), results_bucket=RESULTS_BUCKET)
    policy = replace(service_options.submit_policy, defaults=defaults)
    harness = Harness(etcd_server, replace(service_options, submit_policy=policy))
    try:
        scheduler_buckets.put_object(Bucket=DATA_BUCKET, Key="ffdl-heldout/greet.py", Body=HELD_OUT.encode())
        jobs = {}
        for n, (written, collector) in enumerate(COLLECTORS.items()):
            with_cpus = n % 2 == 1
            view = harness.call(harness.service.submit("team-a", held_out(s3_server, written, with_cpus)))
            manifest = harness.service.shared.jobs[view.job_id].manifest
            assert manifest.resources.defaulted == (() if with_cpus else ("cpus", "memory")), written
            assert (manifest.evaluation_metrics or {}).get("type") == collector, written
            jobs[view.job_id] = written or "absent"
        for job_id, greeting in jobs.items():
            final = harness.wait_status("team-a", job_id, TERMINAL)
            log = harness.call(harness.service.logs("team-a", job_id)).read().decode()
            assert final.status == "COMPLETED", (greeting, final.reason, log)
            assert f"wrote {greeting}" in log, log
            key = f"tenants/team-a/{job_id}/attempt-1/learner-1/results/greeting.txt"
            assert scheduler_buckets.get_object(Bucket=RESULTS_BUCKET, Key=key)["Body"].read() == greeting.encode()
            assert leftovers(job_id) == []
    finally:
        harness.kill()


def test_a_restart_under_another_results_bucket_keeps_a_jobs_outputs_where_they_are(
    etcd_server: Any, service_options: SchedulerOptions, s3_server: Any, scheduler_buckets: Any
) -> None:
    """The default results store is recorded with the job: a changed setting does not move its outputs."""

    def harness_with(bucket: str) -> Harness:
        defaults = ResourceDefaults(cpus=0.5, memory_bytes=2**30, results_bucket=bucket)
        policy = replace(service_options.submit_policy, defaults=defaults)
        return Harness(etcd_server, replace(service_options, submit_policy=policy))

    first = harness_with(RESULTS_BUCKET)
    try:
        text = (
            ffdl_manifest(s3_server)
            .replace(f"    training_results:\n      container: {RESULTS_BUCKET}\n", "")
            .replace("learners: 2", "learners: 1")
        )
        view = first.call(first.service.submit("team-a", text))
        first.call(first.service.cancel("team-a", view.job_id))
    finally:
        first.kill()
    second = harness_with("another-results-bucket")
    try:
        restored = second.service.shared.jobs[view.job_id].manifest
        assert default_results(restored) == f"{RESULTS_BUCKET}/tenants/team-a"
        assert second.call(second.service.get("team-a", view.job_id)).results.startswith(
            f"s3://{RESULTS_BUCKET}/tenants/team-a/{view.job_id}/"
        )
    finally:
        second.kill()
