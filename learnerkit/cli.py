"""The `learnerkit` command: one group per package, each defined whole in that package's `cli_<group>` module.

A group's module is imported only when the group runs, so `learnerkit job status` pays for the job client and
nothing else (docs/architecture.md). The root's help lists each group from :data:`GROUPS` without importing it;
a unit test keeps those lines equal to each group's own help.
"""

from __future__ import annotations

import importlib
from typing import NamedTuple

import click

from learnerkit import __version__


class GroupEntry(NamedTuple):
    module: str
    attribute: str
    help: str
    """The group's short help, as its docstring's first line gives it."""


GROUPS: dict[str, GroupEntry] = {
    "image": GroupEntry(
        "learnerkit_build.cli_image", "image_group", "Render, build, test, scan and publish learner images."
    ),
    "framework": GroupEntry("learnerkit_build.cli_framework", "framework_group", "Add frameworks to the matrix."),
    "sidecar": GroupEntry(
        "learnerkit.pair.cli_sidecar",
        "sidecar_group",
        "The controller sidecar: its image, and learner pairs run by hand.",
    ),
    "job": GroupEntry(
        "learnerkit.scheduler.cli_job", "job_group", "Check and run training jobs described by FfDL manifests."
    ),
    "sweep": GroupEntry(
        "learnerkit.scheduler.cli_sweep",
        "sweep_group",
        "Search hyperparameters: a group of trial jobs, early stopping on checkpoints.",
    ),
    "model": GroupEntry(
        "learnerkit.scheduler.cli_model",
        "model_group",
        "The model catalog: versions by digest, aliases moved on proof, lineage, model cards.",
    ),
    "scheduler": GroupEntry(
        "learnerkit.scheduler.cli_scheduler",
        "scheduler_group",
        "Run the scheduler and manage its tenants' tokens and its signing key.",
    ),
    "dev": GroupEntry(
        "learnerkit.dev.cli_dev",
        "dev_group",
        "Local services for development and the demo: etcd, SeaweedFS (S3), the scheduler, Prometheus.",
    ),
}


def load_group(name: str) -> click.Command:
    entry = GROUPS[name]
    command = getattr(importlib.import_module(entry.module), entry.attribute)
    assert isinstance(command, click.Command)
    return command


class LazyGroups(click.Group):
    """Lists the groups of :data:`GROUPS` and imports one only when it is asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(GROUPS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return load_group(cmd_name) if cmd_name in GROUPS else None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, GROUPS[name].help) for name in self.list_commands(ctx)])


@click.group(cls=LazyGroups, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="learnerkit")
def cli() -> None:
    """Hardened learner images, a controller sidecar and a minimal scheduler."""


def main() -> None:
    cli(auto_envvar_prefix="LEARNERKIT")
