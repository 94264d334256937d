"""The smoke check of an evaluator image (`smoke.kind: evaluation`, docs/evaluations.md): one real evaluation.

The image's smoke script makes a tiny model and data set in the job folder, runs the image's evaluator on them and
checks the report itself; this check runs it hardened (read-only, no network, non-root) and reads the reports.
"""

from __future__ import annotations

import json
from pathlib import Path

from learnerkit_build.imagetest.checks import CheckContext, expect, read_exit
from learnerkit_build.imagetest.containers import LearnerRun, running, wait_exit

RUN_TIMEOUT = 600.0
REPORTS = Path("results") / "evaluations"


def check_smoke_evaluation(ctx: CheckContext) -> str:
    job = ctx.job("smoke-evaluation")
    command = list(ctx.image.framework.smoke.command)
    ctx.say(f"evaluating with {ctx.image.name}: {' '.join(command)}")
    with running(LearnerRun(ctx.reference, job, command)) as container:
        status = wait_exit(container, RUN_TIMEOUT)
        logs = container.logs().decode("utf-8", "replace")
    info = read_exit(job)
    expect(status == 0 and info.get("reason") == "completed", f"exit {status}, learner.exit {info}\n{logs[-1200:]}")
    reports = sorted((job / REPORTS).glob("*.json"))
    expect(bool(reports), f"no report under {REPORTS}\n{logs[-800:]}")
    verdicts = [f"{path.stem} {json.loads(path.read_text(encoding='utf-8'))['verdict']}" for path in reports]
    return "reports: " + ", ".join(verdicts)
