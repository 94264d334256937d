"""A job's provenance through the channel the tenant cannot write, against the real etcd and SeaweedFS: the sidecar's
own upload and record code (`S3Store.upload_stream`, `put_record`), the scheduler's `Provenancing` and writer, and
`verify_folder` on what `job download` would fetch. No learner runs (the learner images may not be built): the
sidecar's steps are called as its runtime calls them, and the job's end as the loop reports it.

- A tenant that rewrites a result and the bucket's copy of its record while the job is halted is caught.
- An object store or etcd outage at the job's end: the provenance is retried, left due when the scheduler
  stops, and written by the next scheduler once the store is back.
- A record of 20,000 result files (2.9 MB: etcd refuses it in one request) goes through etcd in parts.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from controller_sidecar import keys
from controller_sidecar.errors import SidecarError
from controller_sidecar.etcdstore import EtcdStore
from controller_sidecar.provenancerecord import RECORD_KEY, Digested, SidecarRecord
from controller_sidecar.recordchannel import PART_BYTES, assemble, open_record, put_record
from controller_sidecar.s3store import S3Store
from controller_sidecar.settings import S3Settings
from learnerkit.common.signing import create_signer, load_public_key, public_key_path
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.core.planning import Platform
from learnerkit.scheduler.core.provenancing import Provenancing
from learnerkit.scheduler.core.shared import Shared
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.jobs.attempts import Attempt, AttemptEnd
from learnerkit.scheduler.jobs.state import JobState, JobStatus
from learnerkit.scheduler.jobs.store import JobStore
from learnerkit.scheduler.manifest.parser import parse_manifest
from learnerkit.scheduler.outputs.files import kind_of
from learnerkit.scheduler.provenance.facts import ImageFact
from learnerkit.scheduler.provenance.verify import verify_folder
from learnerkit.scheduler.provenance.writer import ProvenanceWriter
from tests.integration.scheduler.conftest import RESULTS_BUCKET, manifest
from tests.servers.proxy import FaultyProxy

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(300)]

LEARNER_ID = "sha256:" + "1" * 64
ROOT = "/learnerkit-test-provenance"


def describe(image: str) -> ImageFact:
    return ImageFact("learnerkit/pytorch:test", LEARNER_ID) if image == LEARNER_ID else ImageFact(image, "")


async def until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        await asyncio.sleep(0.05)


class Job:
    """One job of one learner as the platform leaves it: each attempt's outputs uploaded and recorded by the
    sidecar's own code; its end as the loop reports it to `Provenancing`."""

    def __init__(self, s3: Any, etcd: EtcdStore, endpoint: str, tmp: Path) -> None:
        self.job_id = f"prov-{uuid.uuid4().hex[:8]}"
        self.etcd, self.s3 = etcd, s3
        account = SimpleNamespace(endpoint_url=endpoint, access_key=s3.access_key, secret_key=s3.secret_key)
        self.manifest_text = manifest(account, "python3 train.py")
        self.manifest = parse_manifest(self.manifest_text)
        self.prefix = f"{self.job_id}/"
        self.sidecar = S3Store(
            S3Settings(endpoint_url=s3.endpoint_url, access_key=s3.access_key, secret_key=s3.secret_key)
        )
        self.key = tmp / "platform.pem"
        self.writer = ProvenanceWriter(create_signer(self.key), describe, "learnerkit/sidecar:test")
        self.attempts: list[Attempt] = []

    async def attempt(self, number: int, ended_by: AttemptEnd, results: dict[str, bytes]) -> None:
        learner = f"{self.prefix}attempt-{number}/learner-1/"
        await open_record(self.etcd, self.job_id, number, 1, ROOT)  # as the sidecar does once connected
        stored = [
            await asyncio.to_thread(
                self.sidecar.upload_stream, io.BytesIO(data), RESULTS_BUCKET, learner + name, source=name
            )
            for name, data in results.items()
        ]
        record = SidecarRecord(
            1, results=tuple(Digested(o.key.removeprefix(learner), o.sha256, o.size) for o in stored)
        )
        await put_record(self.etcd, self.job_id, number, record, ROOT)
        await asyncio.to_thread(self.sidecar.put_bytes, RESULTS_BUCKET, learner + RECORD_KEY, record.to_json())
        stamp = f"2026-01-01T0{number}"
        self.attempts.append(Attempt(number, ("node-1",), f"{stamp}:00:00Z").ended(ended_by, "", f"{stamp}:30:00Z"))

    def tracked(self, status: JobStatus) -> Tracked:
        state = JobState(self.job_id, "team-a", "test-job", 0.0, status=status, attempt=len(self.attempts))
        tracked = Tracked(state, self.manifest, self.manifest_text, "yaml", deployed_image=LEARNER_ID)
        tracked.attempts = list(self.attempts)
        return tracked

    def provenancing(self, etcd: EtcdStore, tracked: Tracked) -> Provenancing:
        """A scheduler's provenance writer over its real job store: a new one is a restarted scheduler."""
        options = SchedulerOptions(
            platform=Platform(etcd_endpoints="unused", sidecar_image="learnerkit/sidecar:test"),
            catalog=None,
            resolve_image=lambda _manifest: LEARNER_ID,
            provenance=self.writer,
        )
        shared = SimpleNamespace(options=options, store=JobStore(etcd, ROOT), jobs={self.job_id: tracked})
        return Provenancing(cast(Shared, shared))

    async def due(self) -> bool:
        return await self.etcd.get(keys.provenance_due_key(self.job_id, ROOT)) is not None

    def download(self, folder: Path) -> Path:
        """What `job download --what all` fetches (not the sidecars' records, not checkpoints)."""
        listed = self.s3.client().list_objects_v2(Bucket=RESULTS_BUCKET, Prefix=self.prefix)
        for item in listed.get("Contents", []):
            relative = item["Key"].removeprefix(self.prefix)
            if kind_of(relative) in (None, "checkpoints"):
                continue
            body = self.s3.client().get_object(Bucket=RESULTS_BUCKET, Key=item["Key"])["Body"].read()
            (folder / relative).parent.mkdir(parents=True, exist_ok=True)
            (folder / relative).write_bytes(body)
        return folder


def test_a_result_and_its_record_rewritten_in_the_bucket_while_halted_are_caught(
    etcd_server: Any, s3_server: Any, scheduler_buckets: Any, tmp_path: Path
) -> None:
    async def scenario() -> dict[str, Any]:
        etcd = await EtcdStore.connect(etcd_server.settings())
        try:
            job = Job(s3_server, etcd, s3_server.endpoint_url, tmp_path)
            await job.attempt(1, AttemptEnd.HALTED, {"results/model.bin": b"weights of attempt 1"})
            # Halted: the tenant, with its own keys, replaces the result and the bucket's copy of its record.
            learner = f"{job.prefix}attempt-1/learner-1/"
            forged = b"a backdoored model"
            tenant = s3_server.client()
            tenant.put_object(Bucket=RESULTS_BUCKET, Key=learner + "results/model.bin", Body=forged)
            record = SidecarRecord.from_json(
                tenant.get_object(Bucket=RESULTS_BUCKET, Key=learner + RECORD_KEY)["Body"].read(), "bucket"
            )
            fake = Digested("results/model.bin", hashlib.sha256(forged).hexdigest(), len(forged))
            tenant.put_object(
                Bucket=RESULTS_BUCKET, Key=learner + RECORD_KEY, Body=SidecarRecord(1, results=(fake,)).to_json()
            )
            assert record.results != (fake,)
            # Resumed, and completed.
            await job.attempt(2, AttemptEnd.COMPLETED, {"results/model.bin": b"weights of attempt 2"})
            tracked = job.tracked(JobStatus.COMPLETED)
            provenancing = job.provenancing(etcd, tracked)
            await provenancing.mark_due(tracked, JobStatus.COMPLETED)
            await provenancing.job_ended(tracked)
            await until(lambda: _not(job.due()), "the provenance stored")
            await provenancing.drain()
            folder = job.download(tmp_path / "download")
            return verify_folder(folder, load_public_key(public_key_path(job.key))).to_dict()
        finally:
            await etcd.close()

    report = asyncio.run(scenario())
    assert report["verified"] is False
    assert report["changed"] == ["result attempt-1/learner-1/results/model.bin"]
    assert report["complete"] is True and report["missing"] == []


def test_a_store_outage_at_the_end_still_yields_the_provenance_after_a_restart(
    etcd_server: Any, s3_server: Any, scheduler_buckets: Any, tmp_path: Path
) -> None:
    proxy = FaultyProxy(s3_server.endpoint_url)

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        etcd = await EtcdStore.connect(etcd_server.settings())
        try:
            job = Job(s3_server, etcd, proxy.endpoint_url, tmp_path)
            await job.attempt(1, AttemptEnd.COMPLETED, {"results/model.bin": b"weights"})
            tracked = job.tracked(JobStatus.COMPLETED)
            proxy.fail_matching("PUT", "/provenance/")  # the results store refuses every write of it
            first = job.provenancing(etcd, tracked)
            await first.mark_due(tracked, JobStatus.COMPLETED)
            await first.job_ended(tracked)
            await until(lambda: _true(proxy.count("PUT", "/provenance/") >= 2), "writes refused")
            await first.drain()  # the scheduler stops with the store still out
            assert await job.due(), "the due mark outlives the scheduler"
            assert not proxy.count("GET", "/provenance/provenance.intoto.json")
            listed = s3_server.client().list_objects_v2(Bucket=RESULTS_BUCKET, Prefix=job.prefix + "provenance/")
            assert listed.get("KeyCount", 0) == 0

            proxy.heal()  # the store is back; a new scheduler starts
            second = job.provenancing(etcd, job.tracked(JobStatus.COMPLETED))
            await second.resume()
            await until(lambda: _not(job.due()), "the provenance stored by the next scheduler")
            await second.drain()
            left = await etcd.get_prefix(keys.provenance_prefix(job.job_id, ROOT))
            folder = job.download(tmp_path / "download")
            report = verify_folder(folder, load_public_key(public_key_path(job.key))).to_dict()
            envelope = json.loads((folder / "provenance/provenance.intoto.json").read_bytes())
            return report, {"left": left, "statement": json.loads(base64.b64decode(envelope["payload"]))}
        finally:
            await etcd.close()

    try:
        report, found = asyncio.run(scenario())
    finally:
        proxy.close()
    assert report["verified"] is True, report
    assert found["left"] == {}, "a COMPLETED job's records go once signed"
    assert [s["name"] for s in found["statement"]["subject"]] == ["attempt-1/learner-1/results/model.bin"]


def test_an_etcd_outage_at_the_end_still_yields_the_provenance_after_a_restart(
    etcd_server: Any, s3_server: Any, scheduler_buckets: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """etcd goes down just after the job's end was saved (its due mark with it): the records cannot be read, the
    scheduler stops, etcd comes back, and the next scheduler writes the provenance."""
    caplog.set_level(logging.WARNING, logger="learnerkit.scheduler.core.provenancing")

    async def scenario() -> dict[str, Any]:
        etcd = await EtcdStore.connect(etcd_server.settings())
        try:
            job = Job(s3_server, etcd, s3_server.endpoint_url, tmp_path)
            await job.attempt(1, AttemptEnd.COMPLETED, {"results/model.bin": b"weights"})
            tracked = job.tracked(JobStatus.COMPLETED)
            first = job.provenancing(etcd, tracked)
            await first.mark_due(tracked, JobStatus.COMPLETED)
            etcd_server.stop()
            try:
                await first.job_ended(tracked)
                await until(lambda: _true("its provenance is not written yet" in caplog.text), "a refused read")
                await first.drain()
            finally:
                etcd_server.start()
            assert await job.due(), "the due mark survived the outage"
            second = job.provenancing(etcd, job.tracked(JobStatus.COMPLETED))
            await second.resume()
            await until(lambda: _not(job.due()), "the provenance stored by the next scheduler")
            await second.drain()
            return verify_folder(
                job.download(tmp_path / "download"), load_public_key(public_key_path(job.key))
            ).to_dict()
        finally:
            await etcd.close()

    report = asyncio.run(scenario())
    assert report["verified"] is True, report
    assert "stopping with its provenance due; the next start writes it" in caplog.text


def test_a_record_larger_than_an_etcd_request_goes_in_parts(etcd_server: Any) -> None:
    record = SidecarRecord(
        1, results=tuple(Digested(f"results/shard-{n:05d}.bin", f"{n:064x}", n) for n in range(20_000))
    )
    assert len(record.to_json()) > 5 * PART_BYTES > 1536 * 1024

    async def scenario() -> tuple[Any, Any]:
        etcd = await EtcdStore.connect(etcd_server.settings())
        job_id = f"big-{uuid.uuid4().hex[:8]}"
        try:
            with pytest.raises(SidecarError, match=r"too large|larger than max"):  # what one request of it would get
                await etcd.put(keys.provenance_record_prefix(job_id, 1, 1, ROOT) + "whole", record.to_json())
            await put_record(etcd, job_id, 1, record, ROOT)
            whole = assemble(await etcd.get_prefix(keys.provenance_prefix(job_id, ROOT)), job_id, ROOT)
            await etcd.delete(keys.provenance_record_prefix(job_id, 1, 1, ROOT) + "part-0001")
            cut = assemble(await etcd.get_prefix(keys.provenance_prefix(job_id, ROOT)), job_id, ROOT)
            return whole, cut
        finally:
            await etcd.delete_prefix(keys.job_prefix(job_id, ROOT))
            await etcd.close()

    whole, cut = asyncio.run(scenario())
    assert whole.records == {(1, 1): record}
    assert cut.records == {}
    assert cut.unreadable == {(1, 1): "attempt 1 learner 1: its record's parts do not hash to its head's sha256"}


async def _not(value: Awaitable[bool]) -> bool:
    return not await value


async def _true(value: bool) -> bool:
    return value
