"""`learnerkit sweep ...`: argument parsing and printing only; the work is in the `sweeps` room.

`validate` works offline: the search file, the manifest it names, and the two together, as a submit checks
them; it shows the rungs and the trials' parameters the seed fixes (all of them for random and grid search, PBT's first
generation, none for TPE, which chooses from the results). The other verbs talk to the
scheduler's REST API, as `job` does (``--url``, ``--token``).
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import click
from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from controller_sidecar.atomicfile import write_atomic
from learnerkit.common.errors import LearnerkitError
from learnerkit.common.output import (
    OutputFormat,
    console,
    emit,
    err_console,
    fail,
    fail_with_problems,
    keep_whole,
    output_option,
)
from learnerkit.common.project import find_project_root
from learnerkit.common.yamlfile import YamlError
from learnerkit.common.yamlvars import ExpandedYaml
from learnerkit.scheduler.cli_job import connected, framework_catalog, image_option, model_argument
from learnerkit.scheduler.client.http import SchedulerClient
from learnerkit.scheduler.client.manifestfile import read_expanded, secrets_hidden
from learnerkit.scheduler.client.sweeptables import parameters_text, rungs_table, sweeps_table, trials_table
from learnerkit.scheduler.config.settings import resource_defaults
from learnerkit.scheduler.sweeps.best import best_trial
from learnerkit.scheduler.sweeps.katib import import_katib
from learnerkit.scheduler.sweeps.load import Sweep, load_sweep
from learnerkit.scheduler.sweeps.space import Config
from learnerkit.scheduler.sweeps.suggest import known_configs


@click.group("sweep")
def sweep_group() -> None:
    """Search hyperparameters: a group of trial jobs, early stopping on checkpoints."""


@sweep_group.command("validate")
@click.argument("sweep", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--root",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="project whose frameworks/ lists the frameworks a job may name [default: found from cwd]",
)
@output_option
def validate(sweep: Path, root: Path | None, output: str) -> None:
    """Check SWEEP (a search file) and the manifest it names as `submit` would, their ${NAME} references filled
    from this shell's environment; show the rungs and the trials' parameters, or every problem and exit 1."""
    try:
        catalog = framework_catalog(find_project_root(root))
        checked = load_sweep(sweep, catalog, defaults=resource_defaults(os.environ), read=_read)
    except YamlError as e:
        fail_with_problems(output, e, "sweep")
    except LearnerkitError as e:
        fail(output, e)
        return
    spec = checked.spec
    configs = known_configs(spec)
    data = {
        "valid": True,
        "manifest": str(spec.manifest),
        "algorithm": spec.algorithm.name.value,
        "objective": {"metric": spec.objective.metric, "goal": spec.objective.goal.value},
        "budget_unit": spec.budget.unit.value,
        "rungs": list(spec.rungs),
        "trials": [{"trial": i, "parameters": dict(c)} for i, c in enumerate(configs)],
    }
    emit(output, data, lambda: _show(checked, configs))


def _read(path: Path) -> ExpandedYaml:
    return read_expanded(path, os.environ)


def _show(sweep: Sweep, configs: list[Config]) -> None:
    spec = sweep.spec
    console.print(
        f"[green]valid[/]: {spec.trials} trials of {sweep.manifest.name} ({spec.algorithm.name.value}), "
        f"{spec.objective.goal.value} {spec.objective.metric}; rungs at {spec.budget.unit.value}s "
        f"{', '.join(str(r) for r in spec.rungs)}; {spec.concurrency} at once",
        highlight=False,
    )
    if not configs:
        console.print("each trial's parameters are chosen from the results before it (tpe)", highlight=False)
        return
    if len(configs) < spec.trials:
        console.print(
            f"the first {len(configs)} trials' parameters are known now; the others' come from the results",
            highlight=False,
        )
    console.print(parameters_view(spec.space.names, configs, console.width))


def parameters_view(names: Sequence[str], configs: list[Config], width: int) -> RenderableType:
    """One row per trial, one column per parameter, where ``width`` holds every name and value whole; else a line
    per trial (``trial 0: lr=0.001, ...``), so no name is broken."""
    cells = [[str(index), *(_format(config[name]) for name in names)] for index, config in enumerate(configs)]
    columns = zip(["trial", *names], *cells, strict=True)
    if sum(max(len(cell) for cell in column) + 2 for column in columns) - 2 > width:
        lines = [f"trial {row[0]}: " + ", ".join(map("=".join, zip(names, row[1:], strict=True))) for row in cells]
        return Group(*(Text(line) for line in lines))
    table = Table("trial", *names, box=None, pad_edge=False)
    for row in cells:
        table.add_row(*row)
    return keep_whole(table, "trial", *names)


def _format(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


@sweep_group.command("submit")
@click.argument("sweep", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@model_argument
@image_option
@connected
def submit(sweep: Path, model: Path | None, image: str | None, client: SchedulerClient, output: str) -> None:
    """Start the sweep SWEEP describes (a search file naming its manifest), every trial running the model
    code MODEL (a folder or a .zip). Their ${NAME} references are filled from this shell's environment first,
    as validate fills them."""
    checked = load_sweep(sweep, read=_read)  # the problems a scheduler would find, found here first
    search, manifest = checked.search_yaml.text, checked.manifest_yaml.text
    names = (sweep.name, checked.spec.manifest.name)
    with secrets_hidden(checked.manifest_yaml):
        if model is None:
            view = client.submit_sweep(search, manifest, search_source=names[0], manifest_source=names[1], image=image)
        else:
            from learnerkit.scheduler.modelcode.archive import check_model_archive, model_archive  # only with code

            with tempfile.TemporaryDirectory(prefix="learnerkit-sweep-") as workdir:
                archive = model_archive(model, Path(workdir))
                check_model_archive(archive, name=str(model))
                view = client.submit_sweep(
                    search, manifest, search_source=names[0], manifest_source=names[1], image=image, model=archive
                )
    emit(output, view, lambda: console.print(f"submitted sweep [bold]{escape(view.sweep_id)}[/]: {view.status}"))


@sweep_group.command("list")
@connected
def list_sweeps(client: SchedulerClient, output: str) -> None:
    """The tenant's sweeps."""
    sweeps = client.list_sweeps()
    emit(output, sweeps, lambda: console.print(sweeps_table(sweeps)))


@sweep_group.command("status")
@click.argument("sweep_id")
@connected
def status(sweep_id: str, client: SchedulerClient, output: str) -> None:
    """SWEEP_ID's rungs, and each trial: its job, state, rung, result and why it continues, is paused or was
    stopped."""
    view = client.get_sweep(sweep_id)

    def show() -> None:
        console.print(
            f"sweep [bold]{escape(view.sweep_id)}[/]: {escape(view.status)} {escape(view.reason)}; "
            f"{view.algorithm}, {view.goal} {escape(view.metric)}; {len(view.trials)} of {view.trials_total} "
            f"trials started; checkpoints removed: {view.freed_bytes} bytes from the object store, none from disk"
            " (a paused trial's job volume goes with its learner pair when it pauses)",
            highlight=False,
        )
        console.print(rungs_table(view))
        console.print(trials_table(view))

    emit(output, view, show)


def _verb(name: str, doc: str) -> None:
    @sweep_group.command(name, help=doc)
    @click.argument("sweep_id")
    @connected
    def command(sweep_id: str, client: SchedulerClient, output: str) -> None:
        view = client.sweep_verb(sweep_id, name)
        emit(output, view, lambda: console.print(f"sweep [bold]{escape(view.sweep_id)}[/]: {view.status}"))


_verb("halt", "Halt SWEEP_ID: no trial starts or is promoted; running trials halt onto their checkpoints.")
_verb("resume", "Resume SWEEP_ID: halted trials go on from their checkpoints.")
_verb("cancel", "Cancel SWEEP_ID: every running trial is cancelled.")


@sweep_group.command("best")
@click.argument("sweep_id")
@connected
def best(sweep_id: str, client: SchedulerClient, output: str) -> None:
    """SWEEP_ID's best trial so far: the one that went furthest, best at its last rung; its parameters,
    results and where its outputs are."""
    view = client.get_sweep(sweep_id)
    trial = best_trial(view)
    if trial is None:
        fail(output, LearnerkitError(f"sweep {sweep_id}: no trial has finished a rung yet"))
        return

    def show() -> None:
        console.print(
            f"best trial {trial.index} ([bold]{escape(trial.job_id)}[/]), {escape(trial.state)}", highlight=False
        )
        console.print(f"parameters: {escape(parameters_text(trial))}", highlight=False)
        results = ", ".join(f"{v:.6g}" for v in trial.results)
        console.print(f"{escape(view.metric)} at each rung: {results}", highlight=False)
        console.print(f"outputs: {escape(trial.results_location)}", highlight=False, soft_wrap=True)

    emit(output, {"sweep_id": view.sweep_id, "metric": view.metric, "goal": view.goal, "trial": trial}, show)


@sweep_group.group("import")
def import_group() -> None:
    """Turn another tool's experiment into a search file."""


@import_group.command("katib")
@click.argument("experiment", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option(
    "-o",
    "--out",
    "out",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="write the search file here (atomically) instead of standard output",
)
@click.option("--manifest", default="manifest.yml", show_default=True, help="the manifest the search file names")
@click.option(
    "--output",
    "output",
    type=click.Choice([f.value for f in OutputFormat]),
    default=OutputFormat.TABLE.value,
    show_default=True,
    help="table: the search file itself; json: it and what was not mapped (here -o names the file to write)",
)
def import_katib_command(experiment: Path, out: Path | None, manifest: str, output: str) -> None:
    """Print a search file equivalent to EXPERIMENT, a Katib v1beta1 Experiment; what it could not map goes to
    standard error, one line each."""
    try:
        imported = import_katib(experiment.read_text(encoding="utf-8"), experiment, manifest=manifest)
    except YamlError as e:
        fail_with_problems(output, e, "experiment")
    except (OSError, UnicodeDecodeError) as e:
        fail(output, LearnerkitError(f"{experiment}: cannot be read: {e}"))
        return
    if out is not None:
        write_atomic(out, imported.search_file.encode())
    data = {"search_file": imported.search_file, "unmapped": imported.unmapped, "written": str(out) if out else None}

    def show() -> None:
        if out is None:
            sys.stdout.write(imported.search_file)
        else:
            err_console.print(f"wrote {escape(str(out))}", highlight=False)
        for line in imported.unmapped:
            err_console.print(f"not mapped: {escape(line)}", highlight=False, soft_wrap=True)

    emit(output, data, show)
