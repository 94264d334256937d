"""The `learnerkit` command: one group per package, each defined in that package's own cli module."""

from __future__ import annotations

import click

from learnerkit import __version__
from learnerkit.dev.cli_dev import dev_group
from learnerkit.pair.cli_sidecar import sidecar_group
from learnerkit.scheduler.cli_job import job_group
from learnerkit.scheduler.cli_scheduler import scheduler_group
from learnerkit_build.cli_framework import framework_group
from learnerkit_build.cli_image import image_group


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="learnerkit")
def cli() -> None:
    """Hardened learner images, a controller sidecar and a minimal scheduler."""


cli.add_command(image_group)
cli.add_command(framework_group)
cli.add_command(sidecar_group)
cli.add_command(job_group)
cli.add_command(scheduler_group)
cli.add_command(dev_group)


def main() -> None:
    cli(auto_envvar_prefix="LEARNERKIT")
