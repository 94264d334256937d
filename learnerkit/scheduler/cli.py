"""`learnerkit job ...`: argument parsing and printing only; the work is in the scheduler's modules.

`validate` works offline; the commands that talk to the scheduler are in `cli_jobs`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import NoReturn

import click
from rich.table import Table

from learnerkit.common.errors import LearnerkitError
from learnerkit.common.output import OutputFormat, console, emit, err_console, fail, output_option
from learnerkit.common.project import find_project_root
from learnerkit.common.yamlfile import format_field_path
from learnerkit.scheduler.cli_jobs import JOB_COMMANDS
from learnerkit.scheduler.errors import ManifestError
from learnerkit.scheduler.manifest import FrameworkCatalog, JobManifest, load_manifest
from learnerkit.scheduler.units import format_size
from learnerkit_build.matrix import load_matrix


@click.group("job")
def job_group() -> None:
    """Check and run training jobs described by FfDL manifests."""


for _command in JOB_COMMANDS:
    job_group.add_command(_command)


@job_group.command("validate")
@click.argument("manifest", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--root",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="project whose frameworks/ lists the frameworks a job may name [default: found from cwd]",
)
@output_option
def validate(manifest: Path, root: Path | None, output: str) -> None:
    """Check MANIFEST (an FfDL manifest.yml); print a summary, or every problem and exit 1."""
    try:
        job = load_manifest(manifest, framework_catalog(find_project_root(root)))
    except ManifestError as e:
        _report_problems(output, e)
    except LearnerkitError as e:
        fail(output, e)
        return
    emit(output, {"valid": True, "manifest": job.to_dict()}, lambda: _show(manifest, job))


def framework_catalog(root: Path) -> FrameworkCatalog:
    """Each framework of the matrix with every way a manifest may name its versions."""
    catalog: dict[str, set[str]] = {}
    for image in load_matrix(root).images:
        names = catalog.setdefault(image.framework.name, set())
        names.update({image.version, f"{image.version}-{image.variant_name}", image.tag})
    return catalog


def _report_problems(output: str, error: ManifestError) -> NoReturn:
    if output == OutputFormat.JSON.value:
        problems = [
            {"file": str(p.path), "line": p.line, "field": format_field_path(p.loc), "message": p.message}
            for p in error.problems
        ]
        sys.stdout.write(json.dumps({"valid": False, "problems": problems}, indent=2) + "\n")
    else:
        count = len(error.problems)
        err_console.print(f"[bold red]error:[/] {count} problem{'s' if count != 1 else ''} in the manifest")
        for problem in error.problems:
            err_console.print(str(problem), markup=False, highlight=False, soft_wrap=True)
    raise SystemExit(1)


def _show(path: Path, job: JobManifest) -> None:
    r = job.resources
    table = Table(title=f"{path}: valid", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    table.add_row("name", job.name)
    table.add_row("framework", f"{job.framework.name} {job.framework.version}")
    if job.image:
        table.add_row("image", job.image)
    gpus = f"{r.gpus} gpus" + (f" ({r.gpu_type})" if r.gpu_type else "")
    table.add_row("learners", f"{r.learners} x {r.cpus:g} cpus, {gpus}, {format_size(r.memory_bytes)} memory")
    for store in job.data_stores:
        used = ", ".join(
            f"{role} {container}"
            for role, container in (("data", store.training_data), ("results", store.training_results))
            if container
        )
        table.add_row("data store", f"{store.id} ({store.type}, {store.mode}): {used}")
    ext = job.extensions
    table.add_row(
        "scheduling",
        f"tenant {ext.tenant}, queue {ext.queue}, priority {ext.priority}, distributed {ext.distributed.value}",
    )
    table.add_row("command", job.framework.command)
    console.print(table)
