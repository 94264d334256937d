"""Contract checks run against a built learner image: hardening and every learner-run behaviour.

Each check returns a one-line detail on success and raises `CheckFailure` with the evidence otherwise.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from learnerkit.common.engine import engine
from learnerkit_build.imagetest.containers import LearnerRun, make_job_folder, output_of, running, wait_exit, wait_until
from learnerkit_build.recipes.spec import ImageSpec

PY = "python3"


class CheckFailure(Exception):
    """A check ran and the image did not behave; the message is the evidence."""


class CheckSkipped(Exception):
    """A check that cannot run here (e.g. GPU training without GPUs); the message is the reason."""


@dataclass(frozen=True)
class CheckContext:
    image: ImageSpec
    reference: str
    scratch: Path
    say: Callable[[str], None]
    gpus: bool = False
    """`image test --gpus`: a cuda image's probe and training get the engine's GPUs."""

    def job(self, name: str, started: bool = True) -> Path:
        folder = make_job_folder(Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.scratch)))
        if started:
            (folder / "control" / "start").write_text("", encoding="utf-8")
        return folder


def read_exit(job: Path) -> dict[str, object]:
    path = job / "control" / "learner.exit"
    if not path.exists():
        raise CheckFailure(
            f"no control/learner.exit was written; control/ holds {sorted(p.name for p in path.parent.iterdir())}"
        )
    return dict(json.loads(path.read_text(encoding="utf-8")))


def expect(condition: bool, evidence: str) -> None:
    if not condition:
        raise CheckFailure(evidence)


def check_non_root(ctx: CheckContext) -> str:
    user = engine().images.get(ctx.reference).attrs["Config"].get("User") or ""
    expect(user not in ("", "0", "root") and not user.startswith(("0:", "root:")), f"image USER is {user!r}")
    status, out = output_of(LearnerRun(ctx.reference, ctx.job("nonroot"), ["id", "-u"]))
    expect(
        status == 0 and out.strip().splitlines()[-1] == "1000",
        f"`id -u` gave {out.strip()!r} (exit {status})",
    )
    return f"USER {user}, runs as uid 1000"


def check_arbitrary_uid(ctx: CheckContext) -> str:
    job = ctx.job("anyuid")
    script = "touch /job/results/ok /job/checkpoints/ok /job/logs/ok /tmp/ok && echo wrote"
    status, out = output_of(LearnerRun(ctx.reference, job, ["bash", "-c", script], user="123456:0"))
    expect(
        status == 0 and (job / "results" / "ok").exists(),
        f"as uid 123456 in group 0: exit {status}: {out[-300:]}",
    )
    return "uid 123456 (group 0) writes /job/* and /tmp"


def check_tini_pid1(ctx: CheckContext) -> str:
    status, out = output_of(LearnerRun(ctx.reference, ctx.job("tini"), ["bash", "-c", "tr '\\0' ' ' </proc/1/cmdline"]))
    pid1 = out.strip().splitlines()[-1] if out.strip() else ""
    expect(status == 0 and "tini" in pid1, f"PID 1 is {pid1!r} (exit {status})")
    return f"PID 1: {pid1}"


def check_no_setuid(ctx: CheckContext) -> str:
    run = LearnerRun(
        ctx.reference,
        ctx.job("setuid"),
        ["/", "-xdev", "-perm", "/6000", "-type", "f"],
        entrypoint=["find"],
        inspection=True,
    )
    status, out = output_of(run)
    expect(status == 0 and not out.strip(), f"setuid/setgid files: {out.strip()[:500]} (exit {status})")
    return "no setuid/setgid files"


def check_read_only_root(ctx: CheckContext) -> str:
    script = (
        "if touch /opt/learner/x 2>/dev/null || touch /etc/x 2>/dev/null; then echo WRITABLE; exit 1; fi; "
        "touch /tmp/t /job/results/t"
    )
    status, out = output_of(LearnerRun(ctx.reference, ctx.job("rofs"), ["bash", "-c", script]))
    expect(status == 0, f"read-only root: exit {status}: {out[-300:]}")
    return "root FS read-only; /tmp and /job writable"


def check_clean_image(ctx: CheckContext) -> str:
    script = (
        "for c in gcc cc g++ make; do command -v $c && exit 3; done; "
        '[ -z "$(ls -A /var/lib/apt/lists 2>/dev/null)" ] || exit 4; [ ! -e /root/.cache ] || exit 5; '
        '[ -z "$(ls -A /var/cache/apt/archives 2>/dev/null | grep -vx -e partial -e lock)" ] || exit 6; echo clean'
    )
    status, out = output_of(LearnerRun(ctx.reference, ctx.job("clean"), ["bash", "-c", script], inspection=True))
    reasons = {
        3: "a compiler is on PATH",
        4: "apt lists left",
        5: "/root/.cache left",
        6: "apt archives left",
    }
    expect(status == 0, f"{reasons.get(status, 'exit ' + str(status))}: {out.strip()[-200:]}")
    return "no compilers, apt lists, archives or pip caches"


def check_waits_for_start(ctx: CheckContext) -> str:
    job = ctx.job("start", started=False)
    with running(LearnerRun(ctx.reference, job, ["touch", "/job/results/ran"])) as container:
        ran_early = wait_until(lambda: (job / "results" / "ran").exists(), timeout=1.5)
        expect(not ran_early, "the command ran before control/start existed")
        (job / "control" / "start").write_text("", encoding="utf-8")
        status = wait_exit(container, 60)
    info = read_exit(job)
    expect(
        status == 0 and info.get("reason") == "completed" and (job / "results" / "ran").exists(),
        f"after start: exit {status}, learner.exit {info}",
    )
    return "command ran only after control/start; reason completed"


def check_tee_and_exit_code(ctx: CheckContext) -> str:
    job = ctx.job("tee")
    payload = (
        "import sys; sys.stdout.buffer.write(b'out-line\\n\\xff\\xfe raw\\n'); "
        "sys.stderr.write('err-line\\n'); sys.exit(3)"
    )
    with running(LearnerRun(ctx.reference, job, [PY, "-c", payload])) as container:
        status = wait_exit(container, 60)
        logs = container.logs()
    log = (job / "logs" / "learner.log").read_bytes()
    info = read_exit(job)
    expect(b"out-line\n\xff\xfe raw\n" in log and b"err-line" in log, f"learner.log holds {log[:200]!r}")
    expect(b"out-line" in logs, "the command's output did not reach the container log")
    expect(
        status == 3 and info.get("exit_code") == 3 and info.get("reason") == "failed",
        f"exit {status}, learner.exit {info}",
    )
    expect(not [p for p in (job / "control").iterdir() if p.name.startswith(".")], "temp files left in control/")
    return "stdout+stderr teed byte-exact to learner.log; exit 3 -> reason failed"


HALTABLE = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *a: (open('/job/results/halted', 'w').close(), sys.exit(0)))\n"
    "open('/job/results/running', 'w').close()\n"
    "while True: time.sleep(0.05)\n"
)
STUBBORN = (
    "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "open('/job/results/running', 'w').close()\nwhile True: time.sleep(0.05)\n"
)


def _halt_run(ctx: CheckContext, name: str, program: str, env: dict[str, str]) -> tuple[int, dict[str, object], Path]:
    job = ctx.job(name)
    with running(LearnerRun(ctx.reference, job, [PY, "-c", program], env=env)) as container:
        expect(
            wait_until(lambda: (job / "results" / "running").exists(), timeout=60),
            "the command never started",
        )
        (job / "control" / "halt").write_text("", encoding="utf-8")
        status = wait_exit(container, 60)
    return status, read_exit(job), job


def check_halt(ctx: CheckContext) -> str:
    status, info, job = _halt_run(ctx, "halt", HALTABLE, {})
    expect((job / "results" / "halted").exists(), "the command never saw SIGTERM")
    expect(info.get("reason") == "halted" and status == 0, f"exit {status}, learner.exit {info}")
    return "control/halt -> SIGTERM -> command checkpointed and exited -> reason halted"


def check_halt_timeout(ctx: CheckContext) -> str:
    status, info, _ = _halt_run(ctx, "halt-timeout", STUBBORN, {"LEARNER_HALT_GRACE": "1"})
    expect(
        info.get("reason") == "halt_timeout" and info.get("signal") == "SIGKILL" and status == 137,
        f"exit {status}, learner.exit {info}",
    )
    return "a command ignoring SIGTERM is killed after the grace -> reason halt_timeout, 137"


def check_scrubbed_env(ctx: CheckContext) -> str:
    env = {
        "AWS_SECRET_ACCESS_KEY": "s3cr3t",
        "ETCD_PASSWORD": "pw",
        "LEARNERKIT_S3_SECRET": "x",
        "AWS_ACCESS_KEY_ID": "AKIA",
        "JOB_ID": "job-1",
        "LEARNER_ID": "1",
    }
    status, out = output_of(LearnerRun(ctx.reference, ctx.job("env"), ["env"], env=env))
    leaked = [name for name in env if name.startswith(("AWS_", "ETCD_", "LEARNERKIT_")) and f"{name}=" in out]
    expect(status == 0 and not leaked, f"leaked to the command: {leaked} (exit {status})")
    expect(
        "JOB_ID=job-1" in out and "DATA_DIR=/job/data" in out,
        "JOB_ID or DATA_DIR missing from the command's env",
    )
    return "credentials scrubbed; JOB_ID and DATA_DIR kept"
