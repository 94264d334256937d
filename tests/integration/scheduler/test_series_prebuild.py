"""A job that ends has its learner's metric series built into columns on the scheduler's disk from the real
SeaweedFS, fed by the real etcd's job events: the columns carry the stored history's version, so the first view
loads them instead of parsing the history. A real Scheduler restored from etcd; nothing is deployed."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from controller_sidecar.etcdstore import EtcdStore
from learnerkit.dev.s3 import create_bucket
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.api.auth import add_token
from learnerkit.scheduler.backends.docker import DockerBackend
from learnerkit.scheduler.config.policy import SubmitPolicy, origin
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.core.planning import Platform
from learnerkit.scheduler.core.scheduler import Scheduler
from learnerkit.scheduler.events.hub import EventHub
from learnerkit.scheduler.events.source import follow_etcd
from learnerkit.scheduler.images.catalog import ImageCatalog
from learnerkit.scheduler.jobs.attempts import Attempt, save_attempt
from learnerkit.scheduler.jobs.state import JobState, JobStatus
from learnerkit.scheduler.jobs.store import JobStore
from learnerkit.scheduler.manifest.parser import parse_manifest
from learnerkit.scheduler.series import stored
from tests.integration.conftest import REPO
from tests.waiting import await_until

BUCKET = "series-prebuild"
TENANT = "team-a"
STEPS = 5_000


def _manifest(s3: Any) -> str:
    return f"""\
name: prebuild
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
  command: python train.py
"""


def test_an_ended_jobs_columns_are_built_from_the_real_store(etcd_server: Any, s3_server: Any, tmp_path: Path) -> None:
    s3 = s3_server.client()
    create_bucket(s3, BUCKET)
    text = _manifest(s3_server)
    job_id = f"job-{uuid.uuid4().hex[:12]}"
    root = f"/learnerkit-prebuild-{uuid.uuid4().hex[:8]}/jobs"
    history = b"".join(
        b'{"step": %d, "time": %d, "values": {"loss": %.6f}}\n' % (s, 1.8e9 + s, 1 / s) for s in range(1, STEPS + 1)
    )
    s3.put_object(Bucket=BUCKET, Key=f"{job_id}/attempt-1/learner-1/logs/metrics.jsonl", Body=history)
    options = SchedulerOptions(
        platform=Platform(etcd_endpoints=etcd_server.endpoint, sidecar_image="unused"),
        catalog=ImageCatalog(REPO).frameworks(),
        resolve_image=lambda _manifest: "unused",
        submit_policy=SubmitPolicy(object_stores=(str(origin(s3_server.endpoint_url)),)),
    )
    folder = tmp_path / "series"

    async def run() -> None:
        etcd = await EtcdStore.connect(etcd_server.settings())
        following = None
        try:
            store = JobStore(etcd, root)
            spec = {
                "manifest": parse_manifest(text, "manifest.yml", None).to_dict(),
                "tenant": TENANT,
                "job_id": job_id,
            }
            state = JobState(job_id, TENANT, "prebuild", 1_800_000_000.0)
            await store.create(state, spec, text, "manifest.yml")
            await save_attempt(store, job_id, Attempt(1, ("node-1",), "2027-01-15T09:00:00+00:00"))
            state = state.evolve(status=JobStatus.HALTED, stage=Stage.DONE, reason="halted by its user")
            await store.save(state)
            scheduler = Scheduler(store, DockerBackend(), options)
            await scheduler.loop.rebuild()
            hub = EventHub(root, streams_per_address=1)
            following = asyncio.create_task(follow_etcd(hub, etcd))
            await asyncio.wait_for(hub.ready.wait(), 30)
            tokens = tmp_path / "tokens.json"
            add_token(tokens, TENANT)
            app = create_app(scheduler, tokens, events=hub, series_folder=folder)
            assert not folder.exists()
            await store.save(state.evolve(reason="halted by its user again"))  # the job's event, HALTED

            async def built() -> bool:
                return any(folder.glob("*.series"))

            await await_until(built, timeout=60, message="the ended job's columns on disk")
            await app.state.series_prebuild.drain()
            kept = stored.load(stored.path_of(folder, TENANT, job_id, 1))
            now = await scheduler.metrics_history(TENANT, job_id, learner_id=1)
            assert kept is not None and (kept.size, kept.version) == (now.size, now.version)
            assert now.version, "the store's listing versions the history"
            assert len(kept.reader.history.series["loss"].by_step.x) == STEPS
        finally:
            if following is not None:
                following.cancel()
                await asyncio.gather(following, return_exceptions=True)
            await etcd.close()

    asyncio.run(run())
