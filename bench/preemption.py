"""Preemption benchmark on the Docker backend: the real `learnerkit scheduler serve` (a child process), its REST
API, etcd, SeaweedFS and the engine, the figures of issue 21 beside their baselines, all from one run.

The engine's host is one node; each job asks for 1.5 CPUs of its 2, so a job of higher priority runs only by
preempting the one running.

- Cooperative learner (the PyTorch smoke training, 0.1 s a step, halts with a checkpoint): the preemptor's start
  (its command's first line) after the decision, beside the victim's checkpoint time (decision -> its learner's
  HALTED record, written once the checkpoint is stored) + 2 s (target: within), and where the time went (the
  victim requeued, the preemptor admitted and released, its command started); beside it, a start with the room
  free, measured in the same run. Twice: on the machine as it is ("quiet"), and "loaded", with a CPU burner
  container per core (nice 0, as the learners' containers run) for the whole row. Steps
  recomputed after the resume (the metric history over both attempts; target 0), beside what a restart from
  scratch recomputes (SkyPilot without user checkpoints, Slurm requeue): every step done before the preemption.
- Non-cooperative learner (ignores SIGTERM, checkpoints every 10 steps = 1 s): stopped at the 2 s grace's end;
  the work lost, measured from its metric history (steps after the checkpoint it resumed from x step time), and the
  figure the scheduler reports (read back from the same history), beside one checkpoint interval (target: lost
  <= interval) and beside a kill-and-restart from scratch (Kueue's suspend without a checkpoint: everything it
  did).

Needs etcd and the PyTorch and sidecar images (`make images`). Usage: python bench/preemption.py
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from scheduler import signing_key
from serving import once_served

from controller_sidecar import keys
from controller_sidecar.etcdstore import EtcdStore
from controller_sidecar.status import Phase, StatusRecord
from learnerkit.common.engine import engine
from learnerkit.dev.etcd import EtcdServer
from learnerkit.dev.s3 import SeaweedServer
from learnerkit.scheduler.api.auth import add_token
from learnerkit.scheduler.client.http import SchedulerClient
from learnerkit.scheduler.facade import JobView
from learnerkit_build.builds.sidecarimage import build_sidecar
from learnerkit_build.imagetest.smokedata import write_smoke_dataset
from learnerkit_build.recipes.render import BuildInputs

REPO = Path(__file__).resolve().parents[1]
TENANT = "bench"
STEP_S = 0.1
STEPS = 300
CPUS = 1.5
MARGIN_S = 2.0
WARM_S = 5.0
STAMPED = "echo BEGIN $(date +%s.%N)"
STUBBORN = f"""\
import signal, time
import learner
signal.signal(signal.SIGTERM, signal.SIG_IGN)
latest = learner.latest_checkpoint()
step = latest.step if latest else 0
while step < {STEPS}:
    step += 1
    learner.log_metrics(step, loss=1.0 / step)
    if step % 10 == 0:
        with learner.new_checkpoint(step) as d:
            (d / "step").write_text(str(step))
    time.sleep({STEP_S})
"""
T = TypeVar("T")


class HaltedAt:
    """When the victim's learner reported HALTED (its checkpoint stored: the sidecar's own record time), watched
    in etcd from a thread with its own event loop: the record is gone from etcd once the victim is requeued."""

    def __init__(self, etcd: EtcdServer, job_id: str) -> None:
        self.at: float | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=asyncio.run, args=(self._watch(etcd, job_id),), daemon=True)
        self._thread.start()
        self._ready.wait(30)

    async def _watch(self, etcd: EtcdServer, job_id: str) -> None:
        store = await EtcdStore.connect(etcd.settings())
        try:
            events = store.watch_prefix(f"{keys.job_prefix(job_id)}learners/")
            self._ready.set()
            async for event in events:
                if event.value is not None and event.key.endswith("/status"):
                    record = StatusRecord.from_json(event.value)
                    if record.phase is Phase.HALTED:
                        self.at = record.timestamp.timestamp()
                        return
        finally:
            await store.close()

    def wait(self) -> float:
        self._thread.join(600)
        if self.at is None:
            raise RuntimeError("the victim never reported HALTED")
        return self.at


def manifest(s3: SeaweedServer, command: str, *, priority: int, data: str, extra: str = "") -> str:
    return f"""\
name: bench
cpus: {CPUS}
memory: 512Mb
learners: 1
data_stores:
  - id: s3
    type: s3_datastore
    training_data: {{container: bench-data/{data}}}
    training_results: {{container: bench-results}}
    connection: {{auth_url: "{s3.endpoint_url}", user_name: "{s3.access_key}", password: "{s3.secret_key}"}}
framework:
  name: pytorch
  version: "2.13"
  command: "{command}"
learnerkit: {{priority: {priority}{extra}}}
"""


def poll(what: str, check: Callable[[], T | None], timeout: float = 600.0) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found is not None:
            return found
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


def epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def began(client: SchedulerClient, job_id: str) -> float:
    text = client.logs(job_id).data.decode()
    return next(float(line.split()[1]) for line in text.splitlines() if line.startswith("BEGIN"))


def ended(client: SchedulerClient, job_id: str) -> JobView:
    def done() -> JobView | None:
        view = client.get(job_id)
        return view if view.status in ("COMPLETED", "FAILED", "HALTED", "CANCELLED") else None

    view = poll(f"{job_id} to end", done)
    if view.status != "COMPLETED":
        raise RuntimeError(f"{job_id} ended {view.status}: {view.reason}")
    return view


def running(client: SchedulerClient, job_id: str) -> None:
    poll(f"{job_id} to report metrics", lambda: client.get(job_id).learners[0].metrics or None)


def preempt(client: SchedulerClient, s3: SeaweedServer, victim: str) -> tuple[str, float]:
    """Submit the preemptor; the decision's time is the victim's record as saved with the preemptor's name."""
    urgent = client.submit(manifest(s3, STAMPED, priority=0, data="smoke")).job_id
    view = poll("the decision", lambda: v if "preempted by" in (v := client.get(victim)).reason else None)
    return urgent, epoch(view.updated_at)


def attempts_steps(client: SchedulerClient, view: JobView) -> tuple[list[int], list[int]]:
    """The steps the first attempt logged, and those of the attempts after it (split at the second's deploy)."""
    second = epoch(view.attempts[1].started_at)
    records = client.metrics_history(view.job_id)
    first = [int(r["step"]) for r in records if float(r["time"]) < second]
    return first, [int(r["step"]) for r in records if float(r["time"]) >= second]


class Burners:
    """One CPU-bound container per core, from the sidecar image (its Python), without network: the load of other
    jobs' containers. Removed on exit."""

    def __init__(self, image: str) -> None:
        self.image = image
        self.containers: list[Any] = []

    def __enter__(self) -> Burners:
        for n in range(os.cpu_count() or 1):
            self.containers.append(
                engine().containers.run(
                    self.image,
                    ["python3", "-c", "while True: pass"],
                    entrypoint=[],
                    name=f"lk-bench-burner-{os.getpid()}-{n}",
                    network_mode="none",
                    detach=True,
                    auto_remove=False,
                )
            )
        return self

    def __exit__(self, *_: object) -> None:
        for container in self.containers:
            container.remove(force=True)


def cooperative(client: SchedulerClient, s3: SeaweedServer, etcd: EtcdServer, label: str) -> None:
    free = client.submit(manifest(s3, STAMPED, priority=0, data="smoke")).job_id
    submitted = time.time()
    ended(client, free)
    free_start = began(client, free) - submitted
    command = (
        f"SMOKE_MIN_STEP_SECONDS={STEP_S} python /opt/learner/smoke/train.py --steps {STEPS} --checkpoint-every 10"
    )
    victim = client.submit(manifest(s3, command, priority=-10, data="smoke", extra=", halt_grace: 30")).job_id
    running(client, victim)
    time.sleep(WARM_S)  # a benchmark, not a test: the victim trains a while before the preemptor comes
    halted = HaltedAt(etcd, victim)
    urgent, decided = preempt(client, s3, victim)
    deployed = epoch(ended(client, urgent).attempts[0].started_at) - decided
    start = began(client, urgent) - decided
    final = ended(client, victim)
    first = final.attempts[0]
    checkpoint_s = halted.wait() - decided
    requeued_s = epoch(first.ended_at or "") - decided
    before, after = attempts_steps(client, final)
    recomputed = len(set(before) & set(after))
    done_before = len(before)
    bound = checkpoint_s + MARGIN_S
    print(f"\ncooperative learner (PyTorch smoke, 0.1 s a step, halts with a checkpoint), {label}")
    print(f"  preemptor start after the decision   {start:7.2f} s")
    print(
        f"  victim's checkpoint time + {MARGIN_S:g} s        {bound:7.2f} s  ({checkpoint_s:.2f} s + {MARGIN_S:g} s)"
        f"  -> {'ok' if start <= bound else 'MISSED'} (ratio {start / bound:.2f})"
    )
    print(
        f"  of which: decision -> victim's learner HALTED (checkpoint stored) {checkpoint_s:5.2f} s,"
        f" -> victim requeued {requeued_s - checkpoint_s:.2f} s,"
        f" -> preemptor admitted and released {deployed - requeued_s:.2f} s, -> command {start - deployed:.2f} s"
    )
    print(f"  baseline: a start with the room free {free_start:7.2f} s  (ratio {start / free_start:.2f})")
    print(
        f"  steps recomputed after the resume    {recomputed:7d}    (target 0: {'ok' if recomputed == 0 else 'MISSED'})"
    )
    print(f"  baseline: restart from scratch       {done_before:7d}    (steps done before the preemption)")
    print(f"  work lost reported                   {first.work_lost_s!s:>7} s  ({first.steps_lost} steps)")
    print(f"  checkpoint the resume restored       {final.attempts[1].checkpoint_digest}")


def stubborn(client: SchedulerClient, s3: SeaweedServer) -> None:
    extra = ", halt_grace: 2, checkpoint_interval: 1"
    victim = client.submit(manifest(s3, "python $DATA_DIR/stubborn.py", priority=-10, data="stubborn", extra=extra))
    running(client, victim.job_id)
    urgent, _ = preempt(client, s3, victim.job_id)
    ended(client, urgent)
    final = ended(client, victim.job_id)
    before, after = attempts_steps(client, final)
    last_step, resumed_at = max(before), min(after) - 1
    lost_s = (last_step - resumed_at) * STEP_S
    interval = 10 * STEP_S
    print("\nnon-cooperative learner (ignores SIGTERM, a checkpoint every 10 steps = 1 s, grace 2 s)")
    print(
        f"  work lost, measured                  {lost_s:7.2f} s  ({last_step - resumed_at} steps)"
        f"  -> {'ok' if lost_s <= interval + 1e-9 else 'MISSED'} (<= one interval, {interval:g} s)"
    )
    first = final.attempts[0]
    print(f"  work lost, as reported               {first.work_lost_s!s:>7} s  ({first.steps_lost} steps)")
    print(f"  baseline: kill and restart from scratch {last_step * STEP_S:5.2f} s  ({last_step} steps)")


def main() -> int:
    built = build_sidecar(REPO, BuildInputs(ca_bundle=Path("/etc/ssl/certs/ca-certificates.crt")), lambda _: None)
    sidecar = built.immutable_reference or built.reference
    with tempfile.TemporaryDirectory(prefix="lk-bench-") as tmp:
        etcd, s3 = EtcdServer("/usr/bin/etcd", Path(tmp) / "etcd" / "data"), SeaweedServer(Path(tmp) / "s3")
        tokens = Path(tmp) / "tokens.json"
        token = add_token(tokens, TENANT)
        etcd.start()
        s3.start()
        child = None
        try:
            objects = s3.client()
            for bucket in ("bench-data", "bench-results"):
                objects.create_bucket(Bucket=bucket)
            objects.upload_file(str(write_smoke_dataset(Path(tmp) / "smoke")), "bench-data", "smoke/train.csv")
            objects.put_object(Bucket="bench-data", Key="stubborn/stubborn.py", Body=STUBBORN.encode())
            child, url = serve(etcd, s3, sidecar, tokens)
            client = SchedulerClient(url, token, timeout_s=120)
            once_served(client.list_jobs, child, 120)
            cooperative(client, s3, etcd, "quiet")
            with Burners(sidecar):
                cooperative(client, s3, etcd, f"loaded ({os.cpu_count()} CPU burners)")
            stubborn(client, s3)
        finally:
            if child is not None:
                child.terminate()
                child.wait(60)
            etcd.stop()
            s3.stop()
    return 0


def serve(etcd: EtcdServer, s3: SeaweedServer, sidecar: str, tokens: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    argv = [
        *(sys.executable, "-m", "learnerkit", "scheduler", "serve", "--host", "127.0.0.1", "--port", str(port)),
        *("--tokens", str(tokens), "--etcd-endpoints", etcd.endpoint, "--s3-endpoint", s3.endpoint_url),
        *("--signing-key", str(signing_key(tokens.parent)), "--trust-project-images"),
    ]
    env = {**os.environ, "LEARNERKIT_SIDECAR_IMAGE": sidecar, "LEARNERKIT_PREEMPTION_MIN_RUN_S": "1"}
    return subprocess.Popen(argv, cwd=REPO, env=env), f"http://127.0.0.1:{port}"


if __name__ == "__main__":
    sys.exit(main())
