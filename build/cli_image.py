"""`learnerkit image ...`: render, build, test, scan, publish; argument parsing only, the work is elsewhere."""

from __future__ import annotations

import json
from pathlib import Path

import click

from learnerkit.common.errors import LearnerkitError
from learnerkit.common.output import console, emit, handles_errors, output_option
from learnerkit.common.project import find_project_root, root_option
from learnerkit_build import views
from learnerkit_build.builds.baseimage import BASES, ensure_base, recipe_for
from learnerkit_build.builds.images import render_image
from learnerkit_build.builds.schedule import default_jobs
from learnerkit_build.cli_options import (
    apply,
    build_inputs,
    inputs_options,
    prepare_builds,
    run_builds,
    select_options,
    selected,
)
from learnerkit_build.lock.cache import DEFAULT_DOWNLOADS
from learnerkit_build.progress import BuildProgress
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.recipes.render import BuildInputs


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
    tier: str | None,
    index_url: str | None,
    extra_index_urls: tuple[str, ...],
    find_links: tuple[str, ...],
    ca_bundle: Path | None,
    no_ca_bundle: bool,
    dest: Path | None,
    root: Path | None,
    output: str,
) -> None:
    """Render Dockerfiles from the templates (no engine needed)."""
    project, images = selected(root, specs, select_all, variants, tier)
    inputs = build_inputs(index_url, extra_index_urls, find_links, ca_bundle, no_ca_bundle, project).inputs
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
    specs: tuple[str, ...],
    select_all: bool,
    variants: tuple[str, ...],
    tier: str | None,
    root: Path | None,
    output: str,
) -> None:
    """Render and lint Dockerfiles with hadolint and the project's .hadolint.yaml (no engine needed)."""
    from learnerkit_build.scan.lint import lint_dockerfile

    project, images = selected(root, specs, select_all, variants, tier)
    inputs = BuildInputs()  # lint what the templates say, whatever this host's pip configuration
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
    specs: tuple[str, ...],
    select_all: bool,
    variants: tuple[str, ...],
    tier: str | None,
    dry_run: bool,
    root: Path | None,
    output: str,
) -> None:
    """Remove content tags of superseded builds (all images when no spec is given)."""
    from learnerkit_build.builds.prune import prune

    _, images = selected(root, specs, select_all or not (specs or tier), variants, tier)
    results = prune(images, dry_run=dry_run)
    rows = [{"tag": result.tag, "status": result.status} for result in results]
    emit(output, results, lambda: console.print(views.simple_table(rows, "tag") if rows else "nothing to prune"))


@image_group.command("base")
@click.option("--rebuild", is_flag=True, help="make it again even if the recipe's image exists")
@output_option
@handles_errors
def base_command(rebuild: bool, output: str) -> None:
    """Make the local base images (mmdebstrap from the base lock), cached by recipe."""
    results = []
    with BuildProgress(enabled=output != "json") as progress:
        for name in sorted(BASES):
            with progress.image(f"base {name}") as on_line:
                image_id, made = ensure_base(recipe_for(name), on_line, rebuild=rebuild)
            results.append({"base": name, "image_id": image_id, "status": "built" if made else "cached"})
    emit(output, results, lambda: console.print(views.base_table(results)))


@image_group.command("lock")
@apply(select_options)
@apply(inputs_options)
@click.option("--sidecar", is_flag=True, help="lock the sidecar image too")
@click.option("--base", is_flag=True, help="lock the local base too")
@root_option
@output_option
@handles_errors
def lock_command(
    specs: tuple[str, ...],
    select_all: bool,
    variants: tuple[str, ...],
    tier: str | None,
    index_url: str | None,
    extra_index_urls: tuple[str, ...],
    find_links: tuple[str, ...],
    ca_bundle: Path | None,
    no_ca_bundle: bool,
    sidecar: bool,
    base: bool,
    root: Path | None,
    output: str,
) -> None:
    """Write the lock of each image: every Debian package and Python wheel, by version and sha256."""
    from learnerkit_build.builds.locking import lock_one, lock_targets, lockable

    if not (specs or select_all or sidecar or base):
        raise click.UsageError("name images (SPEC..., --all), --sidecar or --base")
    if specs or select_all:
        project, images = selected(root, specs, select_all, variants, tier)
    else:
        project, images = find_project_root(root), []
    resolved = build_inputs(index_url, extra_index_urls, find_links, ca_bundle, no_ca_bundle, project)
    images, results = lockable(images)
    with BuildProgress(enabled=output != "json") as progress:
        for target in lock_targets(project, images, sidecar=sidecar, base=base):
            with progress.image(f"lock {target.name}") as on_line:
                results.append(lock_one(project, target, resolved.inputs, on_line))
    emit(output, results, lambda: console.print(views.lock_table(results)))


@image_group.command("build")
@apply(select_options)
@apply(inputs_options)
@click.option("--rebuild", is_flag=True, help="build even if an image with the same inputs hash exists")
@click.option("--quiet-log", is_flag=True, help="show progress bars without the build log")
@click.option("--record-size", is_flag=True, help="record each built image's size as its budget (+5 % fails)")
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    help="images built at once, the longest first (default: $LEARNERKIT_BUILD_JOBS, else 2)",
)
@click.option(
    "--downloads",
    type=click.IntRange(min=1),
    default=DEFAULT_DOWNLOADS,
    show_default=True,
    help="concurrent downloads filling the lock cache before the builds",
)
@root_option
@output_option
@handles_errors
def build_command(
    specs: tuple[str, ...],
    select_all: bool,
    variants: tuple[str, ...],
    tier: str | None,
    index_url: str | None,
    extra_index_urls: tuple[str, ...],
    find_links: tuple[str, ...],
    ca_bundle: Path | None,
    no_ca_bundle: bool,
    rebuild: bool,
    quiet_log: bool,
    record_size: bool,
    jobs: int | None,
    downloads: int,
    root: Path | None,
    output: str,
) -> None:
    """Build images whose inputs changed; tag each by version and by inputs hash."""
    at_once = jobs or default_jobs()  # a bad $LEARNERKIT_BUILD_JOBS is refused before anything is fetched or built
    project, images = selected(root, specs, select_all, variants, tier)
    resolved = build_inputs(index_url, extra_index_urls, find_links, ca_bundle, no_ca_bundle, project)
    planned, fill = prepare_builds(
        project, images, resolved.inputs, rebuild=rebuild, record_size=record_size, downloads=downloads, output=output
    )
    run_builds(planned, output=output, quiet_log=quiet_log, settings=resolved.settings, jobs=at_once, fill=fill)


@image_group.command("test")
@apply(select_options)
@click.option("--check", "checks", multiple=True, help="run only these checks (see `--list-checks`); repeatable")
@click.option("--list-checks", is_flag=True, help="list the checks and exit")
@click.option(
    "--gpus",
    is_flag=True,
    help="give cuda images the engine's NVIDIA GPUs (docker run --gpus all): probe and train on them",
)
@root_option
@output_option
@handles_errors
def test_command(
    specs: tuple[str, ...],
    select_all: bool,
    variants: tuple[str, ...],
    tier: str | None,
    checks: tuple[str, ...],
    list_checks: bool,
    gpus: bool,
    root: Path | None,
    output: str,
) -> None:
    """Run the contract checks and the smoke training (halt and resume) against built images."""
    from learnerkit_build.imagetest.runner import CHECKS, run_image_tests

    if list_checks:
        rows = [{"check": name, "description": check.description} for name, check in CHECKS.items()]
        emit(output, rows, lambda: console.print(views.simple_table(rows, "check")))
        return
    project, images = selected(root, specs, select_all, variants, tier)
    reports = run_image_tests(project, images, list(checks), verbose=output != "json", gpus=gpus)
    emit(output, reports, lambda: console.print(views.test_table(reports)))
    if not all(report.passed for report in reports):
        raise SystemExit(1)


file_type = click.Path(path_type=Path, dir_okay=False, exists=True)


def _project_or_none(root: Path | None) -> Path | None:
    try:
        return find_project_root(root)
    except LearnerkitError:
        return None


@image_group.command("scan")
@apply(select_options)
@click.option("--image", "images", multiple=True, help="scan this image reference or ID (not a matrix spec)")
@click.option("--archive", type=file_type, default=None, help="scan a `docker save` tar instead (with --image)")
@click.option("--dockerfile", type=file_type, default=None, help="the Dockerfile of --image, for hadolint")
@click.option("--policy", type=file_type, default=None, help="policy file [default: ./scan-policy.yaml]")
@click.option("--allowlist", type=file_type, default=None, help="allowlist [default: ./scan-allowlist.yaml]")
@click.option("--osv-db", type=click.Path(path_type=Path), default=None, help="offline OSV data: folder or zip")
@click.option("--sbom-version", type=click.Choice(["1.6", "1.5"]), default="1.6", show_default=True)
@click.option("--no-debian-security", is_flag=True, help="skip the fetch of Debian's security indexes (UNKNOWN)")
@click.option(
    "--report-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="write report.json, sbom.cdx.json and report.sarif per image here",
)
@click.option(
    "--sarif",
    "sarif_out",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="write one SARIF 2.1.0 log of all scanned images here",
)
@root_option
@output_option
@handles_errors
def scan_command(
    specs: tuple[str, ...],
    select_all: bool,
    variants: tuple[str, ...],
    tier: str | None,
    images: tuple[str, ...],
    archive: Path | None,
    dockerfile: Path | None,
    policy: Path | None,
    allowlist: Path | None,
    osv_db: Path | None,
    sbom_version: str,
    no_debian_security: bool,
    report_dir: Path | None,
    sarif_out: Path | None,
    root: Path | None,
    output: str,
) -> None:
    """Scan images: config, history, file system, secrets in every layer, hadolint, SBOM, vulnerabilities."""
    from learnerkit_build.scan.command import ScanOptions, request_for_image, requests_for_specs, run_scans
    from learnerkit_build.scan.reports import report_json, report_sarif, report_table

    options = ScanOptions(policy, allowlist, osv_db, sbom_version, not no_debian_security, report_dir)
    project = _project_or_none(root)
    requests = [request_for_image(ref, dockerfile, project, options, archive) for ref in images]
    skipped: list[str] = []
    if specs or select_all:
        project, selection = selected(root, specs, select_all, variants, tier)
        from_specs, skipped = requests_for_specs(project, selection, options)
        requests += from_specs
    if not requests and not skipped:
        raise click.UsageError("name SPECs, --all, or --image REF")
    reports = run_scans(project, requests, options)
    if sarif_out is not None and reports:
        runs = [run for report in reports for run in report_sarif(report)["runs"]]
        log = {**report_sarif(reports[0]), "runs": runs}
        sarif_out.write_text(json.dumps(log, indent=2) + "\n", encoding="utf-8")

    def show() -> None:
        for line in skipped:
            console.print(f"[dim]skip {line}[/]")
        for report in reports:
            console.print(report_table(report))
            for blocker in report.gate.blockers:
                console.print(f"[red]blocks the gate:[/] {blocker.check} ({blocker.severity}): {blocker.message}")

    emit(output, [report_json(report) for report in reports], show)
    if not all(report.passed for report in reports):
        raise SystemExit(1)


def _split(reference: str) -> tuple[str, str]:
    repository, _, tag = reference.rpartition(":")
    if not repository or "/" in tag:
        return reference, "latest"
    return repository, tag


@image_group.command("publish")
@click.argument("spec")
@click.option("--registry", "target", required=True, help="HOST:PORT of the registry to push to")
@click.option("--key", type=file_type, default=None, help="ECDSA P-256 private key (PEM) [default: made on first use]")
@root_option
@output_option
@handles_errors
def publish_command(spec: str, target: str, key: Path | None, root: Path | None, output: str) -> None:
    """Push an image whose test and scan passed for its exact ID, signed, with its attestations as referrers."""
    from learnerkit_build.publish.push import publish

    project = find_project_root(root)
    if "/" in spec:
        reference = spec
        repository, tag = _split(spec)
    else:
        _, images = selected(project, (spec,), False, (), None)
        if len(images) != 1:
            raise click.UsageError(f"{spec} selects {len(images)} images; name one")
        repository, tag = images[0].repository(), images[0].tag
        reference = f"{repository}:{tag}"
    with BuildProgress(enabled=output != "json") as progress, progress.image(f"publish {reference}") as on_line:
        done = publish(reference, repository, tag, target, key, project, on_line=on_line)
    kinds = ", ".join(a.kind for a in done.attestations)
    push = done.push
    emit(
        output,
        done,
        lambda: console.print(
            f"[green]published[/] {done.pushed}@{done.digest}\n  signature {done.signature} (key {done.key_id})"
            f"\n  pushed through a fresh layout: skopeo {push.skopeo}, {push.compression}, "
            f"{len(push.image.layers)} layers, {push.image.size / 1e9:.2f} GB compressed (layout "
            f"{push.write_seconds:.0f} s, push {push.push_seconds:.0f} s)"
            f"\n  attestations ({done.discovery}): {kinds}"
            f"\n  security updates: {done.security.checked} packages against {done.security.suite} of "
            f"{done.security.index_date[:10]}, {len(done.security.pending)} pending (let through by the gate)"
        ),
    )


@image_group.command("verify")
@click.argument("reference")
@click.option(
    "--public-key",
    type=file_type,
    default=None,
    help="ECDSA P-256 public key (PEM) [default: the local signing key's .pub]",
)
@output_option
@handles_errors
def verify_command(reference: str, public_key: Path | None, output: str) -> None:
    """Check a published image: its signature and every attestation (signature, subject digest, types present)."""
    from learnerkit_build.attestations.key import default_key_path, public_key_path
    from learnerkit_build.publish.verify import verify

    host, _, rest = reference.partition("/")
    repository, tag = _split(rest)
    setting = "--public-key" if public_key else "the default key's .pub under LEARNERKIT_HOME"
    done = verify(host, repository, tag, public_key or public_key_path(default_key_path()), setting)
    kinds = ", ".join(a.kind for a in done.attestations)
    emit(
        output,
        done,
        lambda: console.print(
            f"[green]verified[/] {done.reference}@{done.digest} (key {done.key_id})\n  attestations "
            f"({done.discovery}): {kinds}"
            + (f"\n  [yellow]referrers not verified[/]: {len(done.unverified)}" if done.unverified else "")
        ),
    )


@image_group.command("outdated")
@apply(select_options)
@root_option
@output_option
@handles_errors
def outdated_command(
    specs: tuple[str, ...],
    select_all: bool,
    variants: tuple[str, ...],
    tier: str | None,
    root: Path | None,
    output: str,
) -> None:
    """List built images with pending Debian security updates or a changed base (rebuild them)."""
    from learnerkit_build.scan.outdated import outdated_images

    _, images = selected(root, specs, select_all or not (specs or tier), variants, tier)
    found = outdated_images(images)
    emit(output, found, lambda: console.print(views.outdated_table(found) if found else "no built images"))
    if any(f.outdated for f in found):
        raise SystemExit(1)
