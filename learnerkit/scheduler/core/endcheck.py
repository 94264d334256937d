"""A learner's COMPLETED counts only once the runtime confirms its end (issue 27 D12).

The sidecar ends a learner on learner-run's exit record, ``learner.exit``, which the learner's command can write
itself. The sidecar takes the record only once the learner's processes are gone (Docker: its cgroup; Kubernetes:
the pod's shared PID namespace); behind that, on Kubernetes the scheduler cross-checks each learner that reports
COMPLETED against its container as the runtime tells it: while the container runs, the learner has not
completed; once it has ended, the runtime's exit code decides (learner-run exits with the command's own code).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from controller_sidecar.status import ErrorCode, Phase, StatusRecord
from learnerkit.scheduler.backends.protocol import LearnerEnd
from learnerkit.scheduler.core.tracking import Tracked


def completions_to_confirm(tracked: Tracked) -> set[int]:
    """Learners whose sidecar reported COMPLETED this attempt."""
    first = tracked.state.first_sequence
    return {n for n, record in tracked.records.items() if record.sequence >= first and record.phase is Phase.COMPLETED}


def confirmed_records(tracked: Tracked, running: set[int], ended: Mapping[int, LearnerEnd]) -> dict[int, StatusRecord]:
    """The learners' records as the job's status reads them: a COMPLETED whose learner container still runs reads
    as STORING (the learner is not done); one whose container ended with another exit code reads as FAILED, with
    the runtime's code and why."""
    records = dict(tracked.records)
    for n in sorted(completions_to_confirm(tracked)):
        record = records[n]
        if n in running:
            records[n] = replace(record, phase=Phase.STORING)
        elif n in ended and ended[n].exit_code != 0:
            end = ended[n]
            why = " (out of memory)" if end.oom_killed else ""
            records[n] = replace(
                record,
                phase=Phase.FAILED,
                error_code=ErrorCode.LEARNER_FAILED,
                exit_code=end.exit_code,
                message=(
                    f"the learner container ended with exit code {end.exit_code}{why} (the runtime's), though "
                    "learner.exit said completed: the command wrote its own exit record"
                ),
            )
    return records
