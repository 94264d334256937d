"""The catalog's routes: ``/v1/models`` (docs/catalog.md), read and verify, scoped to the token's tenant as the
jobs' routes are: a tenant's models are the repositories ``<tenant>/*`` of the catalog's registry."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, HTTPException
from pydantic import BaseModel, Field
from securesystemslib.signer import Signer

from controller_sidecar.errors import PermanentError
from learnerkit.common.keyring import PublishedKey
from learnerkit.common.signing import public_key_from_pem
from learnerkit.scheduler.catalog.errors import CatalogError, ConflictError, NotFoundError, RefusedError, StoreError
from learnerkit.scheduler.catalog.fromjob import fetch_job, trial_of
from learnerkit.scheduler.catalog.names import Reference, check_name
from learnerkit.scheduler.catalog.service import history, lineage_of, move_alias, verify
from learnerkit.scheduler.catalog.versions import Store, Version, models, register, version_digests
from learnerkit.scheduler.errors import UnknownJobError
from learnerkit.scheduler.facade import SchedulerFacade, StoreKeys


class AliasBody(BaseModel):
    version: str
    """The version to move the alias to: ``sha256:...``."""


class LentKeys(BaseModel):
    access_key: str
    secret_key: str = Field(repr=False)


class RegisterBody(BaseModel):
    job: str
    """The COMPLETED job of the token's tenant whose model becomes a version."""
    parent: str | None = None
    """The version it was fine-tuned from: ``NAME@sha256:...``."""
    store_keys: LentKeys | None = None
    """The tenant's keys of the job's results store, for this read only: a scheduler that restarted since the job
    ended no longer holds the job's own (docs/security.md). Never stored."""


def models_router(
    facade: SchedulerFacade,
    registry: str | None,
    keys: Sequence[PublishedKey],
    signer: Signer | None,
    tenant_of: Callable[..., Awaitable[str]],
    responses: dict[Any, Any],
) -> APIRouter:
    """``facade``: the scheduler, whose jobs' stored outputs are registered; ``registry``: the catalog's store
    (``host:port``; None: the scheduler has none, every route answers 404 saying so); ``keys``: the platform's
    published keys, that verify checks with; ``signer``: the platform's, that signs alias moves (None: moves
    answer 404)."""
    router = APIRouter(prefix="/v1", tags=["models"])
    ring = [public_key_from_pem(k.pem.encode(), f"key {k.keyid}") for k in keys]

    def store(tenant: str) -> Store:
        if registry is None:
            raise HTTPException(404, "this scheduler has no model catalog (set LEARNERKIT_CATALOG_REGISTRY)")
        return Store(registry, tenant)

    def answer(call: Callable[[], Any]) -> Any:
        try:
            return call()
        except NotFoundError as e:
            raise HTTPException(404, str(e)) from e
        except RefusedError as e:
            raise HTTPException(409, {"error": "refused", "message": str(e), "failed": e.failed}) from e
        except ConflictError as e:  # the alias log changed under the move: the same code as a busy lock's
            raise HTTPException(409, {"error": "conflict", "message": str(e)}) from e
        except StoreError as e:
            raise HTTPException(503, str(e)) from e
        except CatalogError as e:
            raise HTTPException(400, str(e)) from e

    @router.get("/models", responses=responses)
    def list_models(tenant: str = Depends(tenant_of)) -> list[dict[str, Any]]:
        """The tenant's models, each with its versions (manifest digests)."""
        found = store(tenant)
        listed: list[dict[str, Any]] = answer(
            lambda: [{"name": n, "versions": version_digests(found, n)} for n in models(found)]
        )
        return listed

    @router.post("/models/{name}/versions", responses=responses)
    async def register_job(name: str, body: RegisterBody, tenant: str = Depends(tenant_of)) -> dict[str, Any]:
        """Store a COMPLETED job's model as a version of ``name``: the scheduler reads the job's outputs from its
        results store and registers them only when they verify with the platform's keys (400 naming what does
        not); another tenant's job is no such job (404), a job not COMPLETED 409."""
        found = store(tenant)
        with tempfile.TemporaryDirectory(prefix="learnerkit-register-") as scratch:
            try:
                lent = StoreKeys(body.store_keys.access_key, body.store_keys.secret_key) if body.store_keys else None
                view = await fetch_job(facade, tenant, body.job, Path(scratch), lent)
            except UnknownJobError as e:
                raise HTTPException(404, f"no job {body.job!r}") from e
            except PermanentError as e:
                if body.store_keys is None:
                    raise
                raise HTTPException(400, f"job {body.job}: its results store refused the keys lent: {e}") from e
            trial = await trial_of(facade, view)
            version: Version = await asyncio.to_thread(
                answer,
                lambda: register(found, name, Path(scratch), ring, body.parent, trial, (tenant, body.job), signer),
            )
        return _row(version)

    @router.get("/models/{name}/versions/{reference}", responses=responses)
    def show_version(name: str, reference: str, tenant: str = Depends(tenant_of)) -> dict[str, Any]:
        """A version by digest (``sha256:...``) or alias: its files, job and lineage."""
        found = store(tenant)
        version = answer(lambda: lineage_of(found, str(Reference.parse(f"{name}@{reference}"))))
        return _row(version)

    @router.get("/models/{name}/history", responses=responses)
    def alias_history(name: str, tenant: str = Depends(tenant_of)) -> list[dict[str, Any]]:
        """Every alias move, oldest first, with each entry's check."""
        found = store(tenant)
        moves, checks = answer(lambda: history(found, name, ring))
        return [{**m, "check": c.state.value, "detail": c.detail} for m, c in zip(moves, checks, strict=True)]

    @router.get("/models/{name}/verify/{reference}", responses=responses)
    def verify_version(name: str, reference: str, tenant: str = Depends(tenant_of)) -> dict[str, Any]:
        """The version or alias checked again with the platform's keys (`model verify`)."""
        found = store(tenant)
        result: dict[str, Any] = answer(lambda: verify(found, f"{name}@{reference}", ring).to_dict())
        return result

    @router.post("/models/{name}/aliases/{alias}", responses=responses)
    async def move(name: str, alias: str, body: AliasBody, tenant: str = Depends(tenant_of)) -> dict[str, Any]:
        """Point the alias at the version, only when it proves every gate (409 naming each failed check
        otherwise); the move is signed with the platform's key into the model's alias log, under the model's
        lock: two moves at once run one after the other (409 when the other holds it too long)."""
        found = store(tenant)
        if signer is None:
            raise HTTPException(404, "this scheduler does not sign alias moves (no signing key given to the API)")
        answer(lambda: check_name(name))
        by = f"tenant {tenant}"
        async with facade.hold_model(tenant, name, by):
            at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            moved: dict[str, Any] = await asyncio.to_thread(
                answer, lambda: move_alias(found, name, alias, body.version, ring, signer, by, at)
            )
        return moved

    return router


def _row(version: Version) -> dict[str, Any]:
    return {
        "name": version.name,
        "version": version.version,
        "job": version.job,
        "attested": version.attested,
        "created": version.created,
        "files": [vars(b) for b in version.files],
        "lineage": version.lineage,
    }
