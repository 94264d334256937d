"""`learnerkit framework new`: scaffold a framework folder; argument parsing only, the work is in `scaffold`."""

from __future__ import annotations

import os
from pathlib import Path

import click

from learnerkit.common.output import emit, handles_errors, output_option
from learnerkit.common.project import find_project_root, root_option
from learnerkit_build import views
from learnerkit_build.recipes.scaffold import scaffold_framework


@click.group("framework")
def framework_group() -> None:
    """Add frameworks to the matrix."""


@framework_group.command("new")
@click.argument("name")
@click.option("--description", default=None, help="one line for framework.yaml")
@click.option("--package", "packages", multiple=True, help="pip requirement of the cpu variant; repeatable")
@root_option
@output_option
@handles_errors
def new_command(name: str, description: str | None, packages: tuple[str, ...], root: Path | None, output: str) -> None:
    """Scaffold frameworks/NAME with framework.yaml, Dockerfile.j2 and a smoke script."""
    project = find_project_root(root)
    created = scaffold_framework(project, name, description, list(packages))
    rel = [os.path.relpath(path, project) for path in created]
    emit(output, {"framework": name, "created": rel}, lambda: views.show_created(name, rel))
