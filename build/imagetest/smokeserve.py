"""The smoke check of the model server image (`smoke.kind: serving`, docs/catalog.md): one model served.

The image's smoke script saves a tiny TorchScript model, signs it with a key of its own, serves it over the Open
Inference Protocol v2 and checks `infer` against the model called in-process, a wrong body's 400 and that a
broken signature is refused at load; this check runs it hardened (read-only, no network, non-root).
"""

from __future__ import annotations

from learnerkit_build.imagetest.checks import CheckContext, expect, read_exit
from learnerkit_build.imagetest.containers import LearnerRun, running, wait_exit

RUN_TIMEOUT = 300.0


def check_smoke_serving(ctx: CheckContext) -> str:
    job = ctx.job("smoke-serving")
    command = list(ctx.image.framework.smoke.command)
    ctx.say(f"serving with {ctx.image.name}: {' '.join(command)}")
    with running(LearnerRun(ctx.reference, job, command)) as container:
        status = wait_exit(container, RUN_TIMEOUT)
        logs = container.logs().decode("utf-8", "replace")
    info = read_exit(job)
    expect(status == 0 and info.get("reason") == "completed", f"exit {status}, learner.exit {info}\n{logs[-1200:]}")
    lines = [line for line in logs.splitlines() if line.startswith("smoke: ")]
    return lines[-1].removeprefix("smoke: ") if lines else "served"
