"""`learnerkit sweep ...`: argument parsing and printing only; the work is in the `sweeps` room.

`validate` works offline: the search file, the manifest it names, and the two together, as a submit checks
them; it shows the rungs and every trial's parameters (the seed fixes them).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import NoReturn

import click
from rich.table import Table

from learnerkit.common.errors import LearnerkitError
from learnerkit.common.output import OutputFormat, console, emit, err_console, fail, output_option
from learnerkit.common.project import find_project_root
from learnerkit.common.yamlfile import YamlError, format_field_path
from learnerkit.scheduler.config.settings import resource_defaults
from learnerkit.scheduler.sweeps.load import Sweep, load_sweep
from learnerkit.scheduler.sweeps.sampling import trial_configs
from learnerkit.scheduler.sweeps.space import Config
from learnerkit.scheduler.sweeps.spec import AlgorithmName


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
    """Check SWEEP (a search file) and the manifest it names as `submit` would; show the rungs and the
    trials' parameters, or every problem and exit 1."""
    from learnerkit.scheduler.cli_job import framework_catalog  # the build tool's matrix, as `job validate`

    try:
        checked = load_sweep(sweep, framework_catalog(find_project_root(root)), defaults=resource_defaults(os.environ))
    except YamlError as e:
        _report_problems(output, e)
    except LearnerkitError as e:
        fail(output, e)
        return
    spec = checked.spec
    configs = trial_configs(
        spec.space, seed=spec.seed, trials=spec.trials, grid=spec.algorithm.name is AlgorithmName.GRID
    )
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


def _show(sweep: Sweep, configs: list[Config]) -> None:
    spec = sweep.spec
    console.print(
        f"[green]valid[/]: {spec.trials} trials of {sweep.manifest.name} ({spec.algorithm.name.value}), "
        f"{spec.objective.goal.value} {spec.objective.metric}; rungs at {spec.budget.unit.value}s "
        f"{', '.join(str(r) for r in spec.rungs)}; {spec.concurrency} at once",
        highlight=False,
    )
    table = Table("trial", *spec.space.names, box=None, pad_edge=False)
    for index, config in enumerate(configs):
        table.add_row(str(index), *(_format(config[name]) for name in spec.space.names))
    console.print(table)


def _format(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _report_problems(output: str, error: YamlError) -> NoReturn:
    if output == OutputFormat.JSON.value:
        problems = [
            {"file": str(p.path), "line": p.line, "field": format_field_path(p.loc), "message": p.message}
            for p in error.problems
        ]
        sys.stdout.write(json.dumps({"valid": False, "problems": problems}, indent=2) + "\n")
    else:
        count = len(error.problems)
        err_console.print(f"[bold red]error:[/] {count} problem{'s' if count != 1 else ''} in the sweep")
        for problem in error.problems:
            err_console.print(str(problem), markup=False, highlight=False, soft_wrap=True)
    raise SystemExit(1)
