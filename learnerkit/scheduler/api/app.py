"""The scheduler's REST API (FastAPI) over a `SchedulerFacade`; docs/api.md describes it for users.

The tenant of every ``/v1`` request comes from its bearer token and nowhere else, and the facade answers only
for that tenant: another tenant's job is "not found" (404), so a tenant cannot even learn that it exists.
Errors have one body shape, ``{"error": <code>, "message": <text>}``; a refused manifest adds ``problems``.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, cast

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import BaseModel, TypeAdapter, ValidationError
from securesystemslib.signer import Signer
from starlette.concurrency import run_in_threadpool
from starlette.convertors import PathConvertor, register_url_convertor
from starlette.exceptions import HTTPException

from controller_sidecar.metricrecords import serve_records
from learnerkit import __version__
from learnerkit.common.errors import ConfigError, LearnerkitError
from learnerkit.common.instants import parse_instant
from learnerkit.common.keyring import PublishedKey
from learnerkit.common.signing import public_key_from_pem
from learnerkit.common.yamlfile import format_field_path
from learnerkit.scheduler.api.auth import TokenStore
from learnerkit.scheduler.api.events import events_router
from learnerkit.scheduler.api.hosting import HealthCheck, Lifespan
from learnerkit.scheduler.api.hsts import StrictTransportSecurity
from learnerkit.scheduler.api.listpages import list_page_response, page_response
from learnerkit.scheduler.api.models import models_router
from learnerkit.scheduler.api.multipart import (
    BodyTimeouts,
    Submission,
    declared_too_large,
    receive_submission,
)
from learnerkit.scheduler.api.ratelimit import RateLimiter
from learnerkit.scheduler.api.series import series_router
from learnerkit.scheduler.api.sweeps import sweeps_router
from learnerkit.scheduler.config.settings import LimitSettings
from learnerkit.scheduler.console.model_folder import FOLDER_PART
from learnerkit.scheduler.console.origin import own_names
from learnerkit.scheduler.console.pages import ConsoleSettings, mount_console
from learnerkit.scheduler.console.submitting import Intake
from learnerkit.scheduler.errors import (
    AuthError,
    ClientGoneError,
    InvalidRequestError,
    JobStateError,
    ManifestError,
    ManifestTooLargeError,
    ModelTooLargeError,
    RateLimitedError,
    StoreUnavailableError,
    TokensFileError,
    UnknownFileError,
    UnknownJobError,
    UnknownMetricError,
    UnknownSweepError,
    UploadTimeoutError,
    model_too_large,
    query_problems,
)
from learnerkit.scheduler.events.hub import EventHub
from learnerkit.scheduler.facade import (
    DEFAULT_PAGE_JOBS,
    MAX_PAGE_BYTES,
    MAX_PAGE_JOBS,
    EvaluationReports,
    JobQuery,
    JobView,
    SchedulerFacade,
    StoredFile,
)
from learnerkit.scheduler.series.cache import SeriesCache
from learnerkit.scheduler.series.prebuild import SeriesPrebuild
from learnerkit.scheduler.sweeps.searchfile import SearchFileError

LOGGER = logging.getLogger(__name__)
MAX_TAIL_LINES = 100_000
"""`logs?tail=N` at most: the scheduler keeps the positions of N line ends while it reads back (at most 8 MiB)."""


class AnyPathConvertor(PathConvertor):
    """Starlette's ``path`` with newlines too: its ``.*`` stops at one, so a stored file whose name holds a
    newline (percent-encoded in the URL) matched no route and answered 404."""

    regex = "(?s:.*)"


register_url_convertor("anypath", AnyPathConvertor())

JSON_OVERHEAD = 6
"""A JSON body may spell each byte of the manifest in up to six (``\\u00e9``): its cap is that much larger."""
STORE_RETRY_AFTER_S = 5
YAML_TYPES = frozenset({"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml", "text/plain"})
NEXT_OFFSET_HEADER = "X-Next-Offset"
SORT_PATTERN = "^-?(submitted|name|status)$"
_JOB_JSON = TypeAdapter(JobView)
FINISHED_HEADER = "X-Finished"
OFFSET_HEADER = "X-Offset"
ATTEMPT_HEADER = "X-Attempt"
LOG_SIZE_HEADER = "X-Log-Size"


class ErrorBody(BaseModel):
    error: str
    """A stable code: unauthorized, not_found, conflict, invalid_manifest, bad_request, ..."""
    message: str


class ProblemBody(BaseModel):
    file: str
    line: int | None
    field: str
    message: str


class ManifestErrorBody(ErrorBody):
    problems: list[ProblemBody]


class SubmitBody(BaseModel):
    manifest: str
    """The manifest's YAML text."""
    source: str = "manifest.yml"
    """The file name problems are reported against."""
    image: str | None = None
    """The learner image instead of the framework's (``job submit --image``)."""


class SigningKeyBody(BaseModel):
    keyid: str
    """securesystemslib's id of the public key: the ``keyid`` a DSSE envelope's signature names."""
    pem: str
    current: bool
    """The key that signs now; the others signed before a rotation (`scheduler key rotate`)."""


class SigningKeys(BaseModel):
    keys: list[SigningKeyBody]


class Health(BaseModel):
    status: str
    reason: str | None = None


_UNAUTHORIZED: dict[int | str, dict[str, Any]] = {401: {"model": ErrorBody, "description": "no or a bad token"}}
_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": ErrorBody, "description": "no such job for the tenant"}}
_CONFLICT: dict[int | str, dict[str, Any]] = {409: {"model": ErrorBody, "description": "not in a state for this"}}
_MANIFEST_BODY = {
    "required": True,
    "content": {
        "application/yaml": {"schema": {"type": "string"}},
        "application/json": {"schema": SubmitBody.model_json_schema()},
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["manifest"],
                "properties": {
                    "manifest": {"type": "string"},
                    "source": {"type": "string"},
                    "image": {"type": "string"},
                    "model": {"type": "string", "format": "binary", "description": "the model code as a zip"},
                },
            }
        },
    },
}
_EVALUATIONS_BODY = {
    "required": True,
    "content": {
        "application/yaml": {"schema": {"type": "string"}},
        "application/json": {"schema": SubmitBody.model_json_schema()},
    },
}
"""``job evaluate``'s file (``evaluations:``) in the submit's two text forms."""
_LOG_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "the learner's log from `offset`",
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        "headers": {
            NEXT_OFFSET_HEADER: {"description": "the offset to ask for next", "schema": {"type": "integer"}},
            FINISHED_HEADER: {"description": "`true` when the log is complete", "schema": {"type": "string"}},
            OFFSET_HEADER: {"description": "where the bytes start in the log", "schema": {"type": "integer"}},
            ATTEMPT_HEADER: {"description": "the attempt whose log this is", "schema": {"type": "integer"}},
            LOG_SIZE_HEADER: {"description": "the whole log's size so far", "schema": {"type": "integer"}},
        },
    }
}

_LIST_RESPONSE: dict[int | str, dict[str, Any]] = list_page_response("jobs") | {
    400: {"model": ErrorBody, "description": "a bad time, or a next token of another query"},
}


_METRICS_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "the learner's metric history: JSON lines `{step, time, values, source?}`, oldest first",
        "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
    }
}
_FILE_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "the stored file's bytes",
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    },
    404: {"model": ErrorBody, "description": "no such job for the tenant, or no such file of the job"},
}
_PUBLIC_KEY_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "the platform's public signing key (ECDSA P-256, PEM): it verifies every job's provenance",
        "content": {"application/x-pem-file": {"schema": {"type": "string"}}},
    }
}
SIGNING_KEY_PATH = "/v1/signing-key"
KEYS_PATH = "/v1/keys"
"""Every public key the platform signed with, by id; no token, like ``SIGNING_KEY_PATH``."""
"""Needs no token: the public key is public, and verifiers fetch it before they hold one."""
WHAT_PATTERN = "^(results|logs|checkpoints|model|provenance|evaluations|all)$"


_bearer = HTTPBearer(auto_error=False, description="a tenant's token: `learnerkit scheduler token add`")


async def _tenant(
    request: Request, _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> str:
    # A verified token costs one HMAC, here on the loop; a first-time scrypt check runs in a worker thread.
    tokens: TokenStore = request.app.state.tokens
    header = request.headers.get("authorization")
    known = tokens.cached(header)
    if known is not None:
        return known
    client = request.client.host if request.client else ""
    return await run_in_threadpool(tokens.authenticate, header, client)


Tenant = Annotated[str, Depends(_tenant)]
"""The tenant whose token the request carries; declaring it makes an endpoint need a token."""


def create_app(
    facade: SchedulerFacade,
    tokens_path: Path,
    *,
    limits: LimitSettings | None = None,
    registry: CollectorRegistry | None = None,
    operator_registry: CollectorRegistry | None = None,
    lifespan: Lifespan | None = None,
    public_key: str | None = None,
    keys: Sequence[PublishedKey] = (),
    health: HealthCheck | None = None,
    console: ConsoleSettings | None = None,
    catalog: str | None = None,
    signer: Signer | None = None,
    events: EventHub | None = None,
    series_folder: Path | None = None,
) -> FastAPI:
    """The ASGI app, the console at ``/ui/`` included (``console``: the names it answers to; default: the
    loopback ones), the model catalog at ``/v1/models`` (``catalog``: its registry; ``signer`` signs its alias
    moves), the event stream at ``/v1/events`` (``events``: the hub it and the console's live pages stream from,
    none without it), metric series' columns kept on disk in ``series_folder`` (none: in memory only; with the
    hub too, built as a job's attempt ends, `SeriesPrebuild`); fails now (`TokensFileError`) when the tokens file
    is missing or others can read it."""
    tokens = TokenStore(tokens_path)
    limits = limits or LimitSettings()

    @asynccontextmanager
    async def app_lifespan(_app: FastAPI) -> AsyncIterator[None]:
        try:
            if lifespan is None:
                yield
            else:
                async with lifespan():
                    yield
        finally:
            if app.state.series_prebuild is not None:
                app.state.series_prebuild.close()

    app = FastAPI(
        title="learnerkit scheduler",
        version=__version__,
        docs_url=None,
        redoc_url=None,
        lifespan=app_lifespan,
    )
    app.add_exception_handler(LearnerkitError, _learnerkit_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_middleware(StrictTransportSecurity)
    app.state.tokens = tokens
    submits = RateLimiter(limits.submits_per_minute, burst=limits.submits_per_minute)
    app.include_router(_jobs_router(facade, limits, submits))
    app.include_router(sweeps_router(facade, limits, _tenant, _UNAUTHORIZED | _NOT_FOUND | _CONFLICT))
    app.state.series = SeriesCache(facade, folder=series_folder)  # shared with the console's charts
    app.state.series_prebuild = None
    if events is not None and series_folder is not None:  # an ended job's columns built before anyone looks
        app.state.series_prebuild = SeriesPrebuild(app.state.series)
        events.listen(app.state.series_prebuild.job_event)
    app.include_router(series_router(app.state.series, _tenant, _UNAUTHORIZED | _NOT_FOUND))
    app.include_router(models_router(facade, catalog, keys, signer, _tenant, _UNAUTHORIZED | _NOT_FOUND | _CONFLICT))
    app.add_api_route(
        "/healthz",
        _healthz_endpoint(health),
        methods=["GET"],
        response_model=Health,
        tags=["service"],
        responses={503: {"model": Health, "description": "the control loop has stalled"}},
    )
    intake = Intake(
        lambda request, extra: _receive(request, limits, extra, folder=FOLDER_PART),
        submits.take,
        limits.submits_per_minute,
        limits.max_manifest_bytes,
        limits.max_model_bytes,
    )
    if events is not None:
        app.include_router(events_router(events, _tenant, _UNAUTHORIZED))
    settings = console or ConsoleSettings(own_names("127.0.0.1"))
    if keys and not settings.keys:  # the trust panel checks provenance with the keys /v1/keys publishes
        settings = replace(settings, keys=tuple(public_key_from_pem(k.pem.encode(), KEYS_PATH) for k in keys))
    mount_console(app, facade, tokens, settings, intake, events)
    if registry is not None:
        app.add_api_route("/metrics", _metrics_endpoint(registry, operator_registry), methods=["GET"], tags=["service"])
    if public_key is not None:
        app.add_api_route(
            SIGNING_KEY_PATH,
            _public_key_endpoint(public_key),
            methods=["GET"],
            tags=["service"],
            responses=_PUBLIC_KEY_RESPONSE,
        )
    if keys:
        body = SigningKeys(keys=[SigningKeyBody(keyid=k.keyid, pem=k.pem, current=k.current) for k in keys])
        app.add_api_route(
            KEYS_PATH, _keys_endpoint(body), methods=["GET"], tags=["service"], response_model=SigningKeys
        )
    return app


def _jobs_router(facade: SchedulerFacade, limits: LimitSettings, submits: RateLimiter) -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["jobs"], responses=_UNAUTHORIZED)

    @router.post(
        "/jobs",
        status_code=201,
        response_model=JobView,
        openapi_extra={"requestBody": _MANIFEST_BODY},
        responses={
            400: {"model": ErrorBody, "description": "the body is not a manifest"},
            413: {
                "model": ErrorBody,
                "description": f"the manifest is over {limits.max_manifest_bytes} bytes, "
                f"or the model over {limits.max_model_bytes}",
            },
            415: {"model": ErrorBody, "description": "neither YAML nor JSON"},
            422: {"model": ManifestErrorBody, "description": "every problem of the manifest"},
            429: {"model": ErrorBody, "description": "too many submits of this tenant; see Retry-After"},
        },
    )
    async def submit_job(request: Request, tenant: Tenant) -> JobView:
        """Queue a job from an FfDL manifest: YAML text, JSON ``{"manifest": "...", "source": "...", "image":
        "..."}``, or multipart/form-data with the parts ``manifest``, ``source``, ``image`` and ``model`` (the
        model code as a zip, last; streamed on to the job's object store as it arrives)."""
        wait = submits.take(tenant)
        if wait:
            raise RateLimitedError(f"tenant {tenant!r} submits more than {limits.submits_per_minute} a minute", wait)
        if _media_type(request) == "multipart/form-data":
            return await _submit_multipart(facade, tenant, request, limits)
        text, source, image = await _manifest_of(request, limits.max_manifest_bytes)
        return await facade.submit(tenant, text, source=source, image=image)

    @router.get("/jobs", response_model=list[JobView], responses=_LIST_RESPONSE)
    async def list_jobs(
        request: Request,
        tenant: Tenant,
        limit: Annotated[
            int, Query(ge=1, le=MAX_PAGE_JOBS, description=f"jobs per page (at most {MAX_PAGE_BYTES} bytes)")
        ] = DEFAULT_PAGE_JOBS,
        next_token: Annotated[str | None, Query(alias="next", description="the previous page's X-Next-Token")] = None,
        sort: Annotated[
            str, Query(pattern=SORT_PATTERN, description="submitted, name or status; a leading `-`: descending")
        ] = "submitted",
        status: Annotated[
            list[str] | None, Query(description="only these statuses (repeat, or comma-separate)")
        ] = None,
        name: Annotated[str | None, Query(description="only jobs of this name")] = None,
        framework: Annotated[str | None, Query(description="only jobs of this framework (its manifest name)")] = None,
        since: Annotated[str | None, Query(description="submitted at or after (ISO-8601)")] = None,
        until: Annotated[str | None, Query(description="submitted before (ISO-8601)")] = None,
        q: Annotated[str | None, Query(description="text in the job id, name or reason (any case)")] = None,
    ) -> Response:
        """A page of the tenant's jobs, oldest first unless ``sort`` says otherwise; ``X-Next-Token`` (and a
        ``Link: rel="next"``) when more follow. Today's clients, which send no parameter, get the first page."""
        query = JobQuery(
            limit=limit,
            next=next_token or None,
            sort=sort.removeprefix("-"),
            descending=sort.startswith("-"),
            statuses=frozenset(
                part.strip().upper() for item in status or () for part in item.split(",") if part.strip()
            ),
            name=name,
            framework=framework,
            since=parse_instant("since", since),
            until=parse_instant("until", until),
            search=q or None,
        )
        page = await facade.page_jobs(tenant, query)
        return page_response(request, page.jobs, _JOB_JSON, page.cursors, page.next, page.total)

    @router.get("/jobs/{job_id}", response_model=JobView, responses=_NOT_FOUND)
    async def get_job(job_id: str, tenant: Tenant) -> JobView:
        """One job: its status, why it waits, and each learner's status, message and metrics."""
        return await facade.get(tenant, job_id)

    @router.get(
        "/jobs/{job_id}/manifest",
        response_class=Response,
        responses=_NOT_FOUND | {200: {"content": {"application/yaml": {"schema": {"type": "string"}}}}},
    )
    async def job_manifest(job_id: str, tenant: Tenant) -> Response:
        """The job's manifest as submitted, its stores' user names and passwords replaced by ``(deleted)``."""
        return Response(await facade.manifest(tenant, job_id), media_type="application/yaml")

    @router.post("/jobs/{job_id}/halt", response_model=JobView, responses=_NOT_FOUND | _CONFLICT)
    async def halt_job(job_id: str, tenant: Tenant) -> JobView:
        """Checkpoint and stop; the job ends HALTED and can be resumed."""
        return await facade.halt(tenant, job_id)

    @router.post("/jobs/{job_id}/resume", response_model=JobView, responses=_NOT_FOUND | _CONFLICT)
    async def resume_job(job_id: str, tenant: Tenant) -> JobView:
        """Queue a HALTED or FAILED job again from its latest checkpoint."""
        return await facade.resume(tenant, job_id)

    @router.post("/jobs/{job_id}/cancel", response_model=JobView, responses=_NOT_FOUND | _CONFLICT)
    async def cancel_job(job_id: str, tenant: Tenant) -> JobView:
        """Stop without a checkpoint; the job ends CANCELLED."""
        return await facade.cancel(tenant, job_id)

    @router.post(
        "/jobs/{job_id}/evaluations",
        response_model=JobView,
        openapi_extra={"requestBody": _EVALUATIONS_BODY},
        responses=_NOT_FOUND
        | _CONFLICT
        | {422: {"model": ManifestErrorBody, "description": "every problem of the evaluations file"}},
    )
    async def evaluate_job(job_id: str, request: Request, tenant: Tenant) -> JobView:
        """Evaluate a COMPLETED job's model again, without retraining: a file holding ``evaluations:`` (as YAML,
        or JSON ``{"manifest": "...", "source": "..."}``, the submit's forms)."""
        text, source, _ = await _manifest_of(request, limits.max_manifest_bytes)
        return await facade.evaluate(tenant, job_id, text, source=source)

    @router.get("/jobs/{job_id}/evaluations", response_model=EvaluationReports, responses=_NOT_FOUND)
    async def job_evaluations(job_id: str, tenant: Tenant) -> EvaluationReports:
        """The latest round of evaluations: each outcome, its readable summary and its JSON report."""
        return await facade.evaluation_reports(tenant, job_id)

    @router.delete("/jobs/{job_id}", response_model=JobView, responses=_NOT_FOUND | _CONFLICT)
    async def delete_job(job_id: str, tenant: Tenant) -> JobView:
        """Forget an ended job: its record and store credentials leave the scheduler; its outputs stay."""
        return await facade.delete(tenant, job_id)

    @router.get("/jobs/{job_id}/logs", response_class=Response, responses=_LOG_RESPONSE | _NOT_FOUND)
    async def job_logs(
        job_id: str,
        tenant: Tenant,
        learner: Annotated[int, Query(ge=1, description="1-based learner id")] = 1,
        offset: Annotated[int, Query(ge=0, description="byte offset to read from")] = 0,
        tail: Annotated[
            int | None,
            Query(ge=0, le=MAX_TAIL_LINES, description="only the last N lines (from `offset` at most), within 8 MiB"),
        ] = None,
        attempt: Annotated[int | None, Query(ge=1, description="1-based attempt; default: the latest")] = None,
        length: Annotated[int | None, Query(ge=0, description="at most this many bytes from where it starts")] = None,
    ) -> Response:
        """A learner's log of one attempt from ``offset``; poll with the returned next offset until finished.
        Streamed: only the log's parts from the offset on are fetched, and no more than a chunk of them is held
        at once."""
        stream = await facade.logs(
            tenant, job_id, learner_id=learner, offset=offset, tail=tail, attempt=attempt, length=length
        )
        headers = {
            NEXT_OFFSET_HEADER: str(stream.next_offset),
            FINISHED_HEADER: str(stream.finished).lower(),
            OFFSET_HEADER: str(stream.offset),
            ATTEMPT_HEADER: str(stream.attempt),
            LOG_SIZE_HEADER: str(stream.log_size),
            "Content-Length": str(stream.size),
        }
        # A sync iterator: Starlette takes its chunks in a worker thread (they are fetched from the store).
        return StreamingResponse(stream.chunks, media_type="application/octet-stream", headers=headers)

    @router.get("/jobs/{job_id}/metrics", response_class=Response, responses=_METRICS_RESPONSE | _NOT_FOUND)
    async def job_metrics(
        job_id: str,
        tenant: Tenant,
        learner: Annotated[int, Query(ge=1, description="1-based learner id")] = 1,
    ) -> Response:
        """A learner's metric history (FfDL's ``emetrics``): its stored metrics.jsonl of every attempt, with
        the TensorBoard scalars the sidecar read; streamed from the object store, one record per line (lines
        that are no record are left out)."""
        stream = await facade.metrics_history(tenant, job_id, learner_id=learner)
        # Only parsed records: the learner wrote the file, a line may be anything (so no Content-Length).
        return StreamingResponse(serve_records(stream.chunks), media_type="application/x-ndjson")

    @router.get("/jobs/{job_id}/files", response_model=list[StoredFile], responses=_NOT_FOUND)
    async def job_files(
        job_id: str,
        tenant: Tenant,
        what: Annotated[str, Query(pattern=WHAT_PATTERN, description="which outputs")] = "all",
    ) -> list[StoredFile]:
        """The files the job stored: results, logs, checkpoints of every attempt and learner, and its model."""
        return await facade.outputs(tenant, job_id, what=what)

    @router.get("/jobs/{job_id}/files/{path:anypath}", response_class=Response, responses=_FILE_RESPONSE)
    async def job_file(job_id: str, path: str, tenant: Tenant) -> Response:
        """One stored file of the job, streamed from the object store (``path`` as the listing gives it)."""
        stream = await facade.open_output(tenant, job_id, path)
        headers = {"Content-Length": str(stream.size)}
        return StreamingResponse(stream.chunks, media_type="application/octet-stream", headers=headers)

    @router.get("/jobs/{job_id}/evaluation-data", response_class=Response, responses=_FILE_RESPONSE)
    async def job_evaluation_data(
        job_id: str, tenant: Tenant, uri: Annotated[str, Query(description="s3://bucket/key, as a round lists it")]
    ) -> Response:
        """An evaluation data object a signed round statement of the job lists, streamed from the job's store,
        for `job verify` to hash again."""
        stream = await facade.open_evaluation_data(tenant, job_id, uri)
        headers = {"Content-Length": str(stream.size)}
        return StreamingResponse(stream.chunks, media_type="application/octet-stream", headers=headers)

    return router


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").partition(";")[0].strip().lower()


async def _submit_multipart(facade: SchedulerFacade, tenant: str, request: Request, limits: LimitSettings) -> JobView:
    """A manifest with its model code, the model handed on as it arrives."""
    try:
        received = await _receive(request, limits)
        try:
            if received.search is not None:
                raise InvalidRequestError("a search file makes a sweep: send it to /v1/sweeps")
            return await facade.submit(
                tenant, received.manifest, source=received.source, image=received.image, model=received.model
            )
        finally:
            if received.model is not None:
                await _drain(received.model)
    except ClientGoneError:
        # Nobody is left to answer: one line, not a traceback per client that went away.
        LOGGER.warning("%s: the client disconnected during the upload; its model upload is aborted", tenant)
        raise


async def _receive(
    request: Request, limits: LimitSettings, extra: Mapping[str, int] | None = None, *, folder: str | None = None
) -> Submission:
    """A multipart submit's text parts, its model to read on; one over the limits refused before it is stored;
    ``folder``: a folder's file parts taken too (the console's)."""
    if declared_too_large(request.headers.get("content-length", ""), limits.max_manifest_bytes, limits.max_model_bytes):
        raise model_too_large(limits.max_model_bytes)
    return await receive_submission(
        request.headers.get("content-type", ""),
        request.stream(),
        max_manifest_bytes=limits.max_manifest_bytes,
        max_model_bytes=limits.max_model_bytes,
        timeouts=BodyTimeouts(limits.upload_idle_s, limits.upload_total_s),
        extra=extra,
        folder=folder,
    )


async def _drain(model: AsyncIterator[bytes]) -> None:
    """Read what is left of a model refused before it was read (the client, told to continue, is sending
    it): the answer then reaches the client instead of a reset connection. Bounded by the model limit."""
    with contextlib.suppress(LearnerkitError):
        async for _chunk in model:
            pass


async def _manifest_of(request: Request, max_bytes: int) -> tuple[str, str, str | None]:
    """The manifest, its file name and the image override from the body, refused (413) as soon as it is known
    to be too large."""
    media_type = _media_type(request)
    is_json = media_type == "application/json"
    if not is_json and media_type not in YAML_TYPES:
        raise _RequestError(
            415, "unsupported_media_type", "send the manifest as application/yaml, JSON or multipart/form-data"
        )
    body = await _body(request, max_bytes * JSON_OVERHEAD + 4096 if is_json else max_bytes)
    if is_json:
        try:
            parsed = SubmitBody.model_validate_json(body)
        except ValidationError as e:
            raise _RequestError(400, "bad_request", f'expected {{"manifest": "<yaml text>"}}: {e}') from e
        if len(parsed.manifest.encode()) > max_bytes:
            raise _too_large(max_bytes)
        return parsed.manifest, parsed.source, parsed.image
    try:
        return body.decode("utf-8"), "manifest.yml", None
    except UnicodeDecodeError as e:
        raise _RequestError(400, "bad_request", f"the manifest is not UTF-8 text: {e}") from e


async def _body(request: Request, cap: int) -> bytes:
    """The body, read only while it stays within ``cap`` bytes: a declared or streamed excess stops at once."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise _too_large(cap)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > cap:
            raise _too_large(cap)
    return bytes(body)


def _too_large(cap: int) -> _RequestError:
    return _RequestError(413, "too_large", f"the manifest is over {cap} bytes, the most this scheduler reads")


class _RequestError(LearnerkitError):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def _learnerkit_error(request: Request, exc: Exception) -> JSONResponse:
    status, code, message = _classify(request, exc)
    body: dict[str, Any] = {"error": code, "message": message}
    headers: dict[str, str] | None = None
    if status == 401:
        headers = {"WWW-Authenticate": "Bearer"}
    elif isinstance(exc, RateLimitedError):
        headers = {"Retry-After": str(max(1, math.ceil(exc.retry_after_s)))}
    elif isinstance(exc, StoreUnavailableError):
        headers = {"Retry-After": str(STORE_RETRY_AFTER_S)}
    if isinstance(exc, ManifestError | SearchFileError):
        body["problems"] = [
            {"file": str(p.path), "line": p.line, "field": format_field_path(p.loc), "message": p.message}
            for p in exc.problems
        ]
    return JSONResponse(body, status_code=status, headers=headers)


def _classify(request: Request, exc: Exception) -> tuple[int, str, str]:
    if isinstance(exc, _RequestError):
        return exc.status, exc.code, str(exc)
    if isinstance(exc, AuthError):
        return 401, "unauthorized", str(exc)
    if isinstance(exc, UnknownSweepError):
        return 404, "not_found", f"no sweep {request.path_params.get('sweep_id', '')!r}"
    if isinstance(exc, UnknownJobError):
        # The API's own words: the facade's message must not tell whether another tenant has this job.
        job_id = request.path_params.get("job_id", "")
        return 404, "not_found", f"no job {job_id!r}"
    if isinstance(exc, UnknownFileError | UnknownMetricError):
        return 404, "not_found", str(exc)
    if isinstance(exc, JobStateError):
        return 409, "conflict", str(exc)
    if isinstance(exc, ManifestTooLargeError | ModelTooLargeError):
        return 413, "too_large", str(exc)
    if isinstance(exc, RateLimitedError):
        return 429, "too_many_requests", str(exc)
    if isinstance(exc, UploadTimeoutError):
        return 408, "timeout", str(exc)
    if isinstance(exc, StoreUnavailableError):
        return 503, "unavailable", str(exc)
    if isinstance(exc, ManifestError):
        return 422, "invalid_manifest", f"{len(exc.problems)} problem(s) in the manifest"
    if isinstance(exc, SearchFileError):
        return 422, "invalid_sweep", f"{len(exc.problems)} problem(s) in the sweep"
    if isinstance(exc, ConfigError) and not isinstance(exc, TokensFileError):
        return 400, "bad_request", str(exc)
    # Its text may name the scheduler's own addresses (etcd, S3, the engine): the log has it, the tenant does not.
    LOGGER.error("%s %s failed: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
    return 500, "internal", "the scheduler failed to answer this request; its operators find why in the scheduler's log"


def _http_error(_request: Request, error: Exception) -> JSONResponse:
    exc = cast(HTTPException, error)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, f"http_{exc.status_code}")
    if isinstance(exc.detail, dict):  # a route's own body (the catalog's refusals name their failed gates)
        return JSONResponse({"error": code, **exc.detail}, status_code=exc.status_code)
    return JSONResponse({"error": code, "message": str(exc.detail)}, status_code=exc.status_code)


def _validation_error(_request: Request, error: Exception) -> JSONResponse:
    exc = cast(RequestValidationError, error)
    details = [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
    message = query_problems(details)
    return JSONResponse({"error": "bad_request", "message": message, "detail": details}, status_code=422)


def _healthz_endpoint(health: HealthCheck | None) -> Callable[[], Awaitable[Response]]:
    async def healthz() -> Response:
        """The API answers and the control loop steps (503 with the reason once it has stalled)."""
        why = health() if health is not None else None
        if why is not None:
            return JSONResponse(Health(status="unhealthy", reason=why).model_dump(), status_code=503)
        return JSONResponse(Health(status="ok").model_dump(exclude_none=True))

    return healthz


def _keys_endpoint(body: SigningKeys) -> Callable[[], Awaitable[SigningKeys]]:
    async def keys() -> SigningKeys:
        """Every public key the platform signed with: the current one first, then those rotated out."""
        return body

    return keys


def _public_key_endpoint(pem: str) -> Callable[[], Awaitable[Response]]:
    async def public_key() -> Response:
        """The platform's public signing key, PEM."""
        return Response(pem, media_type="application/x-pem-file")

    return public_key


def _metrics_endpoint(
    registry: CollectorRegistry, operator_registry: CollectorRegistry | None
) -> Callable[[Request], Awaitable[Response]]:
    async def metrics(request: Request) -> Response:
        """Prometheus text from the scheduler's registry; with an operator's token, the tenants' usage too."""
        text = generate_latest(registry)
        if operator_registry is not None and request.headers.get("authorization"):
            tokens: TokenStore = request.app.state.tokens
            client = request.client.host if request.client else ""
            if await run_in_threadpool(tokens.operator, request.headers["authorization"], client):
                text += generate_latest(operator_registry)
        return Response(text, media_type=CONTENT_TYPE_LATEST)

    return metrics
