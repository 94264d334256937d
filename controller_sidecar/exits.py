"""The sidecar's exit statuses, shared with the scheduler, which reads a dead sidecar's status to decide its job's
fate (``learnerkit.scheduler.core.liveness`` and ``leaselapse``)."""

from __future__ import annotations

DONE_EXIT = 0
"""The learner ended COMPLETED or HALTED (fenced included: another attempt owns the job)."""
FAILED_EXIT = 1
"""The learner ended FAILED, or the shutdown deadline ran out (an unexpected error: Python's own status too)."""
CONFIG_EXIT = 2
"""A bad setting."""
LEASE_LAPSED_EXIT = 75
"""The sidecar gave up a write it held back because its lease may have lapsed (etcd unanswered past its refresh
deadline): the platform's trouble, not the job's. It reports no final status; the scheduler requeues the job to
resume from its last checkpoint. 75 is ``EX_TEMPFAIL`` of ``sysexits.h``: a temporary failure, worth a retry."""
