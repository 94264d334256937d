"""The manifest's ``catalog:`` field carried out: once a COMPLETED job's evaluation round is signed, the scheduler
(never the learner) registers the job's model in the model catalog when every evaluation of the round passed,
and moves the alias the field names; either way the job's status says what happened (its reason, and so its
history's entry). docs/catalog.md, "Registered by the scheduler"."""

from __future__ import annotations

import asyncio
import logging
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from securesystemslib.signer import Signer

from learnerkit.common.errors import LearnerkitError
from learnerkit.scheduler.catalog.fromjob import fetch_job, trial_of
from learnerkit.scheduler.catalog.service import move_alias
from learnerkit.scheduler.catalog.versions import Store, register
from learnerkit.scheduler.evaluations.plan import EvaluatedJob
from learnerkit.scheduler.evaluations.record import EvaluationRound
from learnerkit.scheduler.facade import SchedulerFacade
from learnerkit.scheduler.manifest.catalogfield import CatalogSpec

LOGGER = logging.getLogger(__name__)
Registrar = Callable[[str, str, CatalogSpec, Path, "Mapping[str, Any] | None"], str]
"""(tenant, job id, the field, the job's folder, its sweep trial) -> what was registered (``NAME@sha256:...``,
and the alias moved); blocking; raises a `LearnerkitError` saying why not."""
BY = "the scheduler (the job's catalog: field)"
SETTING = "LEARNERKIT_CATALOG_REGISTRY"
Record = Callable[[str, str], Awaitable[None]]
"""(job id, reason): the job's status takes the reason (and its history an entry)."""


def catalog_registrar(registry: str, signer: Signer) -> Registrar:
    """Registers into the catalog's registry, checked with the platform's key that signed the job, and moves the
    alias with it, on the catalog's proof like any move."""
    keys = [signer.public_key]

    def run(tenant: str, job_id: str, spec: CatalogSpec, folder: Path, trial: Mapping[str, Any] | None) -> str:
        store = Store(registry, tenant)
        version = register(store, spec.name, folder, keys, None, trial, (tenant, job_id), signer).version
        if spec.alias is None:
            return f"{spec.name}@{version}"
        at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        move_alias(store, spec.name, spec.alias, version, keys, signer, BY, at)
        return f"{spec.name}@{version}, alias {spec.alias}"

    return run


class ModelRegistering:
    def __init__(
        self,
        facade: SchedulerFacade,
        tenant_of: Callable[[str], str | None],
        record: Record,
        registrar: Registrar | None,
    ) -> None:
        """``facade``: the scheduler, whose job outputs are read as the API reads them; ``tenant_of``: a tracked
        job's tenant (None: forgotten); ``registrar``: None where the scheduler has no catalog."""
        self.facade = facade
        self.tenant_of = tenant_of
        self.record = record
        self.registrar = registrar

    async def round_signed(self, job: EvaluatedJob, settled: EvaluationRound) -> None:
        """After the round's statement is stored: register, or say why not, for a job whose manifest asks."""
        spec = job.manifest.catalog
        tenant = self.tenant_of(job.job_id)
        if spec is None or tenant is None:
            return
        reason = await self._outcome(tenant, job.job_id, spec, settled)
        LOGGER.info("job %s: %s", job.job_id, reason)
        await self.record(job.job_id, reason)

    async def _outcome(self, tenant: str, job_id: str, spec: CatalogSpec, settled: EvaluationRound) -> str:
        missed = [f"{o.name} {o.outcome}" for o in settled.outcomes if o.outcome != "passed"]
        if missed:
            return (
                f"model not registered as {spec.name}: evaluation round {settled.round} did not pass "
                f"({', '.join(missed)})"
            )
        if self.registrar is None:
            return f"model not registered as {spec.name}: this scheduler has no model catalog ({SETTING})"
        registrar = self.registrar
        try:
            with tempfile.TemporaryDirectory(prefix="learnerkit-register-") as scratch:
                folder = Path(scratch)
                view = await fetch_job(self.facade, tenant, job_id, folder)
                trial = await trial_of(self.facade, view)
                # The alias moves as any move, one at a time; without one, no move: no lock to wait for.
                held: AbstractAsyncContextManager[None] = nullcontext()
                if spec.alias is not None:
                    held = self.facade.hold_model(tenant, spec.name, BY)
                async with held:
                    done = await asyncio.to_thread(registrar, tenant, job_id, spec, folder, trial)
        except LearnerkitError as e:
            return f"model not registered as {spec.name}: {e}"
        return f"model registered: {done}"
