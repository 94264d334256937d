"""Options and helpers the command modules share: error handling, spec selection, build inputs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from learnerkit.common.output import console, emit
from learnerkit.common.project import find_project_root
from learnerkit_build import views
from learnerkit_build.buildkit import LogSink
from learnerkit_build.images import BuildResult
from learnerkit_build.matrix import load_matrix
from learnerkit_build.progress import BuildProgress
from learnerkit_build.render import BuildInputs
from learnerkit_build.spec import ImageSpec

F = TypeVar("F", bound=Callable[..., Any])
Build = Callable[[LogSink], BuildResult]
"""One image's build, given the sink for its streamed log."""
DEFAULT_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


select_options = [
    click.argument("specs", nargs=-1),
    click.option("--all", "select_all", is_flag=True, help="every image of the matrix"),
    click.option("--variant", "variants", multiple=True, help="only these variants (e.g. cpu); repeatable"),
]
inputs_options = [
    click.option(
        "--wheelhouse",
        type=click.Path(path_type=Path, file_okay=False, exists=True),
        default=None,
        envvar="LEARNERKIT_WHEELHOUSE",
        help="folder of wheels pip may use (never copied into a layer)",
    ),
    click.option(
        "--ca-bundle",
        type=click.Path(path_type=Path, dir_okay=False, exists=True),
        default=None,
        envvar="LEARNERKIT_CA_BUNDLE",
        help=f"CA bundle for pip inside builds [default: {DEFAULT_CA_BUNDLE}]",
    ),
    click.option("--no-ca-bundle", is_flag=True, help="pass no CA bundle into builds"),
    click.option("--index-url", default=None, envvar="LEARNERKIT_INDEX_URL", help="pip index replacing PyPI"),
]


def apply(options: list[Callable[[F], F]]) -> Callable[[F], F]:
    def decorate(func: F) -> F:
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


def build_inputs(
    wheelhouse: Path | None, ca_bundle: Path | None, no_ca_bundle: bool, index_url: str | None
) -> BuildInputs:
    if ca_bundle is None and not no_ca_bundle and DEFAULT_CA_BUNDLE.is_file():
        ca_bundle = DEFAULT_CA_BUNDLE
    return BuildInputs(wheelhouse=wheelhouse, ca_bundle=None if no_ca_bundle else ca_bundle, index_url=index_url)


def selected(
    root: Path | None, specs: tuple[str, ...], select_all: bool, variants: tuple[str, ...]
) -> tuple[Path, list[ImageSpec]]:
    project = find_project_root(root)
    images = load_matrix(project).select(list(specs), select_all=select_all, variants=list(variants) or None)
    return project, images


def run_builds(builds: Sequence[tuple[str, Build]], *, output: str, quiet_log: bool) -> None:
    """Run builds in order with a progress bar each (and the streamed log), then show or emit the results."""
    results = []
    with BuildProgress(enabled=output != "json", show_log=not quiet_log) as progress:
        for name, build in builds:
            with progress.image(name) as on_line:
                results.append(build(on_line))
    emit(output, results, lambda: console.print(views.build_table(results)))
