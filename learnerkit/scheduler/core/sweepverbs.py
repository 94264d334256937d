"""The sweep verbs the API calls (`SchedulerFacade.submit_sweep` ...), over the sweep driver, and their views."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime

from learnerkit.scheduler.core.sweepdriver import ActiveSweep, SweepDriver
from learnerkit.scheduler.errors import JobStateError
from learnerkit.scheduler.facade import JobView, ParameterView, SweepView, TrialView
from learnerkit.scheduler.jobs.layout import job_location
from learnerkit.scheduler.jobs.submission import SubmitOptions
from learnerkit.scheduler.manifest.model import JobManifest
from learnerkit.scheduler.sweeps.store import SweepStatus

JobVerb = Callable[[str, str], Awaitable[JobView]]
"""(tenant, job_id) -> the job after the verb: the scheduler's `halt`."""
ModelStorer = Callable[[str, JobManifest, str, str, AsyncIterator[bytes] | None, str | None], Awaitable[SubmitOptions]]
"""(tenant, manifest, its file, sweep id, model stream, image) -> the options every trial runs with, after the checks a
job submit makes (the tenant's policy, the image gate, the results store)."""


class SweepVerbs:
    def __init__(self, driver: SweepDriver, halt_job: JobVerb, store_model: ModelStorer) -> None:
        self.driver = driver
        self.halt_job = halt_job
        self.store_model = store_model

    async def submit(
        self,
        tenant: str,
        search_text: str,
        manifest_text: str,
        *,
        search_source: str,
        manifest_source: str,
        image: str | None,
        model: AsyncIterator[bytes] | None,
    ) -> SweepView:
        async def store(manifest: JobManifest, sweep_id: str) -> SubmitOptions:
            return await self.store_model(tenant, manifest, manifest_source, sweep_id, model, image)

        sweep = await self.driver.submit(
            tenant, search_text, search_source, manifest_text, manifest_source, image=image, store_model=store
        )
        return self.view(sweep)

    async def list(self, tenant: str) -> list[SweepView]:
        found = [s for s in self.driver.sweeps.values() if s.record.tenant == tenant]
        return [self.view(s) for s in sorted(found, key=lambda s: s.record.submitted_at)]

    async def get(self, tenant: str, sweep_id: str) -> SweepView:
        return self.view(self.driver.owned(tenant, sweep_id))

    async def halt(self, tenant: str, sweep_id: str) -> SweepView:
        sweep = self.driver.owned(tenant, sweep_id)
        if refused := sweep.state.status.refuses("halt"):
            raise JobStateError(f"sweep {sweep_id} {refused}")
        await self.driver.set_status(sweep, SweepStatus.HALTED, "halted")
        for tracked in self.driver.running_jobs(sweep):
            await self.halt_job(tenant, tracked.state.job_id)
        return self.view(sweep)

    async def resume(self, tenant: str, sweep_id: str) -> SweepView:
        sweep = self.driver.owned(tenant, sweep_id)
        if refused := sweep.state.status.refuses("resume"):
            raise JobStateError(f"sweep {sweep_id} {refused}")
        await self.driver.resume(sweep)
        return self.view(sweep)

    async def cancel(self, tenant: str, sweep_id: str) -> SweepView:
        sweep = self.driver.owned(tenant, sweep_id)
        if refused := sweep.state.status.refuses("cancel"):
            raise JobStateError(f"sweep {sweep_id} {refused}")
        await self.driver.set_status(sweep, SweepStatus.CANCELLED, "cancelled")  # the loop's steps end its trials
        return self.view(sweep)

    def view(self, sweep: ActiveSweep) -> SweepView:
        """The sweep as `sweep status` shows it."""
        spec = sweep.spec
        trials = []
        for index, trial in sorted(sweep.trials.items()):
            record = trial.record
            tracked = self.driver.shared.jobs.get(trial.job_id)
            bucket, prefix = job_location(sweep.manifest, trial.job_id)
            trials.append(
                TrialView(
                    index=index,
                    job_id=trial.job_id,
                    state=record.state.value,
                    rung=record.target + 1,
                    budget=spec.rungs[record.target],
                    results=record.results,
                    reason=sweep.book.explain(index),
                    parameters=dict(trial.parameters),
                    job_status=tracked.state.status.value if tracked is not None else "",
                    freed_bytes=trial.freed_bytes,
                    results_location=f"s3://{bucket}/{prefix}",
                    first_rung=sweep.book.first_rung(index) + 1,
                    lineage=lineage(sweep, index),
                )
            )
        return SweepView(
            sweep_id=sweep.sweep_id,
            tenant=sweep.record.tenant,
            status=sweep.state.status.value,
            reason=sweep.state.reason,
            algorithm=spec.algorithm.name.value,
            metric=spec.objective.metric,
            goal=spec.objective.goal.value,
            unit=spec.budget.unit.value,
            rungs=spec.rungs,
            trials_total=spec.trials,
            concurrency=spec.concurrency,
            submitted_at=datetime.fromtimestamp(sweep.record.submitted_at, UTC).isoformat(timespec="seconds"),
            trials=tuple(trials),
            freed_bytes=sum(t.freed_bytes for t in sweep.trials.values()),
            space=tuple(ParameterView(p.name, p.type.value, p.low, p.high, p.values) for p in spec.space.parameters),
        )


def lineage(sweep: ActiveSweep, index: int) -> tuple[int, ...]:
    """The trials whose checkpoints trial `index` descends from, its parent first (PBT; empty otherwise)."""
    chain: list[int] = []
    parent = sweep.trials[index].parent
    while parent is not None and parent in sweep.trials and parent not in chain:
        chain.append(parent)
        parent = sweep.trials[parent].parent
    return tuple(chain)
