"""`learnerkit job ...`: argument parsing and printing only; the work is in the scheduler's modules.

`validate` works offline; the other verbs talk to the scheduler's REST API. The server comes from ``--url`` /
``$LEARNERKIT_SCHEDULER_URL``, the tenant's token from ``--token`` / ``$LEARNERKIT_TOKEN``. ``--follow`` shows
the job live until it ends and exits 1 when it ends FAILED.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click
from rich.cells import cell_len
from rich.filesize import decimal
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn
from rich.table import Table

from learnerkit.common.errors import LearnerkitError
from learnerkit.common.instants import parse_instant
from learnerkit.common.output import (
    OutputFormat,
    console,
    emit,
    err_console,
    fail,
    fail_with_problems,
    keep_whole,
    output_option,
    to_jsonable,
)
from learnerkit.common.project import find_project_root
from learnerkit.common.yamlfile import YamlError
from learnerkit.common.yamlvars import ExpandedYaml
from learnerkit.scheduler.client.http import SchedulerClient
from learnerkit.scheduler.client.manifestfile import read_expanded, secrets_hidden
from learnerkit.scheduler.client.terminal import (
    evaluation_reports,
    format_metrics,
    job_details,
    jobs_table,
    metrics_table,
    styled_status,
    watch_job,
)
from learnerkit.scheduler.config.policy import SubmitPolicy, check_tenant_settings
from learnerkit.scheduler.config.settings import resource_defaults
from learnerkit.scheduler.config.tenants import load_tenants
from learnerkit.scheduler.errors import JobNotFoundError, ManifestError, ManifestRejectedError, SchedulerError
from learnerkit.scheduler.facade import DEFAULT_PAGE_JOBS, MAX_PAGE_JOBS, MODEL_REJECTED, JobQuery, JobView
from learnerkit.scheduler.manifest.defaultresults import default_results
from learnerkit.scheduler.manifest.kinds import installed_kinds
from learnerkit.scheduler.manifest.model import FrameworkCatalog, JobManifest, ResourceDefaults
from learnerkit.scheduler.manifest.parser import parse_manifest
from learnerkit.scheduler.manifest.units import format_size

if TYPE_CHECKING:
    from learnerkit.scheduler.modelcode.archive import ModelSummary
    from learnerkit.scheduler.provenance.verify import VerifyReport

F = TypeVar("F", bound=Callable[..., Any])


token_option = click.option("--token", default=None, help="the tenant's token [env LEARNERKIT_TOKEN]")


@contextmanager
def scheduler_client(url: str | None, token: str | None) -> Iterator[SchedulerClient]:
    """A client of the scheduler (``--url``, ``--token`` or their settings), its plain-HTTP warning on stderr."""
    client = SchedulerClient.from_env(url, token)
    if (warning := client.plain_http_warning()) is not None:
        err_console.print(warning, markup=False, highlight=False)
    try:
        yield client
    finally:
        client.close()


def connected(command: F) -> F:
    """Add ``--url``, ``--token``, ``--output``; hand the command a client; report errors in the chosen format."""

    @click.option("--url", default=None, help="the scheduler [env LEARNERKIT_SCHEDULER_URL; http://127.0.0.1:8080]")
    @token_option
    @output_option
    @wraps(command)
    def wrapper(*args: Any, url: str | None, token: str | None, output: str, **kwargs: Any) -> Any:
        try:
            with scheduler_client(url, token) as client:
                return command(*args, client=client, output=output, **kwargs)
        except ManifestRejectedError as e:
            _report_rejected(output, e)
        except LearnerkitError as e:
            fail(output, e)

    return wrapper  # type: ignore[return-value]


@click.group("job")
def job_group() -> None:
    """Check and run training jobs described by FfDL manifests."""


FAILED_EXIT = 1
REJECTED_EXIT = 3
"""`--follow`'s exit status when the job COMPLETED and its evaluations rejected its model (docs/evaluations.md)."""
follow_option = click.option(
    "--follow",
    "-f",
    is_flag=True,
    help=f"show the job live until it ends and its model has a verdict; exit {FAILED_EXIT} if it FAILED, "
    f"{REJECTED_EXIT} if its model was rejected",
)
interval_option = click.option("--interval", type=float, default=2.0, hidden=True, help="seconds between polls")


model_argument = click.argument(
    "model", required=False, type=click.Path(path_type=Path, exists=True, file_okay=True, dir_okay=True)
)
image_option = click.option(
    "--image", default=None, metavar="REF", help="run this learner image instead of the framework's"
)


@job_group.command("submit")
@click.argument("manifest", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@model_argument
@image_option
@follow_option
@interval_option
@connected
def submit(
    manifest: Path,
    model: Path | None,
    image: str | None,
    follow: bool,
    interval: float,
    client: SchedulerClient,
    output: str,
) -> None:
    """Queue the job MANIFEST describes (an FfDL manifest.yml), with its model code MODEL (a folder or a .zip,
    FfDL's model definition) unpacked into MODEL_DIR, where the command runs. Its ${NAME} references are
    filled from this shell's environment first, as validate fills them."""
    try:
        expanded = read_manifest(manifest)
    except ManifestError as e:
        fail_with_problems(output, e, "manifest")
    with secrets_hidden(expanded):
        if model is None:
            job = client.submit(expanded.text, source=manifest.name, image=image)
        else:
            from learnerkit.scheduler.modelcode.archive import check_model_archive, model_archive  # only with code

            with tempfile.TemporaryDirectory(prefix="learnerkit-submit-") as workdir:
                archive = model_archive(model, Path(workdir))
                check_model_archive(archive, name=str(model))
                job = _upload(client, expanded.text, manifest.name, image, archive, output)
    if follow:
        _follow(client, job, interval, output)
    else:
        emit(output, job, lambda: console.print(f"submitted job [bold]{job.job_id}[/]: {styled_status(job.status)}"))


def read_manifest(path: Path) -> ExpandedYaml:
    """``path`` with this shell's variables filled in (docs/manifests.md#variables); `ManifestError` naming each
    reference that cannot be filled, or the file where it cannot be read."""
    try:
        return read_expanded(path, os.environ)
    except YamlError as e:
        raise ManifestError(list(e.problems)) from e


def _upload(client: SchedulerClient, text: str, source: str, image: str | None, archive: Path, output: str) -> JobView:
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    with Progress(*columns, console=err_console, disable=output == OutputFormat.JSON.value, transient=True) as bar:
        task = bar.add_task("model code", total=archive.stat().st_size)
        return client.submit(
            text, source=source, image=image, model=archive, progress=lambda size: bar.advance(task, size)
        )


@job_group.command("list")
@click.option(
    "--limit",
    type=click.IntRange(1, MAX_PAGE_JOBS),
    default=DEFAULT_PAGE_JOBS,
    show_default=True,
    help="jobs per page",
)
@click.option("--next", "next_token", default=None, metavar="TOKEN", help="the page after the one that printed TOKEN")
@click.option(
    "--sort",
    type=click.Choice(["submitted", "-submitted", "name", "-name", "status", "-status"]),
    default="submitted",
    show_default=True,
    help="order; a leading - reverses it",
)
@click.option("--status", "statuses", multiple=True, metavar="STATUS", help="only this status (repeat for more)")
@click.option("--name", default=None, help="only jobs of this name")
@click.option("--framework", default=None, help="only jobs of this framework (as the manifest names it)")
@click.option("--since", default=None, metavar="TIME", help="submitted at or after (ISO-8601, UTC by default)")
@click.option("--until", default=None, metavar="TIME", help="submitted before (ISO-8601, UTC by default)")
@click.option("--search", default=None, metavar="TEXT", help="text in the job id, name or reason (any case)")
@connected
def list_jobs(
    limit: int,
    next_token: str | None,
    sort: str,
    statuses: tuple[str, ...],
    name: str | None,
    framework: str | None,
    since: str | None,
    until: str | None,
    search: str | None,
    client: SchedulerClient,
    output: str,
) -> None:
    """A page of the tenant's jobs; when more follow, the token of the next page is printed (to stderr, so
    `--output json` stays the list of jobs): pass it with --next and the same filters."""
    query = JobQuery(
        limit=limit,
        next=next_token,
        sort=sort.removeprefix("-"),
        descending=sort.startswith("-"),
        statuses=frozenset(part.strip().upper() for item in statuses for part in item.split(",") if part.strip()),
        name=name,
        framework=framework,
        since=parse_instant("--since", since),
        until=parse_instant("--until", until),
        search=search,
    )
    page = client.page_jobs(query)
    jobs = list(page.jobs)
    emit(output, jobs, lambda: console.print(jobs_table(jobs, width=console.width)))
    if page.next is not None:
        err_console.print(
            f"{len(jobs)} of {page.total} jobs; next page: --next {page.next}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


@job_group.command("status")
@click.argument("job_id")
@follow_option
@interval_option
@connected
def status(job_id: str, follow: bool, interval: float, client: SchedulerClient, output: str) -> None:
    """JOB_ID's status, why it waits, and each learner's status, message and metrics."""
    job = client.get(job_id)
    if follow:
        _follow(client, job, interval, output)
    else:
        emit(output, job, lambda: console.print(job_details(job)))


@job_group.command("evaluate")
@click.argument("job_id")
@click.argument("evaluations", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@connected
def evaluate(job_id: str, evaluations: Path, client: SchedulerClient, output: str) -> None:
    """Evaluate COMPLETED JOB_ID's model again, without retraining, with the EVALUATIONS file (a YAML file
    holding an `evaluations:` list, as in a manifest, its ${NAME} references filled from this shell's
    environment); `job status` shows the verdicts."""
    try:
        expanded = read_manifest(evaluations)
    except ManifestError as e:
        fail_with_problems(output, e, "evaluations file")
    with secrets_hidden(expanded):
        job = client.evaluate(job_id, expanded.text, evaluations.name)
    emit(output, job, lambda: console.print(job_details(job)))


@job_group.command("evaluations")
@click.argument("job_id")
@connected
def evaluations(job_id: str, client: SchedulerClient, output: str) -> None:
    """The reports of JOB_ID's latest evaluations: each verdict and its readable summary."""
    reports = client.evaluation_reports(job_id)
    emit(output, reports, lambda: console.print(evaluation_reports(reports)))


@job_group.command("logs")
@click.argument("job_id")
@click.option("--follow", "-f", is_flag=True, help="keep printing until the job has finished")
@click.option("--learner", type=click.IntRange(min=1), default=1, show_default=True, help="1-based learner id")
@click.option("--tail", type=click.IntRange(min=0), default=None, help="start with the last N lines only")
@click.option("--offset", type=click.IntRange(min=0), default=0, show_default=True, help="start at this byte")
@click.option(
    "--attempt",
    type=click.IntRange(min=1),
    default=None,
    help="the log of this attempt (`job status` lists them) [default: the latest]",
)
@interval_option
@connected
def logs(
    job_id: str,
    follow: bool,
    learner: int,
    tail: int | None,
    offset: int,
    attempt: int | None,
    interval: float,
    client: SchedulerClient,
    output: str,
) -> None:
    """A learner's log: what is there now, or with -f everything until the job has finished. Each attempt
    (a resume, a restart after a preemption) has a log of its own: --attempt reads an earlier one.

    Printed as it arrives: the scheduler fetches only the parts of the log from the offset (or the last
    lines) on."""
    as_json = output == OutputFormat.JSON.value
    stdout = sys.stdout.buffer
    pieces: list[bytes] = []
    while True:
        if as_json and follow:
            chunk = client.logs(job_id, learner_id=learner, offset=offset, tail=tail, attempt=attempt)
            start = chunk.next_offset - len(chunk.data)
            line = {
                "job_id": job_id,
                "learner": learner,
                **_attempt(attempt),
                "offset": start,
                **_chunk_json(chunk.data),
            }
            sys.stdout.write(json.dumps(line | {"next_offset": chunk.next_offset, "finished": chunk.finished}) + "\n")
            sys.stdout.flush()
            next_offset, finished = chunk.next_offset, chunk.finished
        else:
            write = pieces.append if as_json else stdout.write
            next_offset, finished = client.copy_logs(
                job_id, write, learner_id=learner, offset=offset, tail=tail, attempt=attempt
            )
            if not as_json:
                stdout.flush()
        tail = None  # the last lines once; then on from where they end
        caught_up = next_offset == offset
        offset = next_offset
        if finished or (caught_up and not follow):
            break
        if caught_up:
            time.sleep(interval)
    if as_json and not follow:
        body = {"job_id": job_id, "learner": learner, **_attempt(attempt), **_chunk_json(b"".join(pieces))}
        sys.stdout.write(json.dumps(body | {"next_offset": offset, "finished": finished}, indent=2) + "\n")


@job_group.command("metrics")
@click.argument("job_id")
@click.option("--learner", type=click.IntRange(min=1), default=1, show_default=True, help="1-based learner id")
@connected
def metrics(job_id: str, learner: int, client: SchedulerClient, output: str) -> None:
    """A learner's metric history (FfDL's emetrics): metrics.jsonl, regex and TensorBoard scalars.

    The sidecar stores the history every 30 s while the learner runs, and when it ends; before that the
    latest values are shown."""
    records = client.metrics_history(job_id, learner_id=learner)
    job = client.get(job_id)
    latest = next((item.metrics for item in job.learners if item.learner_id == learner), {})
    body = {"job_id": job_id, "learner": learner, "status": job.status, "records": records, "latest": latest}

    def show() -> None:
        if records:
            console.print(metrics_table(job_id, learner, records))
            return
        console.print(f"job [bold]{escape(job_id)}[/] ({styled_status(job.status)}): no metric history stored yet")
        if latest:
            console.print(f"latest: {escape(format_metrics(latest))}")

    emit(output, body, show)


WHAT_CHOICES = ("results", "logs", "checkpoints", "model", "provenance", "evaluations", "all")


@job_group.command("download")
@click.argument("job_id")
@click.option("--to", "to", type=click.Path(path_type=Path, file_okay=False), default=None, help="folder [./JOB_ID]")
@click.option("--what", type=click.Choice(WHAT_CHOICES), default="results", show_default=True, help="which outputs")
@connected
def download(job_id: str, to: Path | None, what: str, client: SchedulerClient, output: str) -> None:
    """What JOB_ID stored (results, logs, checkpoints of every attempt and learner, its model, its provenance), fetched
    through the scheduler; files land under --to by their path, each written whole or not at all."""
    # Imported here: the other job verbs start without the progress bar and the thread pool.
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    from learnerkit.scheduler.client.download import DownloadSummary, download_all

    root = to if to is not None else Path(job_id)
    files = client.list_files(job_id, what=what)
    summary = DownloadSummary(job_id, str(root), files)
    if what in ("model", "all") and not any(item.kind == "model" for item in files):
        summary.skipped.append(f"model: job {job_id} stored no model")
    as_json = output == OutputFormat.JSON.value
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    with Progress(*columns, console=err_console, disable=as_json, transient=True) as progress:
        task = progress.add_task(f"{job_id} -> {root}", total=sum(item.size for item in files))
        summary.failed = download_all(client, job_id, files, root, lambda n: progress.advance(task, n))
        failed = {failure.path for failure in summary.failed}
        summary.bytes = sum(item.size for item in files if item.path not in failed)

    def show() -> None:
        for skipped in summary.skipped:
            err_console.print(f"[yellow]skipped[/] {escape(skipped)}")
        for failure in summary.failed:
            err_console.print(f"[red]not downloaded[/]: {escape(repr(failure.path))}: {escape(failure.error)}")
        stored = len(files) - len(summary.failed)
        console.print(f"{stored} file(s), {decimal(summary.bytes)} of {what} in [bold]{escape(str(root))}[/]")

    emit(output, summary, show)
    if summary.failed:
        raise SystemExit(1)


@job_group.command("provenance")
@click.argument("job_id")
@click.option("--to", "to", type=click.Path(path_type=Path, file_okay=False), default=None, help="download it here")
@connected
def provenance(job_id: str, to: Path | None, client: SchedulerClient, output: str) -> None:
    """The signed provenance of JOB_ID (docs/provenance.md): its factsheet, or with --to its documents (the DSSE
    envelope, the model signature, the manifest and the factsheet) downloaded under --to/provenance/."""
    from learnerkit.scheduler.client.download import download_all
    from learnerkit.scheduler.client.factsheetview import show_factsheet
    from learnerkit.scheduler.client.provenance import job_factsheet, provenance_files

    if to is not None:
        files = provenance_files(client, job_id)
        failed = download_all(client, job_id, files, to, lambda _n: None)
        if failed:
            raise SchedulerError("; ".join(f"{f.path}: {f.error}" for f in failed))
        listed = {"job_id": job_id, "to": str(to), "files": [item.path for item in files]}
        emit(output, listed, lambda: console.print(f"{len(files)} provenance file(s) in [bold]{escape(str(to))}[/]"))
        return
    sheet = job_factsheet(client, job_id)
    emit(output, sheet, lambda: show_factsheet(sheet, console))


@job_group.command("verify")
@click.argument("target")
@click.option(
    "--public-key",
    "public_keys",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    multiple=True,
    help="a platform public key (PEM), repeatable: each verifies what it signed [every key the scheduler serves]",
)
@click.option(
    "--data",
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    default=None,
    help="a copy of the training data (the data prefix's layout), to hash its objects again",
)
@click.option("--to", "to", type=click.Path(path_type=Path, file_okay=False), default=None, help="where JOB goes")
@click.option(
    "--partial",
    is_flag=True,
    help="verify what is there: missing subjects and an incomplete statement are reported, not failed",
)
@connected
def verify(
    target: str,
    public_keys: tuple[Path, ...],
    data: Path | None,
    to: Path | None,
    partial: bool,
    client: SchedulerClient,
    output: str,
) -> None:
    """Check a job's provenance: TARGET is a folder `job download --what all` wrote, or a job id (downloaded to
    --to, else a temporary folder). Checks the signatures, hashes the files again (a job id: its evaluation data
    too, as the store holds it now), renders the factsheet again and asks for each image the registry its
    reference names, else the local engine. Each document is checked with the key its signature names, among every
    key the platform published (`GET /v1/keys`: the keys rotated out too). Exits 0 only when every signed subject is
    present and matches and the statement is complete; else 1, naming each item changed or missing. Files no
    statement names are listed as unsigned."""
    from learnerkit.common.signing import load_public_key, public_key_from_pem
    from learnerkit.scheduler.client.imagedigest import image_answer
    from learnerkit.scheduler.client.provenance import download_for_verify, evaluation_data_hasher
    from learnerkit.scheduler.provenance.verify import verify_folder

    if public_keys:
        keys = [load_public_key(path, "--public-key") for path in public_keys]
    else:
        keys = [public_key_from_pem(pem.encode(), f"{client.base_url}/v1/keys") for pem in client.public_keys()]
    folder = Path(target)
    evaluation_data = None
    with tempfile.TemporaryDirectory(prefix="learnerkit-verify-") as temporary:
        if not folder.is_dir():
            folder = to if to is not None else Path(temporary)
            failed = download_for_verify(client, target, folder)
            if failed:
                raise SchedulerError("; ".join(f"{f.path}: {f.error}" for f in failed))
            evaluation_data = evaluation_data_hasher(client, target)
        report = verify_folder(
            folder, keys, data=data, image_digest=image_answer, evaluation_data=evaluation_data, partial=partial
        )
    emit(output, report.to_dict(), lambda: _show_report(report))
    if not report.ok:
        raise SystemExit(1)


def _show_report(report: VerifyReport) -> None:
    colours = {
        "ok": "green",
        "changed": "bold red",
        "missing": "bold red",
        "incomplete": "bold red",
        "not checked": "yellow",
        "unsigned": "yellow",
    }
    from learnerkit.scheduler.provenance.report import folded_unsigned

    for state, item, detail in folded_unsigned(report.checks):
        head = f"[{colours[state]}]{state}[/] {escape(item)}"
        if not detail:
            console.print(head)
        elif cell_len(f"{state} {item}: {detail}") <= console.width:
            console.print(f"{head}: {escape(detail)}")
        else:  # the detail under its item, whole, rather than wrapped from the item's line into the next
            console.print(head)
            console.print(f"  {escape(detail)}")
    found = report.to_dict()
    problems = [f"{len(found[k])} {k}" for k in ("changed", "missing") if found[k]]
    problems += [] if found["complete"] else ["the statement is incomplete"]
    if not problems:
        verdict = "[green]verified[/]"
    elif report.ok:
        verdict = f"[yellow]verified in part (--partial): {', '.join(problems)}[/]"
    else:
        verdict = f"[bold red]not verified: {', '.join(problems)}[/]"
    console.print(f"{verdict} (key {report.key_id})")


def _attempt(attempt: int | None) -> dict[str, int]:
    """The attempt asked for in `logs --output json`; none named: the latest, as before."""
    return {} if attempt is None else {"attempt": attempt}


def _chunk_json(data: bytes) -> dict[str, str]:
    return {"data": data.decode("utf-8", errors="replace")}


def _verb(name: str, call: Callable[[SchedulerClient, str], JobView], help_text: str) -> click.Command:
    @job_group.command(name, help=help_text)
    @click.argument("job_id")
    @connected
    def command(job_id: str, client: SchedulerClient, output: str) -> None:
        job = call(client, job_id)
        emit(output, job, lambda: console.print(f"job [bold]{job.job_id}[/]: {styled_status(job.status)}"))

    return command


halt = _verb("halt", SchedulerClient.halt, "Checkpoint and stop JOB_ID; `resume` starts it again from there.")
resume = _verb("resume", SchedulerClient.resume, "Queue a HALTED or FAILED JOB_ID again from its latest checkpoint.")
cancel = _verb("cancel", SchedulerClient.cancel, "Stop JOB_ID without a checkpoint; it ends CANCELLED.")
delete = _verb(
    "delete", SchedulerClient.delete, "Forget the ended JOB_ID: its record and store keys go; its outputs stay."
)


def _events_of(client: SchedulerClient, job_id: str, interval: float) -> Iterator[dict[str, Any] | None]:
    """The job's events (and keep-alives, and snapshots) from the scheduler's stream, on a connection of its own;
    a scheduler without the stream (404) is polled every ``interval`` instead."""
    try:
        for item in client.events():
            if item is None or item.get("job_id") == job_id or item.get("event") == "snapshot":
                yield item
    except JobNotFoundError:
        while True:
            time.sleep(interval)
            yield None


def _follow(client: SchedulerClient, job: JobView, interval: float, output: str) -> None:
    """Until the job ends and, when it completes, its model has a verdict; exits `FAILED_EXIT` for a FAILED job,
    `REJECTED_EXIT` for a model its evaluations rejected."""
    as_json = output == OutputFormat.JSON.value
    final = watch_job(
        lambda: client.get(job.job_id),
        interval_s=interval,
        as_json=as_json,
        console=console,
        first=job,
        changes=_events_of(client.copy(), job.job_id, interval),
    )
    if final.status == "FAILED":
        if not as_json:
            reason = escape(final.reason)
            err_console.print(f"[bold red]job {escape(final.job_id)} FAILED[/]: {reason}", highlight=False)
        raise SystemExit(FAILED_EXIT)
    if final.model.startswith(MODEL_REJECTED):
        if not as_json:
            verdict = escape(final.model)
            err_console.print(f"[bold red]job {escape(final.job_id)}'s model {verdict}[/]", highlight=False)
        raise SystemExit(REJECTED_EXIT)


def _report_rejected(output: str, error: ManifestRejectedError) -> NoReturn:
    if output == OutputFormat.JSON.value:
        body = {"error": type(error).__name__, "message": str(error), "problems": to_jsonable(list(error.problems))}
        sys.stdout.write(json.dumps(body, indent=2) + "\n")
    else:
        count = len(error.problems)
        err_console.print(f"[bold red]error:[/] the scheduler refused the manifest: {count} problem(s)")
        err_console.print(str(error), markup=False, highlight=False, soft_wrap=True)
    raise SystemExit(1)


@job_group.command("validate")
@click.argument("manifest", type=click.Path(path_type=Path, dir_okay=False))
@model_argument
@image_option
@click.option(
    "--root",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="project whose frameworks/ lists the frameworks a job may name [default: found from cwd]",
)
@click.option(
    "--tenants",
    "tenants_file",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    envvar="LEARNERKIT_TENANTS",
    default=None,
    help="check the priority and preemptible against this tenants file, as submit does [env LEARNERKIT_TENANTS]",
)
@click.option("--tenant", default=None, help="the tenant submitting [default: the manifest's learnerkit.tenant]")
@click.option(
    "--results-bucket",
    default=None,
    metavar="BUCKET",
    help="the scheduler's default results bucket: where the results of a manifest without training_results go"
    " [env LEARNERKIT_RESULTS_BUCKET]",
)
@output_option
def validate(
    manifest: Path,
    model: Path | None,
    image: str | None,
    root: Path | None,
    tenants_file: Path | None,
    tenant: str | None,
    results_bucket: str | None,
    output: str,
) -> None:
    """Check MANIFEST (an FfDL manifest.yml) and the model code MODEL (a folder or .zip) as `submit` would;
    print a summary, or every problem and exit 1.

    The one check left to submit: a manifest without training_results runs only on a scheduler with a default
    results store, and offline validate cannot know the scheduler's settings; it says so, and where the results
    go on one that has it (--results-bucket). MANIFEST's ${NAME} references are filled from this shell's
    environment first, as submit fills them (docs/manifests.md#variables)."""
    try:
        defaults = _validate_defaults(results_bucket)
        offline = defaults.results_bucket is None
        if offline:
            defaults = replace(defaults, results_bucket=OFFLINE_RESULTS_BUCKET)
        catalog = framework_catalog(find_project_root(root))
        kinds = installed_kinds(find_project_root(root))
        expanded = read_manifest(manifest)
        with secrets_hidden(expanded):
            job = parse_manifest(
                expanded.text, str(manifest), catalog, image=image, defaults=defaults, tenant=tenant, kinds=kinds
            )
            if tenants_file is not None:
                policy = load_tenants(tenants_file).applied_to(SubmitPolicy())
                check_tenant_settings(job, tenant or job.extensions.tenant, policy, str(manifest))
        summary = _checked_model(model, _locked(find_project_root(root), job)) if model is not None else None
    except ManifestError as e:
        fail_with_problems(output, e, "manifest")
    except LearnerkitError as e:
        fail(output, e)
        return
    data: dict[str, Any] = {"valid": True, "defaults_applied": defaults_applied(job), "manifest": job.to_dict()}
    left = {"training_results": _left_to_submit(job)} if offline and default_results(job) is not None else {}
    if left:
        data["left_to_submit"] = left
    if summary is not None:
        data["model"] = {"files": summary.files, "bytes": summary.expanded_bytes, "requirements": summary.requirements}
    results_source = "--results-bucket" if results_bucket else _defaults_source("training_results")
    emit(output, data, lambda: _show(manifest, job, summary, results_source, left))


OFFLINE_RESULTS_BUCKET = "<the scheduler's results bucket>"
"""Stands for the bucket of a scheduler's default results store where validate knows of none (offline)."""


def _validate_defaults(results_bucket: str | None) -> ResourceDefaults:
    """The scheduler's defaults as this environment sets them, ``--results-bucket`` over its variable."""
    defaults = resource_defaults(os.environ)
    if not results_bucket:
        return defaults
    try:
        checked = resource_defaults({"LEARNERKIT_RESULTS_BUCKET": results_bucket})
    except SchedulerError as e:
        raise SchedulerError(
            f"--results-bucket {results_bucket!r}: expected an S3 bucket name (a-z, 0-9, '.', '-')"
        ) from e
    return replace(defaults, results_bucket=checked.results_bucket)


def _left_to_submit(job: JobManifest) -> str:
    folder = (default_results(job) or "").removeprefix(f"{OFFLINE_RESULTS_BUCKET}/")
    return (
        "the manifest names no training_results: a scheduler with a default results store "
        f"({_DEFAULT_VARIABLES['training_results']}) keeps the results in its bucket under {folder}, on the training "
        "data's object store; one without refuses the manifest at submit"
    )


_DEFAULT_VARIABLES = {
    "cpus": "LEARNERKIT_DEFAULT_CPUS",
    "memory": "LEARNERKIT_DEFAULT_MEMORY",
    "storage": "LEARNERKIT_DEFAULT_STORAGE",
    "training_results": "LEARNERKIT_RESULTS_BUCKET",
}


def defaults_applied(job: JobManifest) -> dict[str, float | int | str]:
    """What the manifest left out, with the value each got (`cpus`, `memory_bytes`, `storage_bytes`,
    `training_results`)."""
    r = job.resources
    values = {"cpus": r.cpus, "memory": r.memory_bytes, "storage": r.storage_bytes or 0}
    applied: dict[str, float | int | str] = {
        (key if key == "cpus" else f"{key}_bytes"): values[key] for key in r.defaulted
    }
    results = default_results(job)
    if results is not None:
        applied["training_results"] = results
    return applied


def _defaults_source(key: str) -> str:
    """Where a default came from: the scheduler's variable where this environment sets it, else FfDL."""
    variable = _DEFAULT_VARIABLES[key]
    return variable if os.environ.get(variable) else "FfDL's default"


def _checked_model(model: Path, locked: Mapping[str, str]) -> ModelSummary:
    from learnerkit.scheduler.modelcode.archive import check_model_archive, model_archive  # only a validate with code

    with tempfile.TemporaryDirectory(prefix="learnerkit-validate-") as workdir:
        return check_model_archive(model_archive(model, Path(workdir)), name=str(model), locked=locked)


def _locked(root: Path, job: JobManifest) -> Mapping[str, str]:
    """The locked packages of the image the job runs, as submit picks it (none for an image of the tenant's)."""
    from learnerkit.scheduler.images.catalog import ImageCatalog  # only a validate with code

    catalog = ImageCatalog(root)
    return catalog.locked_of(catalog.resolve(job))


def framework_catalog(root: Path) -> FrameworkCatalog:
    """Each framework of the matrix with every way a manifest may name its versions."""
    from learnerkit_build.recipes.matrix import load_matrix  # imported here: only `validate` pays for the build tool

    catalog: dict[str, set[str]] = {}
    for image in load_matrix(root).training_images:
        names = catalog.setdefault(image.framework.name, set())
        names.update({image.version, f"{image.version}-{image.variant_name}", image.tag})
    return catalog


def _show(path: Path, job: JobManifest, model: ModelSummary | None, results_source: str, left: dict[str, str]) -> None:
    r = job.resources
    table = Table(title=f"{path}: valid", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    table.add_row("name", job.name)
    table.add_row("framework", f"{job.framework.name} {job.framework.version}")
    if job.image:
        table.add_row("image", job.image)
    gpus = f"{r.gpus} gpus" + (f" ({r.gpu_type})" if r.gpu_type else "")
    storage = f", {format_size(r.storage_bytes)} storage" if r.storage_bytes else ""
    table.add_row("learners", f"{r.learners} x {r.cpus:g} cpus, {gpus}, {format_size(r.memory_bytes)} memory{storage}")
    shown = {
        "cpus": f"cpus {r.cpus:g}",
        "memory": f"memory {format_size(r.memory_bytes)}",
        "storage": f"storage {format_size(r.storage_bytes or 0)}",
    }
    applied = [f"{shown[k]} ({_defaults_source(k)})" for k in r.defaulted]
    results = default_results(job)
    if results is not None:
        source = "on a scheduler with a default results store" if left else results_source
        applied.append(f"training_results {results} ({source})")
    if applied:
        table.add_row("defaults", f"{', '.join(applied)}: not in the manifest")
    if job.framework.target != job.framework.name:
        table.add_row("runs as", f"{job.framework.target} (FfDL's {job.framework.name})")
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
    for spec in job.evaluations:
        data = spec.data
        in_store = f" in {data.store}" if data.store else ""
        table.add_row("evaluation", f"{spec.name} ({spec.kind}): {data.file}{in_store}, labels in {data.label!r}")
    if job.catalog is not None:
        alias = f", alias {job.catalog.alias} moved to it" if job.catalog.alias else ""
        table.add_row("catalog", f"registers model {job.catalog.name} once its evaluations pass{alias}")
    if model is not None:
        files = f"{model.files} file{'' if model.files == 1 else 's'}"
        table.add_row("model code", f"{files}, {decimal(model.expanded_bytes)}")
        table.add_row("requirements", ", ".join(model.requirements) or "none")
    console.print(keep_whole(table))
    for field, why in left.items():
        console.print(
            f"[yellow]left to submit[/]: {field}: {escape(why)}. The one check validate leaves to submit:"
            " validate cannot know the scheduler's settings (--results-bucket BUCKET says where the results go on a"
            " scheduler with that bucket).",
            highlight=False,
        )
