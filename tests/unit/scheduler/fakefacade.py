"""An in-memory `SchedulerFacade` for the API and CLI tests: jobs per tenant, scripted status changes."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime

from learnerkit.common.errors import ConfigError
from learnerkit.scheduler.errors import JobNotFoundError, JobStateError, UnknownFileError
from learnerkit.scheduler.fabric import ClusterView, QueueView
from learnerkit.scheduler.facade import (
    EvaluationReport,
    EvaluationReports,
    EvaluationView,
    FileStream,
    JobPage,
    JobQuery,
    JobView,
    LearnerView,
    LogStream,
    StoredFile,
    StoreKeys,
    SweepView,
)
from learnerkit.scheduler.jobs.listing import ListedJob, select
from learnerkit.scheduler.manifest.evaluations import parse_evaluations_text
from learnerkit.scheduler.manifest.parser import parse_manifest
from learnerkit.scheduler.manifest.redact import redact_credentials

TERMINAL = {"COMPLETED", "FAILED", "HALTED", "CANCELLED"}
RUNNING = {"PENDING", "DOWNLOADING", "PROCESSING", "STORING"}
WAIT_REASON = "waiting for 2 GPU(s) of type nvidia-a100: 1 free"

MANIFEST = """\
name: mnist
cpus: 1
gpus: {gpus}
gpu_type: nvidia-a100
memory: 1Gb
learners: 2
data_stores:
  - id: store
    type: s3_datastore
    training_data:
      container: data
    training_results:
      container: results
    connection:
      auth_url: http://127.0.0.1:8333
      user_name: key
      password: secret
framework:
  name: pytorch
  version: "2.13"
  command: python train.py
"""


@dataclass
class FakeJob:
    view: JobView
    script: list[JobView] = field(default_factory=list)
    """Views that successive `get` calls move through, one per call (the last one stays)."""
    log: bytes = b""
    past_logs: list[bytes] = field(default_factory=list)
    """The logs of attempts before the latest (whose log is `log`), oldest first."""
    log_step: int = 8
    """Bytes each `logs` call releases, so a follower needs several polls."""
    metrics: bytes = b""
    """The stored metrics.jsonl of learner 1."""
    files: dict[str, bytes] = field(default_factory=dict)
    """Stored files by path below the job (``attempt-1/learner-1/results/x``)."""
    evaluation_data: dict[str, bytes] = field(default_factory=dict)
    """The evaluation data objects its round statements list, by ``s3://bucket/key``."""
    reports: EvaluationReports | None = None
    """The latest round of evaluations (`evaluate` starts one)."""
    manifest: str = ""
    """The manifest as submitted."""


class FakeFacade:
    def __init__(self) -> None:
        self.jobs: dict[str, FakeJob] = {}
        self._ids = itertools.count(1)
        self.calls: list[tuple[str, str]] = []
        self.after_submit: list[str | tuple[str, str]] = []
        """Statuses a submitted job then goes through, one per `get`; (status, model verdict) sets both."""
        self.submit_error: Exception | None = None
        self.model_locks: dict[str, asyncio.Lock] = {}
        """Raised by `submit` when set (the scheduler's own failures)."""
        self.submitted_models: list[bytes] = []
        """Each submit's model, as it arrived."""
        self.submitted_images: list[str | None] = []
        self.frameworks: dict[str, str] = {}
        """A job's framework for the list's filter, by job id; pytorch when not set."""
        self.sweeps: dict[str, SweepView] = {}
        self.queues: dict[str, QueueView] = {}
        """The queue view `queue` returns per tenant; an empty one when not set."""
        self.cluster_view = ClusterView((), (), (), "2026-11-29T00:00:00Z")

    async def submit(
        self,
        tenant: str,
        manifest_text: str,
        *,
        source: str = "manifest.yml",
        image: str | None = None,
        model: AsyncIterator[bytes] | None = None,
    ) -> JobView:
        self.calls.append(("submit", tenant))
        if self.submit_error is not None:
            raise self.submit_error  # before the model is read: the API must still answer
        if model is not None:
            self.submitted_models.append(b"".join([chunk async for chunk in model]))
        self.submitted_images.append(image)
        manifest = parse_manifest(manifest_text, source, image=image)
        job_id = f"job-{next(self._ids)}"
        learners = tuple(LearnerView(learner_id=n, status="QUEUED") for n in range(1, manifest.resources.learners + 1))
        view = JobView(
            job_id=job_id,
            tenant=tenant,
            name=manifest.name,
            status="QUEUED",
            reason=WAIT_REASON,
            submitted_at="2026-11-22T12:00:00+00:00",
            priority=manifest.extensions.priority,
            gpus=manifest.resources.gpus * manifest.resources.learners,
            learners=learners,
        )
        steps = [(s, view.model) if isinstance(s, str) else s for s in self.after_submit]
        self.jobs[job_id] = FakeJob(
            view, [replace(view, status=s, model=m, reason="") for s, m in steps], manifest=manifest_text
        )
        return view

    async def queue(self, tenant: str) -> QueueView:
        self.calls.append(("queue", tenant))
        return self.queues.get(tenant, QueueView(tenant, (), 0, ()))

    async def cluster(self) -> ClusterView:
        self.calls.append(("cluster", ""))
        return self.cluster_view

    async def list_jobs(self, tenant: str) -> list[JobView]:
        self.calls.append(("list", tenant))
        return [job.view for job in self.jobs.values() if job.view.tenant == tenant]

    async def page_jobs(self, tenant: str, query: JobQuery) -> JobPage:
        """The scheduler's own selection (`learnerkit.scheduler.jobs.listing`) over the fake's views."""
        self.calls.append(("page", tenant))
        listed = [
            ListedJob(
                v.job_id, v.name, v.status, self.frameworks.get(v.job_id, "pytorch"), _epoch(v.submitted_at), v.reason
            )
            for job in self.jobs.values()
            if (v := job.view).tenant == tenant
        ]
        chosen = select(listed, query)
        views = tuple(self.jobs[job_id].view for job_id in chosen.job_ids)
        return JobPage(views, chosen.cursors, chosen.cursors[-1] if chosen.more else None, chosen.total)

    async def get(self, tenant: str, job_id: str) -> JobView:
        job = self._job(tenant, job_id)
        if job.script:
            job.view = job.script.pop(0)
        return job.view

    async def manifest(self, tenant: str, job_id: str) -> str:
        return redact_credentials(self._job(tenant, job_id).manifest)

    async def evaluate(self, tenant: str, job_id: str, text: str, *, source: str = "evaluations.yml") -> JobView:
        job = self._job(tenant, job_id)
        if job.view.status != "COMPLETED":
            raise JobStateError(f"job {job_id} is {job.view.status}: only a COMPLETED job's model is evaluated")
        specs = parse_evaluations_text(text, source)
        running = tuple(EvaluationView(spec.name, spec.kind, "running") for spec in specs)
        job.view = replace(job.view, evaluations=running)
        round_ = job.reports.round + 1 if job.reports else 1
        job.reports = EvaluationReports(job_id, round_, tuple(EvaluationReport(v) for v in running))
        return job.view

    async def evaluation_reports(self, tenant: str, job_id: str) -> EvaluationReports:
        job = self._job(tenant, job_id)
        return job.reports or EvaluationReports(job_id, 0)

    async def halt(self, tenant: str, job_id: str) -> JobView:
        return self._move(tenant, job_id, RUNNING | {"QUEUED"}, "HALTED")

    async def resume(self, tenant: str, job_id: str) -> JobView:
        return self._move(tenant, job_id, {"HALTED", "FAILED"}, "QUEUED")

    async def cancel(self, tenant: str, job_id: str) -> JobView:
        return self._move(tenant, job_id, RUNNING | {"QUEUED", "HALTED"}, "CANCELLED")

    async def delete(self, tenant: str, job_id: str) -> JobView:
        job = self._job(tenant, job_id)
        if job.view.status not in {"COMPLETED", "FAILED", "HALTED", "CANCELLED"}:
            raise JobStateError(f"job {job_id} is {job.view.status}: cancel it before deleting it")
        del self.jobs[job_id]
        return job.view

    async def logs(
        self,
        tenant: str,
        job_id: str,
        *,
        learner_id: int = 1,
        offset: int = 0,
        tail: int | None = None,
        attempt: int | None = None,
        length: int | None = None,
    ) -> LogStream:
        job = self._job(tenant, job_id)
        latest = len(job.past_logs) + 1
        if attempt is not None and attempt != latest:
            if not 1 <= attempt < latest:
                raise ConfigError(f"attempt: job {job_id} has attempts 1..{latest}; got {attempt}")
            past = job.past_logs[attempt - 1]
            if tail is not None:
                lines = past.splitlines(keepends=True)
                offset = max(offset, len(past) - sum(map(len, lines[len(lines) - tail :] if tail else [])))
            end = len(past) if length is None else min(len(past), offset + length)
            return LogStream(iter([past[offset:end]]), offset, end, end >= len(past), attempt, len(past))
        if tail is not None:
            lines = job.log.splitlines(keepends=True)
            offset = max(offset, len(job.log) - sum(map(len, lines[len(lines) - tail :] if tail else [])))
        data = job.log[offset : offset + job.log_step]
        end = offset + len(data)
        if end >= len(job.log) and job.view.status not in TERMINAL:
            # The job ends once its whole log has been read: the next poll reports the log finished.
            job.view = replace(job.view, status="COMPLETED")
            return LogStream(iter([data]), offset, end, False, latest, len(job.log))
        finished = job.view.status in TERMINAL and end >= len(job.log)
        return LogStream(
            iter([data[i : i + 3] for i in range(0, len(data), 3)]), offset, end, finished, latest, len(job.log)
        )

    async def metrics_history(self, tenant: str, job_id: str, *, learner_id: int = 1) -> FileStream:
        job = self._job(tenant, job_id)
        data = job.metrics if learner_id == 1 else b""
        return FileStream(iter([data[i : i + 5] for i in range(0, len(data), 5)]), len(data))

    async def outputs(
        self, tenant: str, job_id: str, *, what: str = "all", lent: StoreKeys | None = None
    ) -> list[StoredFile]:
        job = self._job(tenant, job_id)
        found = [
            StoredFile(path, len(data), _kind(path), hashlib.md5(data).hexdigest())  # S3's ETag of one part
            for path, data in sorted(job.files.items())
        ]
        return [item for item in found if what in ("all", item.kind)]

    @asynccontextmanager
    async def hold_model(self, tenant: str, name: str, by: str) -> AsyncIterator[None]:
        """One move of a model at a time, in this process (the scheduler's is an etcd lock)."""
        lock = self.model_locks.setdefault(f"{tenant}/{name}", asyncio.Lock())
        async with lock:
            self.calls.append(("hold_model", f"{tenant}/{name}"))
            yield

    async def list_sweeps(self, tenant: str) -> list[SweepView]:
        return [sweep for sweep in self.sweeps.values() if sweep.tenant == tenant]

    async def get_sweep(self, tenant: str, sweep_id: str) -> SweepView:
        sweep = self.sweeps.get(sweep_id)
        if sweep is None or sweep.tenant != tenant:
            raise JobNotFoundError(f"no sweep {sweep_id!r}")
        return sweep

    async def open_output(self, tenant: str, job_id: str, path: str, *, lent: StoreKeys | None = None) -> FileStream:
        data = self._job(tenant, job_id).files.get(path)
        if data is None:
            raise UnknownFileError(f"job {job_id} stored no file {path!r}")
        return FileStream(iter([data[i : i + 4] for i in range(0, len(data), 4)]), len(data))

    async def open_evaluation_data(self, tenant: str, job_id: str, uri: str) -> FileStream:
        data = self._job(tenant, job_id).evaluation_data.get(uri)
        if data is None:
            raise UnknownFileError(f"job {job_id}: no evaluation round statement of it lists {uri!r}")
        return FileStream(iter([data]), len(data))

    def add(
        self,
        view: JobView,
        *,
        script: list[JobView] | None = None,
        log: bytes = b"",
        metrics: bytes = b"",
        files: dict[str, bytes] | None = None,
    ) -> None:
        self.jobs[view.job_id] = FakeJob(view, script or [], log, metrics=metrics, files=files or {})

    def _job(self, tenant: str, job_id: str) -> FakeJob:
        self.calls.append(("job", tenant))
        job = self.jobs.get(job_id)
        if job is None or job.view.tenant != tenant:
            # Deliberately telling: the API must not pass this message on.
            owner = job.view.tenant if job else "nobody"
            raise JobNotFoundError(f"job {job_id} belongs to {owner}")
        return job

    def _move(self, tenant: str, job_id: str, allowed: set[str], to: str) -> JobView:
        job = self._job(tenant, job_id)
        if job.view.status not in allowed:
            raise JobStateError(f"job {job_id} is {job.view.status}: cannot make it {to}")
        job.view = replace(job.view, status=to, reason="")
        return job.view


def view(job_id: str, tenant: str, status: str = "PROCESSING", **changes: object) -> JobView:
    base = JobView(
        job_id=job_id,
        tenant=tenant,
        name="mnist",
        status=status,
        submitted_at="2026-11-22T12:00:00+00:00",
        learners=(LearnerView(learner_id=1, status=status, alive=True, metrics={"loss": 0.25, "step": 100.0}),),
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def _kind(path: str) -> str:
    if path.startswith("provenance/"):
        return "provenance"
    return "model" if path.startswith("model") else path.split("/")[2]


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp() if iso else 0.0
