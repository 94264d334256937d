"""Options and helpers the command modules share: error handling, spec selection, build inputs."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

from learnerkit.common.output import console, emit
from learnerkit.common.project import find_project_root
from learnerkit_build import views
from learnerkit_build.builds.baseimage import ensure_base, recipe_for
from learnerkit_build.builds.buildkit import LogSink, stop_running_builds
from learnerkit_build.builds.images import BuildPlan, BuildResult, cached_result, make_image, plan_digest, plan_image
from learnerkit_build.builds.schedule import longest_first, record_durations, recorded_durations, run_at_most
from learnerkit_build.progress import BuildProgress, FetchProgress, build_log
from learnerkit_build.recipes.filehashes import remembering
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.recipes.pipconfig import (
    DEFAULT_CA_BUNDLE,
    BuildOptions,
    Given,
    ResolvedInputs,
    Setting,
    pip_config,
    resolve_build_inputs,
)
from learnerkit_build.recipes.render import BuildInputs
from learnerkit_build.recipes.spec import ImageSpec
from learnerkit_build.recipes.tiers import load_tier

if TYPE_CHECKING:
    from learnerkit_build.builds.prefetch import FillReport

F = TypeVar("F", bound=Callable[..., Any])
Build = Callable[[LogSink], BuildResult]
"""One image's build, given the sink for its streamed log."""


select_options = [
    click.argument("specs", nargs=-1),
    click.option("--all", "select_all", is_flag=True, help="every image of the matrix"),
    click.option("--variant", "variants", multiple=True, help="only these variants (e.g. cpu); repeatable"),
    click.option("--tier", default=None, help="the images of this tier of image-tiers.yaml (test, full)"),
]
inputs_options = [
    click.option(
        "--index-url",
        default=None,
        envvar="LEARNERKIT_INDEX_URL",
        help="pip index replacing PyPI [default: the host's pip configuration]",
    ),
    click.option(
        "--extra-index-url",
        "extra_index_urls",
        multiple=True,
        envvar="LEARNERKIT_EXTRA_INDEX_URLS",
        help="a further pip index; repeatable [default: the host's pip configuration]",
    ),
    click.option(
        "--find-links",
        multiple=True,
        envvar="LEARNERKIT_FIND_LINKS",
        help="a folder of wheels (mounted into pip's step, never in a layer) or a URL; repeatable "
        "[default: the host's pip configuration]",
    ),
    click.option(
        "--ca-bundle",
        type=click.Path(path_type=Path, dir_okay=False, exists=True),
        default=None,
        envvar="LEARNERKIT_CA_BUNDLE",
        help=f"CA bundle for pip inside builds [default: pip's `cert`, else {DEFAULT_CA_BUNDLE}]",
    ),
    click.option("--no-ca-bundle", is_flag=True, help="pass no CA bundle into builds"),
]


def apply(options: list[Callable[[F], F]]) -> Callable[[F], F]:
    def decorate(func: F) -> F:
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


def build_inputs(
    index_url: str | None,
    extra_index_urls: tuple[str, ...],
    find_links: tuple[str, ...],
    ca_bundle: Path | None,
    no_ca_bundle: bool,
    project: Path | None = None,
) -> ResolvedInputs:
    """The command's build inputs: its options and variables first, then the host's pip configuration
    (remembered in `project`'s `.learnerkit/` where one is given: `pip_config`)."""
    options = BuildOptions(
        index_url=_given(index_url, "index_url", "--index-url"),
        extra_index_urls=tuple(
            Given(url, _source("extra_index_urls", "--extra-index-url")) for url in extra_index_urls
        ),
        find_links=tuple(Given(link, _source("find_links", "--find-links")) for link in find_links),
        ca_bundle=_given(str(ca_bundle) if ca_bundle else None, "ca_bundle", "--ca-bundle"),
        no_ca_bundle=no_ca_bundle,
    )
    return resolve_build_inputs(options, pip_config(project))


def _given(value: str | None, param: str, flag: str) -> Given | None:
    return Given(value, _source(param, flag)) if value is not None else None


def _source(param: str, flag: str) -> str:
    """`--flag` or `$VARIABLE`: where click took the parameter's value from."""
    context = click.get_current_context()
    if context.get_parameter_source(param) is ParameterSource.ENVIRONMENT:
        option = next(item for item in context.command.params if item.name == param)
        return f"${option.envvar}"
    return flag


def selected(
    root: Path | None, specs: tuple[str, ...], select_all: bool, variants: tuple[str, ...], tier: str | None
) -> tuple[Path, list[ImageSpec]]:
    project = find_project_root(root)
    images = load_matrix(project).select(
        list(specs),
        select_all=select_all,
        variants=list(variants) or None,
        tier=load_tier(project, tier) if tier else None,
    )
    return project, images


Planned = tuple[str, Build | BuildResult]
"""One image of a selection: its build, or its result already (cached, skipped)."""


def run_builds(
    planned: Sequence[Planned],
    *,
    output: str,
    quiet_log: bool,
    settings: Sequence[Setting] = (),
    jobs: int = 1,
    fill: FillReport | None = None,
) -> None:
    """Say where pip looks, run the builds (the longest first by the durations recorded here, `jobs` at a time)
    with a progress bar each and the streamed log, each line under its image's name and in its own log file; then
    show or emit every image's result in the order given, and how the lock cache was filled (`fill`)."""
    if output != "json" and settings:
        console.print(views.settings_table(settings))
    by_name = {name: build for name, build in planned if not isinstance(build, BuildResult)}
    durations = recorded_durations()
    order = longest_first(list(by_name), durations)
    if output != "json" and by_name:
        console.print(views.estimate_line(order, durations, jobs))
    with BuildProgress(enabled=output != "json" and bool(by_name), show_log=not quiet_log) as progress:

        def task(name: str) -> Callable[[], BuildResult]:
            def run() -> BuildResult:
                with progress.image(name, durations.get(name)) as on_line, build_log(name) as to_file:

                    def both(line: str) -> None:
                        on_line(line)
                        to_file(line)

                    return by_name[name](both)

            return run

        done = run_at_most([(name, task(name)) for name in order], jobs, on_interrupt=stop_running_builds)
    results = [build if isinstance(build, BuildResult) else done[name] for name, build in planned]
    record_durations({r.spec: r.seconds for r in results if r.status == "built"})
    emit(
        output,
        {"images": results, "fill": fill},
        lambda: console.print(views.build_table(results)),
    )


def prepare_builds(
    root: Path,
    images: Sequence[ImageSpec],
    inputs: BuildInputs,
    *,
    rebuild: bool,
    record_size: bool,
    downloads: int,
    output: str,
) -> tuple[list[Planned], FillReport | None]:
    """Before a matrix builds: make each local base its images stand on (one at a time: they are the images' only
    shared step), find which images will build (not built under their inputs hash, or `rebuild`), then fill the lock
    cache for those images' locks at once, with a progress line. A selection already built plans and fetches
    nothing (the fetchers are not even imported)."""
    show = output != "json"
    with BuildProgress(enabled=show, show_log=False) as progress:
        for local in sorted({image.local_base for image in images if image.local_base}):
            with progress.image(f"base {local}") as on_line:
                ensure_base(recipe_for(local), on_line)
    planned: list[Planned] = []
    to_build: list[ImageSpec] = []
    with remembering(root):
        for image in images:
            started = time.monotonic()
            plan = plan_image(root, image, inputs, lambda line: None)
            if isinstance(plan, BuildResult):
                planned.append((image.name, plan))
                continue
            build = planned_build(root, plan, inputs, rebuild=rebuild, record_size=record_size, started=started)
            planned.append((image.name, build))
            if not isinstance(build, BuildResult):
                to_build.append(image)
    if not to_build:
        return planned, None
    from learnerkit_build.builds.prefetch import fill_selection  # docker-py, requests: only where a build runs

    with FetchProgress(enabled=show) as fetching:
        report = fill_selection(
            root, to_build, inputs, jobs=downloads, on_plan=fetching.planned, on_progress=fetching.advanced
        )
    if show and (report.fetched or report.corrupted or report.by_image_path or report.pruned):
        console.print(views.fill_line(report))
    return planned, report


def planned_build(
    root: Path, plan: BuildPlan, inputs: BuildInputs, *, rebuild: bool, record_size: bool, started: float
) -> Build | BuildResult:
    """The `cached` result where an image of the plan's inputs hash exists (and not `rebuild`), else its build."""
    digest = plan_digest(plan, inputs)
    done = None if rebuild else cached_result(root, plan, digest, started=started, record_size=record_size)
    return done if done is not None else partial(_make, root, plan, digest, inputs, rebuild, record_size)


def _make(
    root: Path, plan: BuildPlan, digest: str, inputs: BuildInputs, rebuild: bool, record_size: bool, on_line: LogSink
) -> BuildResult:
    started = time.monotonic()
    with remembering(root):
        return make_image(
            root, plan, digest, inputs, on_line, rebuild=rebuild, started=started, record_size=record_size
        )
