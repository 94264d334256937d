"""What the REST API and the CLI see of the scheduler: jobs per tenant, and the verbs on them.

The scheduler (``learnerkit.scheduler.core.scheduler``) implements :class:`SchedulerFacade`; the API room depends only
on this module, so it is tested against a fake and the scheduler against real etcd and Docker.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from learnerkit.scheduler.fabric import ClusterView, QueueView


@dataclass(frozen=True)
class LearnerView:
    learner_id: int
    status: str
    """The sidecar's phase: PENDING ... COMPLETED | FAILED | HALTED; QUEUED before deploy."""
    message: str = ""
    exit_code: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    alive: bool = False
    """Whether the learner's sidecar holds its etcd lease."""


@dataclass(frozen=True)
class SweepOfJob:
    """The sweep a trial job belongs to, and its trial's index."""

    sweep_id: str
    trial: int


@dataclass(frozen=True)
class AttemptView:
    """One deploy of the job (`learnerkit.scheduler.jobs.attempts`)."""

    number: int
    nodes: tuple[str, ...] = ()
    started_at: str = ""
    ended_at: str | None = None
    ended_by: str | None = None
    """COMPLETED, FAILED, HALTED, PREEMPTED, NODE_LOST, DRAINED, CANCELLED, RESTARTED; None while it runs."""
    reason: str = ""
    resumed_from: int | None = None
    """The attempt whose checkpoint this one restored."""
    checkpoint_digest: str | None = None
    work_lost_s: float | None = None
    """Training seconds lost when it ended (at most, for a learner stopped at the halt grace's end)."""
    steps_lost: int | None = None


JUDGES_MODEL = "the model"


@dataclass(frozen=True)
class EvaluationView:
    """One evaluation of the job's model (docs/evaluations.md)."""

    name: str
    kind: str
    outcome: str
    """running | passed | failed (a threshold missed) | crashed (no verdict: never a pass)."""
    message: str = ""
    """failed: each threshold missed (metric, value, threshold); crashed: why there is no verdict."""
    report: str = ""
    """``s3://`` of the JSON report."""
    judges: str = JUDGES_MODEL
    """What it judged: ``the model``, or ``the tenant's predictions (column <c>)`` for a fairness evaluation over
    a supplied ``prediction`` column (then its verdict is not the model's)."""


@dataclass(frozen=True)
class EvaluationReport:
    evaluation: EvaluationView
    summary: str = ""
    """The readable summary (``<name>.txt``); empty without a report."""
    report: dict[str, Any] | None = None
    """The JSON report (``<name>.json``: verdict, failures, the robustness curve or every group metric)."""


@dataclass(frozen=True)
class EvaluationReports:
    """The latest round of evaluations of a job's model (``job evaluations``)."""

    job_id: str
    round: int
    """0: the job was never evaluated."""
    evaluations: tuple[EvaluationReport, ...] = ()


MODEL_ACCEPTED = "accepted"
MODEL_REJECTED = "rejected"
MODEL_PENDING = "pending"
MODEL_NOT_EVALUATED = "not evaluated"
"""A job's model verdict starts with one of these; ``rejected`` and ``not evaluated`` may add why in brackets."""


@dataclass(frozen=True)
class JobView:
    job_id: str
    tenant: str
    name: str
    status: str
    """The job's aggregate phase: QUEUED, PENDING, DOWNLOADING, PROCESSING, STORING, COMPLETED, FAILED, HALTED,
    CANCELLED; PREEMPTED while a preempted job waits to resume."""
    reason: str = ""
    """Why the job waits (admission), or why it ended."""
    submitted_at: str = ""
    """ISO-8601 UTC."""
    updated_at: str = ""
    priority: int = 0
    gpus: int = 0
    learners: tuple[LearnerView, ...] = ()
    restarts: int = 0
    results: str = ""
    """``s3://bucket/prefix`` of the job's outputs."""
    evaluations: tuple[EvaluationView, ...] = ()
    """The latest round of evaluations of the job's model (``job status`` only; empty elsewhere)."""
    model: str = MODEL_NOT_EVALUATED
    """The model's verdict from the latest evaluation round: ``accepted``, ``rejected (fairness: disparate_impact
    0.31, wants >= 0.8)``, ``pending`` or ``not evaluated`` (docs/evaluations.md, "Verdicts")."""
    attempts: tuple[AttemptView, ...] = ()
    """Each deploy of the job, oldest first."""
    sweep: SweepOfJob | None = None
    """The sweep and trial a trial job runs (docs/sweeps.md); None for a job submitted on its own."""


@dataclass(frozen=True)
class TrialView:
    """One trial of a sweep (docs/sweeps.md)."""

    index: int
    job_id: str
    state: str
    """pending, running, paused, stopped, completed or failed."""
    rung: int
    """1-based: the rung it trains towards (running) or last finished."""
    budget: int
    results: tuple[float, ...]
    """The objective at the end of each rung it finished."""
    reason: str
    """Why it continues, is paused or was stopped: "rung 2: 4th of 9, the top 3 continue"."""
    parameters: dict[str, float | int | str | bool] = field(default_factory=dict)
    job_status: str = ""
    freed_bytes: int = 0
    """Object-store bytes its removed checkpoints held."""
    results_location: str = ""
    """``s3://bucket/prefix`` of the trial job's outputs."""
    first_rung: int = 1
    """1-based: the rung its first result is of (Hyperband's later brackets, PBT's later generations start higher)."""
    lineage: tuple[int, ...] = ()
    """PBT: the trials whose checkpoints it descends from, its parent first."""


@dataclass(frozen=True)
class ParameterView:
    """One parameter of a sweep's search space, as its search file declares it (docs/sweeps.md)."""

    name: str
    type: str
    """log_uniform, uniform, integer or choice."""
    low: float = 0.0
    high: float = 0.0
    values: tuple[float | int | str | bool, ...] = ()
    """A choice's options, in the search file's order."""


@dataclass(frozen=True)
class SweepView:
    sweep_id: str
    tenant: str
    status: str
    """running, halted, cancelled, done or failed (`reason` says why)."""
    reason: str
    algorithm: str
    metric: str
    goal: str
    unit: str
    rungs: tuple[int, ...]
    trials_total: int
    concurrency: int
    submitted_at: str
    trials: tuple[TrialView, ...] = ()
    """The trials started so far, by index."""
    freed_bytes: int = 0
    space: tuple[ParameterView, ...] = ()
    """The search space's parameters, in the search file's order."""


DEFAULT_PAGE_JOBS = 50
MAX_PAGE_JOBS = 500
"""A page of the job list holds at most this many jobs (``limit``), and at most `MAX_PAGE_BYTES` of JSON."""
MAX_PAGE_BYTES = 256 * 1024


@dataclass(frozen=True)
class StoreKeys:
    """A tenant's keys of a job's results store, lent for one request: used for it, never stored or shown."""

    access_key: str
    secret_key: str = field(repr=False)


@dataclass(frozen=True)
class JobQuery:
    """A page of a tenant's jobs (docs/api.md, "Listing jobs"): its filters, order and where it starts."""

    limit: int = DEFAULT_PAGE_JOBS
    next: str | None = None
    """The opaque token the previous page ended with; None: the first page."""
    sort: str = "submitted"
    """submitted, name or status; ties go by submission time, then job id."""
    descending: bool = False
    statuses: frozenset[str] = frozenset()
    """Only jobs in one of these statuses; empty: any."""
    name: str | None = None
    framework: str | None = None
    since: float | None = None
    """Epoch seconds: submitted at or after."""
    until: float | None = None
    """Epoch seconds: submitted before."""
    search: str | None = None
    """Case-insensitive text in the job id, name or reason."""


@dataclass(frozen=True)
class JobPage:
    jobs: tuple[JobView, ...]
    cursors: tuple[str, ...]
    """The token that continues after each job, in order."""
    next: str | None
    """The token of the next page; None on the last."""
    total: int
    """Jobs matching the filters, over every page."""


@dataclass(frozen=True)
class SweepPage:
    """A page of a tenant's sweeps as ``GET /v1/sweeps`` answers it (the client's reading)."""

    sweeps: tuple[SweepView, ...]
    next: str | None
    """The token of the next page; None on the last."""
    total: int
    """The tenant's sweeps over every page."""


@dataclass(frozen=True)
class LogChunk:
    data: bytes
    next_offset: int
    finished: bool
    """True when the job is terminal and everything up to ``next_offset`` is all there is."""


@dataclass(frozen=True)
class LogStream:
    """A learner's log from ``offset`` to ``next_offset``, not yet read: ``chunks`` fetches it as it is taken
    (blocking calls: iterate it in a worker thread), so no more than a chunk is held at once."""

    chunks: Iterator[bytes]
    offset: int
    """Where the bytes start: the asked offset, or where the asked last lines start."""
    next_offset: int
    finished: bool
    """True when the attempt is over and everything up to ``next_offset`` is all there is."""
    attempt: int = 1
    """The attempt whose log this is."""
    log_size: int = 0
    """The whole log's size so far (a range may stop before it)."""

    @property
    def size(self) -> int:
        return self.next_offset - self.offset

    def read(self) -> bytes:
        """All of it at once (tests and small logs)."""
        return b"".join(self.chunks)


@dataclass(frozen=True)
class StoredFile:
    """One file a job stored (``job download``)."""

    path: str
    """Below the job's prefix: ``attempt-1/learner-1/results/model.pt``."""
    size: int
    kind: str
    """results, logs, checkpoints or model."""
    etag: str = ""
    """The store's ETag of the object (without quotes): what changes when its bytes do."""


@dataclass(frozen=True)
class FileStream:
    """A stored object's bytes, not yet read: ``chunks`` fetches them as they are taken (blocking calls:
    iterate it in a worker thread)."""

    chunks: Iterator[bytes]
    size: int
    version: str = ""
    """What names these very bytes where the store says (a hash of its objects' keys, sizes and ETags): two streams
    of one version hold the same bytes. Empty where unknown."""

    def read(self) -> bytes:
        """All of it at once (tests and small files)."""
        return b"".join(self.chunks)


class SchedulerFacade(Protocol):
    """Every method is scoped to ``tenant``: a job of another tenant is reported as not found."""

    async def submit(
        self,
        tenant: str,
        manifest_text: str,
        *,
        source: str = "manifest.yml",
        image: str | None = None,
        model: AsyncIterator[bytes] | None = None,
    ) -> JobView:
        """Validate and queue; raises ``ManifestError`` (every problem with its field and line). ``image``
        replaces the framework's image; ``model``: the model code (a zip) as it arrives, read to its end and
        stored with the job."""

    async def queue(self, tenant: str) -> QueueView:
        """The tenant's queued jobs, why each waits and its place; the preemptions that touched the tenant."""

    async def cluster(self) -> ClusterView:
        """The nodes, every tenant's quota and use, and the usage analytics: an operator's view, never a tenant's."""

    async def list_jobs(self, tenant: str) -> list[JobView]:
        """Every job of the tenant, oldest first (the scheduler's own callers; the API pages with `page_jobs`)."""

    async def page_jobs(self, tenant: str, query: JobQuery) -> JobPage:
        """One page of the tenant's jobs; ``InvalidRequestError`` for a bad sort or a token of another query."""

    async def get(self, tenant: str, job_id: str) -> JobView:
        """Raises ``JobNotFoundError`` for unknown jobs and for other tenants' jobs alike."""

    async def manifest(self, tenant: str, job_id: str) -> str:
        """The job's manifest as submitted, its stores' credentials replaced (comments and layout not kept)."""

    async def evaluate(self, tenant: str, job_id: str, text: str, *, source: str = "evaluations.yml") -> JobView:
        """Evaluate a COMPLETED job's model again with the evaluations of ``text`` (a file of ``evaluations:``),
        without retraining; `ManifestError` lists every problem, `JobStateError` while a round still runs."""

    async def evaluation_reports(self, tenant: str, job_id: str) -> EvaluationReports:
        """The reports of the job's latest round of evaluations."""

    async def halt(self, tenant: str, job_id: str) -> JobView:
        """Checkpoint and stop; the job ends HALTED and can be resumed. ``JobStateError`` when not running."""

    async def resume(self, tenant: str, job_id: str) -> JobView:
        """Queue a HALTED (or FAILED) job again, restoring its latest checkpoint; ``JobStateError`` otherwise."""

    async def cancel(self, tenant: str, job_id: str) -> JobView:
        """Stop the job without a checkpoint and remove everything it runs; it ends CANCELLED."""

    async def delete(self, tenant: str, job_id: str) -> JobView:
        """Forget an ended job: its record and credentials leave etcd, its stored outputs stay; the view is its
        last. ``JobStateError`` while it is queued or running."""

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
        """The learner's log of ``attempt`` (default: the latest; as shipped to the object store) from ``offset``,
        or its last ``tail`` lines when they start later, and at most ``length`` bytes of it; `ConfigError` for
        an attempt the job has not had."""

    async def metrics_history(self, tenant: str, job_id: str, *, learner_id: int = 1) -> FileStream:
        """The learner's stored ``metrics.jsonl`` of every attempt, oldest first: JSON lines
        ``{"step", "time", "values", "source"?}``; empty until the sidecar has first stored it."""

    async def outputs(
        self, tenant: str, job_id: str, *, what: str = "all", lent: StoreKeys | None = None
    ) -> list[StoredFile]:
        """The job's stored files of one kind (results, logs, checkpoints, model) or all; ``lent``: the tenant's
        keys of the job's results store for this read only (the scheduler deleted the job's own at its end)."""

    async def open_output(self, tenant: str, job_id: str, path: str, *, lent: StoreKeys | None = None) -> FileStream:
        """One of the job's stored files by its path; ``UnknownFileError`` when the job stored none there."""

    async def open_evaluation_data(self, tenant: str, job_id: str, uri: str) -> FileStream:
        """An evaluation data object (``s3://bucket/key``) that a signed round statement of the job lists, for
        `job verify` to hash again; ``UnknownFileError`` for any other, or one the store no longer has."""

    async def submit_sweep(
        self,
        tenant: str,
        search_text: str,
        manifest_text: str,
        *,
        search_source: str = "search.yml",
        manifest_source: str = "manifest.yml",
        image: str | None = None,
        model: AsyncIterator[bytes] | None = None,
    ) -> SweepView:
        """Check the search file and its manifest together, store the model code once for every trial, and
        start the sweep; raises ``SearchFileError`` or ``ManifestError`` naming every problem."""

    async def list_sweeps(self, tenant: str) -> list[SweepView]: ...

    async def get_sweep(self, tenant: str, sweep_id: str) -> SweepView:
        """Raises ``UnknownJobError`` for unknown sweeps and other tenants' alike."""

    async def halt_sweep(self, tenant: str, sweep_id: str) -> SweepView:
        """No trial starts or is promoted; running trials are halted onto their checkpoints."""

    async def resume_sweep(self, tenant: str, sweep_id: str) -> SweepView:
        """Go on: halted trials resume from their checkpoints, decisions resume."""

    async def cancel_sweep(self, tenant: str, sweep_id: str) -> SweepView:
        """Cancel every running trial; the sweep ends cancelled."""

    def hold_model(self, tenant: str, name: str, by: str) -> AbstractAsyncContextManager[None]:
        """The model's alias-move lock, held while the block runs (one move of a model at a time, across
        schedulers sharing the job store); `ModelBusyError` when another move holds it too long."""
