"""`learnerkit image ...` and `learnerkit framework ...`: argument parsing only; the work is elsewhere."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

import click

from learnerkit.common.output import console, emit, handles_errors, output_option
from learnerkit.common.project import find_project_root, root_option
from learnerkit_build import views
from learnerkit_build.baseimage import BASES, ensure_base, recipe_for
from learnerkit_build.clitools import apply, build_inputs, inputs_options, run_builds, select_options, selected
from learnerkit_build.images import build_image, render_image
from learnerkit_build.lint import lint_dockerfile
from learnerkit_build.matrix import load_matrix
from learnerkit_build.progress import BuildProgress
from learnerkit_build.prune import prune
from learnerkit_build.scaffold import scaffold_framework
from learnerkit_build.scancli import register_scan_commands


@click.group("image")
def image_group() -> None:
    """Render, build, test, scan and publish learner images."""


@image_group.command("ls")
@root_option
@output_option
@handles_errors
def ls_command(root: Path | None, output: str) -> None:
    """List the image matrix and what is built."""
    project = find_project_root(root)
    rows = views.image_rows(load_matrix(project).images)
    emit(output, rows, lambda: console.print(views.image_table(rows)))


@image_group.command("render")
@apply(select_options)
@apply(inputs_options)
@click.option(
    "--dest",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="write <dest>/<framework>/<tag>.Dockerfile instead of printing",
)
@root_option
@output_option
@handles_errors
def render_command(
    specs: tuple[str, ...],
    select_all: bool,
    variants: tuple[str, ...],
    wheelhouse: Path | None,
    ca_bundle: Path | None,
    no_ca_bundle: bool,
    index_url: str | None,
    dest: Path | None,
    root: Path | None,
    output: str,
) -> None:
    """Render Dockerfiles from the templates (no engine needed)."""
    project, images = selected(root, specs, select_all, variants)
    inputs = build_inputs(wheelhouse, ca_bundle, no_ca_bundle, index_url)
    rendered = {image.name: render_image(project, image, inputs) for image in images}
    written = views.write_rendered(dest, images, rendered) if dest else {}
    data = [{"spec": name, "dockerfile": written.get(name) or text} for name, text in rendered.items()]
    emit(output, data, lambda: views.show_rendered(rendered, written))


@image_group.command("lint")
@apply(select_options)
@root_option
@output_option
@handles_errors
def lint_command(
    specs: tuple[str, ...], select_all: bool, variants: tuple[str, ...], root: Path | None, output: str
) -> None:
    """Render and lint Dockerfiles with hadolint and the project's .hadolint.yaml (no engine needed)."""
    project, images = selected(root, specs, select_all, variants)
    inputs = build_inputs(None, None, False, None)
    reports = [
        lint_dockerfile(image.name, render_image(project, image, inputs), project / ".hadolint.yaml")
        for image in images
    ]
    emit(output, reports, lambda: console.print(views.lint_table(reports)))
    if not all(report.passed for report in reports):
        raise SystemExit(1)


@image_group.command("prune")
@apply(select_options)
@click.option("--dry-run", is_flag=True, help="list what would be removed")
@root_option
@output_option
@handles_errors
def prune_command(
    specs: tuple[str, ...], select_all: bool, variants: tuple[str, ...], dry_run: bool, root: Path | None, output: str
) -> None:
    """Remove content tags of superseded builds (all images when no spec is given)."""
    _, images = selected(root, specs, select_all or not specs, variants)
    results = prune(images, dry_run=dry_run)
    rows = [{"tag": result.tag, "status": result.status} for result in results]
    emit(output, results, lambda: console.print(views.simple_table(rows) if rows else "nothing to prune"))


@image_group.command("base")
@click.option("--rebuild", is_flag=True, help="make it again even if the recipe's image exists")
@output_option
@handles_errors
def base_command(rebuild: bool, output: str) -> None:
    """Make the local base images (debootstrap + docker import), cached by recipe."""
    results = []
    with BuildProgress(enabled=output != "json") as progress:
        for name in sorted(BASES):
            with progress.image(f"base {name}") as on_line:
                image_id, made = ensure_base(recipe_for(name), on_line, rebuild=rebuild)
            results.append({"base": name, "image_id": image_id, "status": "built" if made else "cached"})
    emit(output, results, lambda: console.print(views.simple_table(results)))


@image_group.command("build")
@apply(select_options)
@apply(inputs_options)
@click.option("--rebuild", is_flag=True, help="build even if an image with the same inputs hash exists")
@click.option("--quiet-log", is_flag=True, help="show progress bars without the build log")
@root_option
@output_option
@handles_errors
def build_command(
    specs: tuple[str, ...],
    select_all: bool,
    variants: tuple[str, ...],
    wheelhouse: Path | None,
    ca_bundle: Path | None,
    no_ca_bundle: bool,
    index_url: str | None,
    rebuild: bool,
    quiet_log: bool,
    root: Path | None,
    output: str,
) -> None:
    """Build images whose inputs changed; tag each by version and by inputs hash."""
    project, images = selected(root, specs, select_all, variants)
    inputs = build_inputs(wheelhouse, ca_bundle, no_ca_bundle, index_url)
    builds = [(image.name, partial(build_image, project, image, inputs, rebuild=rebuild)) for image in images]
    run_builds(builds, output=output, quiet_log=quiet_log)


@image_group.command("test")
@apply(select_options)
@click.option("--check", "checks", multiple=True, help="run only these checks (see `--list-checks`); repeatable")
@click.option("--list-checks", is_flag=True, help="list the checks and exit")
@root_option
@output_option
@handles_errors
def test_command(
    specs: tuple[str, ...],
    select_all: bool,
    variants: tuple[str, ...],
    checks: tuple[str, ...],
    list_checks: bool,
    root: Path | None,
    output: str,
) -> None:
    """Run the contract checks and the smoke training (halt and resume) against built images."""
    from learnerkit_build.imagetest import CHECKS, run_image_tests

    if list_checks:
        rows = [{"check": name, "description": check.description} for name, check in CHECKS.items()]
        emit(output, rows, lambda: console.print(views.simple_table(rows)))
        return
    project, images = selected(root, specs, select_all, variants)
    reports = run_image_tests(project, images, list(checks), verbose=output != "json")
    emit(output, reports, lambda: console.print(views.test_table(reports)))
    if not all(report.passed for report in reports):
        raise SystemExit(1)


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


register_scan_commands(image_group)
