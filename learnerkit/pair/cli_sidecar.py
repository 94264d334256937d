"""`learnerkit sidecar ...`: build the sidecar image, run one learner pair by hand, halt a job."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import click
import yaml

from controller_sidecar.endpoints import Endpoints
from learnerkit.common.errors import ConfigError
from learnerkit.common.output import console, emit, handles_errors, output_option
from learnerkit.common.project import find_project_root, root_option
from learnerkit.pair.docker import PairHandle, container
from learnerkit.pair.etcd import etcd_settings, request_halt
from learnerkit.pair.runlocal import LocalResult, LocalRun, new_job_id, run_local
from learnerkit_build.builds.sidecarimage import plan_sidecar, sidecar_reference
from learnerkit_build.cli_options import apply, build_inputs, inputs_options, planned_build, run_builds
from learnerkit_build.recipes.filehashes import remembering


@click.group("sidecar")
def sidecar_group() -> None:
    """The controller sidecar: its image, and learner pairs run by hand."""


@sidecar_group.command("build")
@apply(inputs_options)
@click.option("--rebuild", is_flag=True, help="build even when the inputs hash is already tagged")
@click.option("--quiet-log", is_flag=True, help="progress bar only, no streamed build log")
@click.option("--record-size", is_flag=True, help="record the built image's size as its budget (+5 % fails)")
@root_option
@output_option
@handles_errors
def build_command(
    index_url: str | None,
    extra_index_urls: tuple[str, ...],
    find_links: tuple[str, ...],
    ca_bundle: Path | None,
    no_ca_bundle: bool,
    rebuild: bool,
    quiet_log: bool,
    record_size: bool,
    root: Path | None,
    output: str,
) -> None:
    """Build the sidecar image (cached by the hash of its inputs)."""
    project = find_project_root(root)
    resolved = build_inputs(index_url, extra_index_urls, find_links, ca_bundle, no_ca_bundle)
    started = time.monotonic()
    with remembering(project):
        plan = plan_sidecar(project, resolved.inputs, lambda line: None)
        build = planned_build(project, plan, resolved.inputs, rebuild=rebuild, record_size=record_size, started=started)
    run_builds(
        [("sidecar", build)],
        output=output,
        quiet_log=quiet_log,
        settings=resolved.settings,
    )


@sidecar_group.command("run-local", context_settings={"ignore_unknown_options": True})
@click.argument("image")
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
@click.option("--command", "shell_command", default=None, help="the training command as one shell string")
@click.option("--results", required=True, help="s3://BUCKET/PREFIX for results, logs and checkpoints")
@click.option("--data", default=None, help="s3://BUCKET/PREFIX of the training data")
@click.option("--model", default=None, help="s3://BUCKET/KEY of a model code zip")
@click.option("--resume-from", default=None, help="s3://BUCKET/PREFIX of an earlier run's checkpoints/")
@click.option("--job-id", default=None, help="[default: local-<random>]")
@click.option("--etcd", "etcd", envvar="ETCD_ENDPOINTS", required=True, help="etcd host:port [$ETCD_ENDPOINTS]")
@click.option("--s3-endpoint", envvar="S3_ENDPOINT_URL", default=None, help="S3 endpoint URL [$S3_ENDPOINT_URL]")
@click.option("--halt-grace", type=float, default=30.0, show_default=True, help="seconds to checkpoint on halt")
@click.option("--checkpoint-interval", type=float, default=300.0, show_default=True, help="seconds")
@click.option("--memory", "memory_mb", type=int, default=None, help="learner memory limit in MiB")
@click.option("--cpus", type=float, default=None, help="learner CPU limit")
@click.option(
    "--storage",
    "storage_mb",
    type=click.IntRange(min=1),
    default=None,
    help="the most /job may hold, in MiB, as a manifest's storage [default: unbounded]",
)
@click.option(
    "--gpus",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="NVIDIA GPUs for the learner (a device request, as the scheduler's Docker backend makes)",
)
@click.option(
    "--evaluation-metrics",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    default=None,
    help="YAML file with an FfDL evaluation_metrics section",
)
@click.option("--sidecar-image", default=None, help="[default: the built learnerkit/sidecar]")
@click.option("--keep", is_flag=True, help="keep the containers and the volume afterwards")
@output_option
@handles_errors
def run_local_command(
    image: str,
    argv: tuple[str, ...],
    shell_command: str | None,
    results: str,
    data: str | None,
    model: str | None,
    resume_from: str | None,
    job_id: str | None,
    etcd: str,
    s3_endpoint: str | None,
    halt_grace: float,
    checkpoint_interval: float,
    memory_mb: int | None,
    cpus: float | None,
    storage_mb: int | None,
    gpus: int,
    evaluation_metrics: Path | None,
    sidecar_image: str | None,
    keep: bool,
    output: str,
) -> None:
    """Run IMAGE with a sidecar on a shared volume and follow it; Ctrl-C halts (checkpoint, then stop).

    S3 credentials come from $AWS_ACCESS_KEY_ID and $AWS_SECRET_ACCESS_KEY, and reach only the sidecar.
    """
    if bool(argv) == bool(shell_command):
        raise ConfigError("give the training command either as arguments after IMAGE or as --command, not both")
    run = LocalRun(
        learner_image=image,
        sidecar_image=sidecar_image or sidecar_reference(),
        command=tuple(argv) if argv else str(shell_command),
        results=results,
        endpoints=Endpoints(
            etcd_endpoints=etcd,
            s3_endpoint_url=s3_endpoint,
            s3_access_key=os.environ.get("AWS_ACCESS_KEY_ID"),
            s3_secret_key=os.environ.get("AWS_SECRET_ACCESS_KEY"),
        ),
        data=data,
        model=model,
        resume_from=resume_from,
        halt_grace_s=halt_grace,
        checkpoint_interval_s=checkpoint_interval,
        memory_bytes=memory_mb * (1 << 20) if memory_mb else None,
        cpus=cpus,
        storage_bytes=storage_mb * (1 << 20) if storage_mb else None,
        gpus=gpus,
        evaluation_metrics=_metrics_rules(evaluation_metrics),
        keep=keep,
        job_id=job_id or new_job_id(),
    )
    people = output != "json"
    result = run_local(
        run,
        on_line=(lambda line: console.print(_pretty(line), highlight=False, markup=False)) if people else _ignore,
        on_started=(lambda handle: console.print(f"[bold]job {run.job_id}[/]: pair {handle.name} started"))
        if people
        else None,
        wait=lambda handle: _wait_halting_on_ctrl_c(handle, run, people),
    )
    emit(output, _result_json(result), lambda: _show(result))


def _ignore(_line: str) -> None:
    return None


def _metrics_rules(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    section = doc.get("evaluation_metrics", doc) if isinstance(doc, dict) else None
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: expected a mapping (an evaluation_metrics section)")
    return section


def _pretty(line: str) -> str:
    """The learner's structured lines as plain text; the sidecar's own log lines as they are."""
    try:
        record = json.loads(line)
    except ValueError:
        return line
    return f"learner | {record['line']}" if isinstance(record, dict) and "line" in record else line


def _wait_halting_on_ctrl_c(handle: PairHandle, run: LocalRun, people: bool) -> None:
    sidecar = container(handle.sidecar)
    if sidecar is None:
        return
    try:
        sidecar.wait()
    except KeyboardInterrupt:
        if people:
            console.print("[yellow]halting: the learner checkpoints and stops (Ctrl-C again to abandon)[/]")
        request_halt(etcd_settings(run.endpoints.etcd_endpoints), run.job_id)
        sidecar.wait()


def _result_json(result: LocalResult) -> dict[str, Any]:
    return {
        "job_id": result.job_id,
        "status": result.status.to_raw() if result.status else None,
        "metrics": result.metrics,
        "sidecar_exit": result.sidecar_exit,
        "learner_exit": result.learner_exit,
        "outputs": result.outputs,
    }


def _show(result: LocalResult) -> None:
    status = result.status
    phase = status.phase.value if status else "UNKNOWN"
    colour = {"COMPLETED": "green", "HALTED": "yellow"}.get(phase, "red")
    detail = f" ({status.message})" if status and status.message else ""
    console.print(f"[bold]job {result.job_id}[/]: [{colour}]{phase}[/]{detail}")
    if result.metrics:
        console.print("metrics: " + ", ".join(f"{k}={v}" for k, v in sorted(result.metrics.items())))
    console.print(f"outputs: {result.outputs} (results/, logs/, checkpoints/)")


@sidecar_group.command("halt")
@click.argument("job_id")
@click.option("--etcd", "etcd", envvar="ETCD_ENDPOINTS", required=True, help="etcd host:port [$ETCD_ENDPOINTS]")
@output_option
@handles_errors
def halt_command(job_id: str, etcd: str, output: str) -> None:
    """Ask every learner of JOB_ID to checkpoint and stop."""
    request_halt(etcd_settings(etcd), job_id)
    emit(output, {"job_id": job_id, "halt": "requested"}, lambda: console.print(f"halt requested for {job_id}"))
