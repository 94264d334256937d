"""The smoke check: real training in the image, halted mid-run, resumed to the end from its checkpoint."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from learnerkit_build.imagetest.checks import CheckContext, CheckFailure, CheckSkipped, expect, read_exit
from learnerkit_build.imagetest.containers import GpusRefused, LearnerRun, running, wait_exit, wait_until
from learnerkit_build.imagetest.smokedata import write_smoke_dataset
from learnerkit_build.imagetest.smokeeval import check_smoke_evaluation
from learnerkit_build.imagetest.smokeserve import check_smoke_serving

PACE_SECONDS = "0.2"
"""Minimum seconds per step in the first run, so that the halt lands in the middle of training."""
RUN_TIMEOUT = 600.0
GPU_DEVICES = ("cuda", "gpu")
"""How smoke scripts name a GPU in summary.json's `device` (`cuda:0`, `gpu:0`); anything else is the CPU."""


def smoke_command(ctx: CheckContext) -> list[str]:
    smoke = ctx.image.framework.smoke
    return [part.format(steps=smoke.steps, checkpoint_every=smoke.checkpoint_every) for part in smoke.command]


def read_metrics(job: Path) -> list[dict[str, Any]]:
    path = job / "logs" / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


class MetricsFollower:
    """Shows metrics lines as the learner writes them."""

    def __init__(self, ctx: CheckContext, job: Path) -> None:
        self.ctx, self.job, self.shown = ctx, job, 0

    def poll(self) -> bool:
        rows = read_metrics(self.job)
        for row in rows[self.shown :]:
            values = "  ".join(f"{k}={v:.4f}" for k, v in row.get("values", {}).items())
            self.ctx.say(f"step {row['step']:>4}  {values}")
        self.shown = len(rows)
        return False


def has_exited(container: Any) -> bool:
    container.reload()
    return container.status in ("exited", "dead")


def latest_checkpoint_step(job: Path) -> int | None:
    steps = [int(p.name.split("-", 1)[1]) for p in (job / "checkpoints").glob("ckpt-*")]
    return max(steps, default=None)


def check_smoke(ctx: CheckContext) -> str:
    """cpu images train on the CPU; cuda images train on the engine's GPUs (`--gpus`), and only there.
    An evaluator image's smoke run is one evaluation instead (`smoke.kind: evaluation`), a model server's one
    served model (`smoke.kind: serving`)."""
    if ctx.image.framework.smoke.kind == "evaluation":
        return check_smoke_evaluation(ctx)
    if ctx.image.framework.smoke.kind == "serving":
        return check_smoke_serving(ctx)
    on_gpu = ctx.image.variant.accelerator == "cuda"
    if on_gpu and not ctx.gpus:
        raise CheckSkipped(
            "GPU training not run: no GPUs asked for (`image test --gpus` on a host whose engine has NVIDIA GPUs); "
            "the CUDA build and its libraries are checked up to the driver by cuda-content and shared-libraries"
        )
    try:
        return _train(ctx, on_gpu)
    except GpusRefused as e:
        raise CheckSkipped(f"GPU training not run: --gpus asked for GPUs, but {e}") from e


def _train(ctx: CheckContext, on_gpu: bool) -> str:
    smoke = ctx.image.framework.smoke
    job = ctx.job("smoke")
    write_smoke_dataset(job / "data")
    follower = MetricsFollower(ctx, job)
    halt_after = smoke.checkpoint_every

    ctx.say(f"training {ctx.image.name} for {smoke.steps} steps; halting after step {halt_after}")
    pace = {"SMOKE_MIN_STEP_SECONDS": PACE_SECONDS}
    first = LearnerRun(ctx.reference, job, smoke_command(ctx), env=pace, gpus=on_gpu)
    with running(first) as container:
        reached = wait_until(
            lambda: follower.poll() or (latest_checkpoint_step(job) or 0) >= halt_after,
            timeout=RUN_TIMEOUT,
            interval=0.1,
        )
        expect(
            reached,
            f"no checkpoint at step {halt_after} within {RUN_TIMEOUT:.0f} s: "
            f"{container.logs()[-600:].decode('utf-8', 'replace')}",
        )
        (job / "control" / "halt").write_text("", encoding="utf-8")
        status = wait_exit(container, RUN_TIMEOUT)
        first_logs = container.logs().decode("utf-8", "replace")
    follower.poll()
    info = read_exit(job)
    halted_at = latest_checkpoint_step(job)
    # The script may see control/halt itself, checkpoint and start exiting before learner-run's SIGTERM lands
    # in interpreter shutdown (exit 143): the reason, set by learner-run, is what must say halted.
    expect(
        info.get("reason") == "halted" and status in (0, 128 + 15),
        f"halt: exit {status}, learner.exit {info}\n{first_logs[-800:]}",
    )
    expect(
        halted_at is not None and halted_at < smoke.steps,
        f"halt at checkpoint {halted_at} did not stop training early",
    )
    expect(not (job / "results" / "summary.json").exists(), "a halted run wrote final results")
    ctx.say(f"halted at step {halted_at}; resuming")

    for name in ("halt", "learner.exit"):
        (job / "control" / name).unlink()
    with running(LearnerRun(ctx.reference, job, smoke_command(ctx), gpus=on_gpu)) as container:
        wait_until(lambda: follower.poll() or has_exited(container), timeout=RUN_TIMEOUT, interval=0.2)
        status = wait_exit(container, RUN_TIMEOUT)
        second_logs = container.logs().decode("utf-8", "replace")
    follower.poll()
    info = read_exit(job)
    expect(
        status == 0 and info.get("reason") == "completed",
        f"resume: exit {status}, learner.exit {info}\n{second_logs[-800:]}",
    )
    return _verify_training(job, halted_at or 0, smoke.steps, on_gpu)


def _verify_training(job: Path, halted_at: int, steps: int, on_gpu: bool) -> str:
    summary_path = job / "results" / "summary.json"
    expect(summary_path.exists(), "no results/summary.json after the resumed run")
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    device = str(summary.get("device", ""))
    expect(bool(device), "summary.json does not say the device it trained on (`device`)")
    expect(
        device.lower().startswith(GPU_DEVICES) == on_gpu,
        f"trained on {device}; a {'cuda image given GPUs' if on_gpu else 'cpu image'} must train on "
        f"{'a GPU' if on_gpu else 'the CPU'}",
    )
    expect(
        summary.get("start_step") == halted_at + 1 and summary.get("final_step") == steps,
        f"resume started at {summary.get('start_step')} (want {halted_at + 1}), ended at {summary.get('final_step')}",
    )
    rows = read_metrics(job)
    logged = [row["step"] for row in rows]
    resumed = logged[logged.index(halted_at + 1) :] if halted_at + 1 in logged else []
    expect(
        resumed == list(range(halted_at + 1, steps + 1)),
        f"steps after the resume: {resumed[:5]}...{resumed[-3:]}",
    )
    losses = [float(row["values"]["loss"]) for row in rows if "loss" in row.get("values", {})]
    expect(len(losses) >= 10 and all(math.isfinite(v) for v in losses), f"loss values: {losses[:10]}")
    head, tail = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    if not tail < 0.8 * head:
        raise CheckFailure(f"loss did not go down: first steps {head:.4f}, last steps {tail:.4f}")
    accuracy = rows[-1]["values"].get("accuracy")
    return (
        f"on {device}: halted at step {halted_at}, resumed at {halted_at + 1}, finished {steps}; "
        f"loss {head:.3f} -> {tail:.3f}" + (f", accuracy {accuracy:.3f}" if isinstance(accuracy, int | float) else "")
    )
