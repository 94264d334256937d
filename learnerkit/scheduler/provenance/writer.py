"""Gathers a finished job's facts from what the platform recorded, signs them and stores the documents beside the
job's results (``<job prefix>provenance/``): the provenance envelope, the manifest document, the model signature
and the factsheet.

The facts: each learner's sidecar record of each attempt as the sidecar put it in etcd (digests taken as the bytes
streamed; :mod:`controller_sidecar.recordchannel`), never the copy in the tenant's bucket; the logs' digests (their
stored parts, in order); the images as the platform describes them, the job's attempts history and the manifest
without credentials. A learner of an attempt without a record in etcd is named in the statement, which then says
it is incomplete.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from securesystemslib.signer import CryptoSigner

from controller_sidecar.metricrecords import parse_record
from controller_sidecar.provenancerecord import Digested, InstalledPackage
from controller_sidecar.recordchannel import RecordsRead
from controller_sidecar.s3objects import RemoteObject
from controller_sidecar.settings import S3Location
from learnerkit.common.signing import canonical, sign_statement
from learnerkit.scheduler.jobs.attempts import Attempt
from learnerkit.scheduler.jobs.layout import job_location, split_container
from learnerkit.scheduler.jobs.state import JobState
from learnerkit.scheduler.manifest.model import JobManifest
from learnerkit.scheduler.provenance.attempts import attempt_facts
from learnerkit.scheduler.provenance.facts import ImageFact, JobFacts
from learnerkit.scheduler.provenance.factsheet import FACTSHEET_JSON, FACTSHEET_MD, factsheet, factsheet_markdown
from learnerkit.scheduler.provenance.modelsig import SIGNATURE_FILE, model_signature
from learnerkit.scheduler.provenance.records import missing_records, result_digests
from learnerkit.scheduler.provenance.statement import MANIFEST_FILE, manifest_document, provenance_statement
from learnerkit.scheduler.provenance.verify import PROVENANCE_FILE

LOGGER = logging.getLogger(__name__)
LOG_PARTS = "logs/learner.log.part-"


class ProvenanceStore(Protocol):
    """What of :class:`~controller_sidecar.s3store.S3Store` the writer uses."""

    def list(self, location: S3Location) -> list[RemoteObject]: ...
    def get_bytes(self, bucket: str, key: str) -> bytes: ...
    def put_bytes(self, bucket: str, key: str, data: bytes) -> None: ...


@dataclass(frozen=True)
class FinishedJob:
    """What the scheduler knows of a job as it ends."""

    state: JobState
    manifest: JobManifest
    image: str
    """The learner image as deployed (an image ID where the gate pinned one)."""
    attempts: Sequence[Attempt]
    """The job's attempts history, the last attempt closed by the job's end."""
    instance: str
    ran_digest: str = ""
    """The learner image's digest as the backend reported the last attempt ran it (Kubernetes' ``imageID``):
    the digest where the scheduler's engine has none of ``image``."""
    records: RecordsRead = field(default_factory=lambda: RecordsRead({}, {}))
    """The sidecars' records as read from etcd."""


@dataclass(frozen=True)
class ProvenanceWriter:
    signer: CryptoSigner
    describe_image: Callable[[str], ImageFact]
    """The platform's description of an image: its reference, digest and the build tool's records."""
    sidecar_image: str

    def write(self, store: ProvenanceStore, job: FinishedJob) -> list[str]:
        """Store the job's provenance documents; the keys written."""
        bucket, prefix = job_location(job.manifest, job.state.job_id)
        facts, metrics = self.facts(store, bucket, prefix, job)
        manifest = manifest_document(facts)
        statement = provenance_statement(facts, hashlib.sha256(manifest).hexdigest())
        sheet = factsheet(statement, metrics)
        documents = {
            MANIFEST_FILE: manifest,
            PROVENANCE_FILE: canonical(sign_statement(statement, self.signer)),
            SIGNATURE_FILE: canonical(model_signature(job.state.job_id, facts.results, self.signer)),
            FACTSHEET_JSON: json.dumps(sheet, indent=1, sort_keys=True).encode(),
            FACTSHEET_MD: factsheet_markdown(sheet).encode(),
        }
        for name, data in documents.items():
            store.put_bytes(bucket, prefix + name, data)
        LOGGER.info("job %s: provenance of %d result(s) stored", job.state.job_id, len(facts.results))
        for gap in facts.missing:
            LOGGER.warning(
                "job %s: provenance incomplete: attempt %d learner %d: %s",
                job.state.job_id,
                gap.attempt,
                gap.learner,
                gap.reason,
            )
        return [prefix + name for name in documents]

    def facts(
        self, store: ProvenanceStore, bucket: str, prefix: str, job: FinishedJob
    ) -> tuple[JobFacts, list[dict[str, Any]]]:
        objects: dict[str, RemoteObject] = {}
        for attempt in range(1, job.state.attempt + 1):
            for obj in store.list(S3Location(bucket, f"{prefix}attempt-{attempt}/")):
                objects[obj.key] = obj
        read = job.records
        attempts = [a.number for a in job.attempts] or list(range(1, job.state.attempt + 1))
        missing = missing_records(read, attempts)
        records = {place: record for place, record in read.records.items() if place[0] in attempts}
        at = {(a, n): f"attempt-{a}/learner-{n}/" for a, n in records}
        data: dict[str, Digested] = {}
        requirements: dict[tuple[str, str], InstalledPackage] = {}
        model_code = None
        for _place, record in sorted(records.items()):
            data.update({d.name: d for d in record.data})
            requirements.update({(p.name, p.version): p for p in record.requirements})
            if record.model is not None:
                name = record.model.name.removeprefix(f"s3://{bucket}/{prefix}")
                model_code = Digested(name, record.model.sha256, record.model.size)
        results = result_digests(records)
        histories = tuple(
            Digested(at[place] + record.metrics.name, record.metrics.sha256, record.metrics.size)
            for place, record in sorted(records.items())
            if record.metrics is not None
        )
        logs = tuple(self._log(store, bucket, prefix, learner, objects) for learner in sorted(set(at.values())))
        restored = {
            a: (record.restored_step, record.restored_checkpoint) for (a, n), record in records.items() if n == 1
        }
        data_bucket, data_prefix = split_container(job.manifest.training_data_store.training_data or "")
        facts = JobFacts(
            job_id=job.state.job_id,
            tenant=job.state.tenant,
            status=job.state.status.value,
            manifest=job.manifest.to_dict(),
            command=job.manifest.framework.command,
            learner_image=self._learner_image(job),
            sidecar_image=self.describe_image(self.sidecar_image),
            instance=job.instance,
            results=results,
            data=tuple(data[name] for name in sorted(data)),
            data_prefix=f"s3://{data_bucket}/{data_prefix}",
            model_code=model_code,
            requirements=tuple(requirements[k] for k in sorted(requirements)),
            metric_histories=histories,
            logs=tuple(log for log in logs if log is not None),
            attempts=tuple(attempt_facts(job.attempts, restored)),
            missing=missing,
        )
        last = histories[-1] if histories else None
        metrics = []
        if last is not None:
            stored = store.get_bytes(bucket, prefix + last.name)
            if hashlib.sha256(stored).hexdigest() == last.sha256:  # else changed in the bucket: not shown
                metrics = [parsed for line in stored.splitlines() if (parsed := parse_record(line)) is not None]
        return facts, metrics

    def _learner_image(self, job: FinishedJob) -> ImageFact:
        fact = self.describe_image(job.image)
        return fact if fact.digest or not job.ran_digest else replace(fact, digest=job.ran_digest)

    @staticmethod
    def _log(
        store: ProvenanceStore, bucket: str, prefix: str, learner: str, objects: Mapping[str, RemoteObject]
    ) -> Digested | None:
        parts = sorted(key for key in objects if key.startswith(prefix + learner + LOG_PARTS))
        if not parts:
            return None
        digest, size = hashlib.sha256(), 0
        for key in parts:
            data = store.get_bytes(bucket, key)
            digest.update(data)
            size += len(data)
        return Digested(learner + "logs/learner.log", digest.hexdigest(), size)
