"""The API's views of a tracked job."""

from __future__ import annotations

from controller_sidecar.status import Phase
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.core.verdicts import model_verdict
from learnerkit.scheduler.evaluations.record import EvaluationRound
from learnerkit.scheduler.facade import AttemptView, EvaluationView, JobView, LearnerView, SweepOfJob
from learnerkit.scheduler.jobs.attempts import Attempt
from learnerkit.scheduler.jobs.layout import outputs_prefix
from learnerkit.scheduler.sweeps.trialids import trial_of


def job_view(tracked: Tracked, evaluated: EvaluationRound | None = None, *, listing: bool = False) -> JobView:
    """``evaluated``: the job's latest evaluation round, for the model's verdict and (unless ``listing``) each
    evaluation's outcome."""
    state, manifest = tracked.state, tracked.manifest
    ended = state.status.terminal and state.stage is Stage.DONE
    learners = []
    for n in range(1, manifest.resources.learners + 1):
        record = tracked.records.get(n)
        current = record if record is not None and record.sequence >= state.first_sequence else None
        status = current.phase.value if current else Phase.QUEUED.value
        message = current.message if current else ""
        if ended and (current is None or not current.phase.terminal):
            # Torn down with the job before it reported an end: it reads as the job ended, not as still running.
            status, message = state.status.value, f"stopped: the job is {state.status.value}"
        learners.append(
            LearnerView(
                learner_id=n,
                status=status,
                message=message,
                exit_code=current.exit_code if current else None,
                metrics=dict(tracked.metrics.get(n, {})),
                alive=n in tracked.alive,
            )
        )
    bucket, prefix = outputs_prefix(manifest, state.job_id, state.attempt, 1)
    of = trial_of(state.job_id)
    return JobView(
        job_id=state.job_id,
        tenant=state.tenant,
        name=state.name,
        status=state.status.value,
        reason=state.reason,
        submitted_at=state.submitted_at_iso,
        updated_at=state.updated_at,
        priority=manifest.extensions.priority,
        gpus=manifest.resources.gpus * manifest.resources.learners,
        learners=tuple(learners),
        restarts=state.restarts,
        results=f"s3://{bucket}/{prefix.rsplit('learner-1/', 1)[0]}",
        evaluations=() if evaluated is None or listing else evaluation_views(evaluated),
        # A sweep's trial has no round of its own planned: its sweep evaluates the best trial once it is done.
        model=model_verdict(state.status, bool(manifest.evaluations) and of is None, evaluated),
        attempts=tuple(attempt_view(a) for a in tracked.attempts),
        sweep=SweepOfJob(of.sweep_id, of.trial) if of is not None else None,
    )


def evaluation_views(evaluated: EvaluationRound) -> tuple[EvaluationView, ...]:
    return tuple(
        EvaluationView(o.name, o.kind, o.outcome, o.message, o.report, evaluated.judges(o.name))
        for o in evaluated.outcomes
    )


def attempt_view(attempt: Attempt) -> AttemptView:
    return AttemptView(
        number=attempt.number,
        nodes=attempt.nodes,
        started_at=attempt.started_at,
        ended_at=attempt.ended_at,
        ended_by=attempt.ended_by.value if attempt.ended_by else None,
        reason=attempt.reason,
        resumed_from=attempt.resumed_from,
        checkpoint_digest=attempt.checkpoint_digest,
        work_lost_s=attempt.work_lost_s,
        steps_lost=attempt.steps_lost,
    )
