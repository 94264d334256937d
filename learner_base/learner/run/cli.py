"""``learner-run``: the learner image's entrypoint (under ``tini``). Parses nothing itself but ``--health``.

Exit status: the command's (128+N when it died of signal N); 124 when ``start`` never came; 0 when halted
before start; 2 when learner-run could not run the command at all (no command, a bad ``LEARNER_*`` value,
an unwritable directory), in which case ``learner.exit`` says so where it can be written.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from learner.paths import env_path
from learner.run.errors import LearnerRunError
from learner.run.exitfile import ExitRecord, Reason, write_exit_file
from learner.run.paramfile import write_parameters_file
from learner.run.settings import settings_from
from learner.run.supervise import StopSignals, prepare_dirs, run_command, wait_for_start

USAGE_EXIT = 2
HELP = """\
usage: learner-run [--] COMMAND [ARG...]   run COMMAND (no shell) under the learner contract
       learner-run                         run $LEARNER_COMMAND with /bin/bash -c
       learner-run --health                healthcheck: the control and log directories are writable
See docs/learner-contract.md for the control files, LEARNER_* settings and exit reasons.
"""


def _error(message: str) -> None:
    sys.stderr.write(f"learner-run: {message}\n")
    sys.stderr.flush()


def health(environ: Mapping[str, str]) -> int:
    """0 when ``$JOB_STATE_DIR`` and ``$LOG_DIR`` are directories this user can write; cheap, no I/O."""
    for variable in ("JOB_STATE_DIR", "LOG_DIR"):
        directory = env_path(variable, environ)
        if not directory.is_dir():
            _error(f"unhealthy: {variable} {directory} is not a directory")
            return 1
        if not os.access(directory, os.W_OK | os.X_OK):
            _error(f"unhealthy: {variable} {directory} is not writable")
            return 1
    sys.stdout.write("learner-run: healthy\n")
    return 0


def run(argv: Sequence[str], environ: Mapping[str, str]) -> int:
    stop = StopSignals().install()  # first, so that a `docker stop` during setup is not lost
    try:
        settings = settings_from(argv, environ)
        prepare_dirs(settings)
        record = wait_for_start(settings, stop)
        if record is None:
            # After `start`: the sidecar has set the control folder up by then, so the file stays.
            write_parameters_file(settings.state_dir, environ)
            record = run_command(settings, stop)
    except LearnerRunError as e:
        _error(str(e))
        failure = ExitRecord(USAGE_EXIT, Reason.FAILED, error=str(e))
        try:
            write_exit_file(env_path("JOB_STATE_DIR", environ), failure)
        except LearnerRunError as e2:
            _error(str(e2))
        return USAGE_EXIT
    try:
        write_exit_file(settings.state_dir, record)
    except LearnerRunError as e:
        _error(str(e))
    if record.reason is not Reason.COMPLETED:
        detail = f": {record.error}" if record.error else ""
        died = f" ({record.signal})" if record.signal else ""
        _error(f"{record.reason.value}, exit code {record.exit_code}{died}{detail}")
    return record.exit_code


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--health"]:
        return health(os.environ)
    if args in (["--help"], ["-h"]):
        sys.stdout.write(HELP)
        return 0
    return run(args, os.environ)
