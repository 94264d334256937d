"""A job's stored outputs fetched through the scheduler's facade into a folder as `job download --what all`
leaves one, for the catalog to verify and register (the REST route and the manifest's `catalog:` field)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from learnerkit.scheduler.errors import JobStateError
from learnerkit.scheduler.facade import JobView, SchedulerFacade, StoreKeys

REGISTRABLE = "COMPLETED"


async def fetch_job(
    facade: SchedulerFacade, tenant: str, job_id: str, folder: Path, lent: StoreKeys | None = None
) -> JobView:
    """Every file the job stored but its checkpoints (its provenance names none) under ``folder``; another
    tenant's job is not found (the facade's scoping), a job not COMPLETED or not yet signed is `JobStateError`.
    ``lent``: the tenant's keys of the job's results store, for a job whose own the scheduler deleted."""
    view = await facade.get(tenant, job_id)
    if view.status != REGISTRABLE:
        raise JobStateError(f"job {job_id} is {view.status}: only a {REGISTRABLE} job's model is registered")
    stored = await facade.outputs(tenant, job_id, what="all", lent=lent)
    if not any(item.kind == "provenance" for item in stored):
        raise JobStateError(
            f"job {job_id} has no provenance yet: the scheduler writes it just after the job ends (its log says why "
            "when it does not: no signing key, or the results store refused it)"
        )
    for item in stored:
        if item.kind == "checkpoints":
            continue
        target = folder / item.path
        if not target.resolve().is_relative_to(folder.resolve()):
            raise JobStateError(f"job {job_id}: stored path {item.path!r} leaves the job's folder")
        stream = await facade.open_output(tenant, job_id, item.path, lent=lent)
        await asyncio.to_thread(_write, target, stream.chunks)
    return view


def _write(target: Path, chunks: Any) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("wb") as out:
        for chunk in chunks:
            out.write(chunk)


async def trial_of(facade: SchedulerFacade, view: JobView) -> dict[str, Any] | None:
    """The sweep trial the job ran and its rung, from the scheduler's sweep record; None for a job on its own."""
    if view.sweep is None:
        return None
    sweep = await facade.get_sweep(view.tenant, view.sweep.sweep_id)
    trial = next((t for t in sweep.trials if t.index == view.sweep.trial), None)
    return {
        "sweep": view.sweep.sweep_id,
        "trial": view.sweep.trial,
        "job": view.job_id,
        "rung": trial.rung if trial is not None else None,
    }
