"""`learnerkit dev ...`: the local etcd, SeaweedFS (S3) and Prometheus a developer and `make demo` use."""

from __future__ import annotations

import shlex
from pathlib import Path

import click
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn
from rich.table import Table

from controller_sidecar.settings import S3Settings
from learnerkit.common.errors import ConfigError
from learnerkit.common.output import console, emit, err_console, handles_errors, keep_whole, output_option
from learnerkit.common.project import find_project_root
from learnerkit.dev.credentials import ACCESS_KEY_VAR, SECRET_KEY_VAR
from learnerkit.dev.environment import DEFAULT_FOLDER, FOLDER_ENV, DevServices, ServiceStatus
from learnerkit.dev.errors import ServiceError
from learnerkit.dev.scheduler import SCHEDULER_SERVICE, console_note
from learnerkit.dev.upload import destination, files_under, upload_folder
from learnerkit_build.imagetest.smokedata import write_smoke_dataset


def default_folder() -> Path:
    """``.learnerkit/services`` of the project (found from the current folder), else of the current folder."""
    try:
        return find_project_root() / DEFAULT_FOLDER
    except ConfigError:
        return Path.cwd() / DEFAULT_FOLDER


@click.group("dev")
@click.option(
    "--state-dir",
    type=click.Path(path_type=Path, file_okay=False),
    envvar=FOLDER_ENV,
    default=None,
    help=f"state, logs and data of the services [${FOLDER_ENV}; default: .learnerkit/services]",
)
@click.pass_context
def dev_group(ctx: click.Context, state_dir: Path | None) -> None:
    """Local services for development and the demo: etcd, SeaweedFS (S3), the scheduler, Prometheus."""
    ctx.obj = DevServices((state_dir or default_folder()).absolute())


def status_table(rows: list[ServiceStatus]) -> Table:
    table = Table("service", "state", "pid", "endpoint", "healthy", "")
    for row in rows:
        healthy = "[green]yes[/]" if row.healthy else "[red]no[/]"
        table.add_row(row.name, row.state, str(row.pid or ""), row.endpoint or "", healthy, row.action or "")
    return keep_whole(table, "service", "state", "pid", "endpoint")


def print_status(rows: list[ServiceStatus]) -> None:
    """The table, then each service's settings from the caller's environment (whole: a value may be copied)."""
    console.print(status_table(rows))
    for row in rows:
        if row.settings:
            console.print(f"{row.name} settings:", highlight=False)
            for name, value in sorted(row.settings.items()):
                console.print(f"  {name}={value}", highlight=False, soft_wrap=True)


@dev_group.command("up")
@click.option("--with-prometheus", is_flag=True, help="also start Prometheus, scraping the services' /metrics")
@click.option("--with-scheduler", is_flag=True, help="also start the scheduler (Docker backend, tenant 'demo')")
@click.option("--any-port", is_flag=True, help="free ports from the kernel, never the default ones")
@output_option
@click.pass_obj
@handles_errors
def up_command(services: DevServices, with_prometheus: bool, with_scheduler: bool, any_port: bool, output: str) -> None:
    """Start the services that do not run (detached; they outlive this command)."""
    optional = [name for name, wanted in (("prometheus", with_prometheus), ("scheduler", with_scheduler)) if wanted]
    rows = services.up(with_optional=optional, any_port=any_port)
    notes = [console_note(row.endpoint) for row in rows if row.name == SCHEDULER_SERVICE.name and row.endpoint]

    def show() -> None:
        print_status(rows)
        for note in notes:
            console.print(note, soft_wrap=True)

    emit(output, rows, show)


@dev_group.command("status")
@output_option
@click.pass_obj
@handles_errors
def status_command(services: DevServices, output: str) -> None:
    """Each service: pid, endpoint, and whether it answers a real request now."""
    rows = services.status()
    emit(output, rows, lambda: print_status(rows))


@dev_group.command("env")
@output_option
@click.pass_obj
@handles_errors
def env_command(services: DevServices, output: str) -> None:
    """Print `export ...` for a shell: eval "$(learnerkit dev env)"."""
    variables = services.environment()
    line = "export " + " ".join(f"{key}={shlex.quote(value)}" for key, value in variables.items())
    emit(output, variables, lambda: click.echo(line))


@dev_group.command("down")
@click.option("--purge", is_flag=True, help="also delete the services' data, logs and credentials")
@output_option
@click.pass_obj
@handles_errors
def down_command(services: DevServices, purge: bool, output: str) -> None:
    """Halt the jobs still running on the services and remove their pairs, then stop the services (SIGTERM,
    then SIGKILL after a deadline) and remove the state."""
    # Imported here: the other dev verbs start without the Docker client.
    from learnerkit.dev.jobs import halt_and_remove

    try:
        variables = services.environment()
    except ServiceError:
        variables = None  # nothing runs: no sidecar can be talking to it
    for job in halt_and_remove(variables) if variables is not None else []:
        err_console.print(f"job {job.job_id}: {job.how}; its {job.pairs} pair(s) removed")
    rows = services.down(purge=purge)
    emit(output, rows, lambda: console.print(status_table(rows) if rows else "nothing was running"))


@dev_group.command("upload")
@click.argument("local_dir", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.argument("url")
@output_option
@click.pass_obj
@handles_errors
def upload_command(services: DevServices, local_dir: Path, url: str, output: str) -> None:
    """Upload LOCAL_DIR to URL (s3://BUCKET/PREFIX) on the dev S3 store, each object checked by ETag."""
    location = destination(url)
    variables = services.environment()
    settings = S3Settings(
        endpoint_url=variables["S3_ENDPOINT_URL"],
        access_key=variables[ACCESS_KEY_VAR],
        secret_key=variables[SECRET_KEY_VAR],
    )
    total = sum(path.stat().st_size for path in files_under(local_dir))
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    with Progress(*columns, console=err_console, disable=output == "json", transient=True) as progress:
        task = progress.add_task(f"{local_dir} -> {location}", total=total)
        result = upload_folder(settings, local_dir, location, lambda path, size: progress.advance(task, size))
    emit(
        output,
        result,
        lambda: console.print(f"uploaded {len(result.objects)} files ({result.total_bytes} bytes) to {location}"),
    )


@dev_group.command("dataset")
@click.argument("folder", type=click.Path(path_type=Path, file_okay=False))
@output_option
@handles_errors
def dataset_command(folder: Path, output: str) -> None:
    """Write the smoke dataset (FOLDER/train.csv, the one every framework's smoke training reads), for
    `dev upload` and the demo."""
    path = write_smoke_dataset(folder)
    emit(output, {"path": str(path)}, lambda: console.print(f"wrote {path}"))
