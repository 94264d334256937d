"""A starting scheduler's jobs, queue and reservations, rebuilt from etcd; what it no longer owns is removed."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

from learnerkit.common.errors import LearnerkitError
from learnerkit.scheduler.admission.admit import AdmissionState, JobRecord
from learnerkit.scheduler.admission.nodechanges import working_nodes
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.config.policy import SubmitPolicy, check_admissible
from learnerkit.scheduler.core.draining import resume_drains
from learnerkit.scheduler.core.holding import forget_held
from learnerkit.scheduler.core.preempting import resume_preemptions
from learnerkit.scheduler.core.shared import Shared
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.core.transitions import evaluated_job
from learnerkit.scheduler.jobs.attempts import load_attempts
from learnerkit.scheduler.jobs.state import JobStatus
from learnerkit.scheduler.jobs.store import StoredJob
from learnerkit.scheduler.jobs.submission import SubmitOptions
from learnerkit.scheduler.manifest.model import FrameworkCatalog, JobManifest
from learnerkit.scheduler.manifest.parser import parse_manifest
from learnerkit.scheduler.manifest.redact import redact_credentials
from learnerkit.scheduler.sweeps.trialids import trial_of

LOGGER = logging.getLogger(__name__)


async def restore(shared: Shared, instance: str) -> None:
    """Load every job from etcd, re-reserve what admitted jobs hold, and remove the orphans of ``instance``.

    A stored job that can no longer be admitted (a manifest this scheduler refuses) is FAILED with the
    reason instead of stopping the start; one whose records cannot be read is left out, with a warning.
    """
    nodes = await asyncio.to_thread(shared.backend.nodes)
    records: list[JobRecord] = []
    for stored in await shared.store.load_all():
        ended = stored.state.stage is Stage.DONE and not stored.state.status.resumable
        # A sweep's trial has the rounds its sweep began, never one of its own at a pause.
        trial = trial_of(stored.state.job_id) is not None
        evaluations = shared.evaluations
        if (
            ended
            and not stored.credentials_deleted
            and not await evaluations.keeps_credentials(stored, recorded_only=trial)
        ):
            # Ended for good before its credentials were deleted (a crash between the two writes, an older scheduler).
            await shared.store.delete_credentials(stored.state.job_id, stored.manifest_text, stored.source)
            stored = replace(stored, manifest_text=redact_credentials(stored.manifest_text), credentials_deleted=True)
        try:
            tracked = await _restore(shared, stored)
        except (KeyError, ValueError, TypeError, AttributeError) as e:  # one job's records never stop a start
            LOGGER.warning(
                "job %s: its stored spec cannot be used (%s: %s); it is left out",
                stored.state.job_id,
                type(e).__name__,
                e,
            )
            continue
        if tracked is None:
            continue
        tracked.attempts = await load_attempts(shared.store, stored.state.job_id)
        shared.jobs[stored.state.job_id] = tracked
        if tracked.state.stage is not Stage.DONE:
            records.append(_admission_record(tracked))
        elif tracked.state.status is JobStatus.COMPLETED:
            await evaluations.load(evaluated_job(tracked, shared), tracked.state.attempt, recorded_only=trial)
    # A job still running on a node not listed now (cordoned, not ready) keeps its reservation there.
    shared.admission = AdmissionState.rebuild(records, working_nodes(nodes, {}, records), shared.options.policy)
    running = {job_id for job_id, tracked in shared.jobs.items() if tracked.active}
    await resume_preemptions(shared)
    await resume_drains(shared)
    for orphan in await asyncio.to_thread(shared.backend.job_ids, instance) - running:
        LOGGER.warning("removing orphaned job %s from the backend", orphan)
        await asyncio.to_thread(shared.backend.teardown, orphan)
    await forget_held(shared)
    LOGGER.info("rebuilt %d jobs (%d running) from etcd", len(shared.jobs), len(running))


async def _restore(shared: Shared, stored: StoredJob) -> Tracked | None:
    """The stored job as tracked; one that cannot be admitted is FAILED, and shown if its manifest allows."""
    options = SubmitOptions.from_raw(stored.spec.get("submission"))
    policy = shared.options.submit_policy
    try:
        manifest = _admissible(stored, shared.options.catalog, policy, options)
        if stored.credentials_deleted:
            manifest = manifest.without_credentials()
        return Tracked(stored.state, manifest, stored.manifest_text, stored.source, options)
    except LearnerkitError as e:
        why = str(e)
    state = stored.state
    if state.stage is not Stage.DONE:
        reason = f"not admitted after a scheduler restart: {why}"
        failed = state.evolve(status=JobStatus.FAILED, stage=Stage.DONE, reason=reason, nodes=(), admitted_at=None)
        state = await shared.store.save(failed)
        await shared.store.trim(state.job_id)
        LOGGER.warning("job %s: %s", state.job_id, reason)
    try:
        shown = _admissible(stored, None, policy, options)
        if stored.credentials_deleted:
            shown = shown.without_credentials()
    except LearnerkitError:
        LOGGER.warning("job %s: its stored manifest cannot be shown; it is left out", state.job_id)
        return None
    return Tracked(state, shown, stored.manifest_text, stored.source, options)


def _admissible(
    stored: StoredJob, catalog: FrameworkCatalog | None, policy: SubmitPolicy, options: SubmitOptions
) -> JobManifest:
    text, source, tenant = stored.manifest_text, stored.source, stored.state.tenant
    # The default results store the job was submitted with, whatever the setting is now: its outputs stay found.
    defaults = replace(policy.defaults, results_bucket=options.results_bucket)
    manifest = parse_manifest(text, source, catalog, defaults=defaults, image=options.image, tenant=tenant)
    check_admissible(manifest, policy, source)
    return manifest


def _admission_record(tracked: Tracked) -> JobRecord:
    state = tracked.state
    return JobRecord(
        tracked.admission_job(),
        state.stage,
        state.nodes,
        state.admitted_at,
        state.timeouts,
        state.not_before,
        state.reason,
    )
