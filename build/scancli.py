"""`learnerkit image scan|publish|verify|outdated`: argument parsing only; the work is in the modules below."""

from __future__ import annotations

import json
from pathlib import Path

import click

from learnerkit.common.errors import LearnerkitError
from learnerkit.common.output import console, emit, handles_errors, output_option
from learnerkit.common.project import find_project_root, root_option
from learnerkit_build import views
from learnerkit_build.clitools import apply, select_options, selected
from learnerkit_build.scan.reports import report_json, report_sarif, report_table
from learnerkit_build.scanning import ScanOptions, request_for_image, requests_for_specs, run_scans

file_type = click.Path(path_type=Path, dir_okay=False, exists=True)


def _project_or_none(root: Path | None) -> Path | None:
    try:
        return find_project_root(root)
    except LearnerkitError:
        return None


@click.command("scan")
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
    options = ScanOptions(policy, allowlist, osv_db, sbom_version, not no_debian_security, report_dir)
    project = _project_or_none(root)
    requests = [request_for_image(ref, dockerfile, project, options, archive) for ref in images]
    skipped: list[str] = []
    if specs or select_all:
        project, selection = selected(root, specs, select_all, variants)
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


@click.command("publish")
@click.argument("spec")
@click.option("--registry", "target", required=True, help="HOST:PORT of the registry to push to")
@click.option("--key", type=file_type, default=None, help="Ed25519 private key (PEM) [default: made on first use]")
@root_option
@output_option
@handles_errors
def publish_command(spec: str, target: str, key: Path | None, root: Path | None, output: str) -> None:
    """Push an image whose test and scan passed for its exact ID, with SBOM, report and a signature."""
    from learnerkit_build.publish import publish

    if "/" in spec:
        reference = spec
        repository, tag = _split(spec)
    else:
        _, images = selected(root, (spec,), False, ())
        if len(images) != 1:
            raise click.UsageError(f"{spec} selects {len(images)} images; name one")
        repository, tag = images[0].repository(), images[0].tag
        reference = f"{repository}:{tag}"
    done = publish(reference, repository, tag, target, key)
    emit(
        output,
        done,
        lambda: console.print(
            f"[green]published[/] {done.pushed}@{done.digest}\n  attestation {done.attestation} (key {done.key_id})"
        ),
    )


@click.command("verify")
@click.argument("reference")
@click.option(
    "--public-key",
    type=file_type,
    default=None,
    help="Ed25519 public key (PEM) [default: the local signing key's .pub]",
)
@output_option
@handles_errors
def verify_command(reference: str, public_key: Path | None, output: str) -> None:
    """Check a published image: signature, digest, SBOM and report hashes, passed gates."""
    from learnerkit_build.attest import default_key_path
    from learnerkit_build.publish import verify

    host, _, rest = reference.partition("/")
    repository, tag = _split(rest)
    done = verify(host, repository, tag, public_key or default_key_path().with_suffix(".pub"))
    emit(output, done, lambda: console.print(f"[green]verified[/] {done.reference}@{done.digest} (key {done.key_id})"))


@click.command("outdated")
@apply(select_options)
@root_option
@output_option
@handles_errors
def outdated_command(
    specs: tuple[str, ...], select_all: bool, variants: tuple[str, ...], root: Path | None, output: str
) -> None:
    """List built images with pending Debian security updates or a changed base (rebuild them)."""
    from learnerkit_build.outdated import outdated_images

    _, images = selected(root, specs, select_all or not specs, variants)
    found = outdated_images(images)
    rows = [
        {"spec": f.spec, "image_id": f.image_id[:19], "outdated": f.outdated, "reasons": "; ".join(f.reasons)}
        for f in found
    ]
    emit(output, found, lambda: console.print(views.simple_table(rows) if rows else "no built images"))
    if any(f.outdated for f in found):
        raise SystemExit(1)


def register_scan_commands(group: click.Group) -> None:
    for command in (scan_command, publish_command, verify_command, outdated_command):
        group.add_command(command)
