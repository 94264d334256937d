"""`learnerkit image scan|publish|verify|outdated`: argument parsing only; the work is in the modules below."""

from __future__ import annotations

import json
from pathlib import Path

import click

from learnerkit.errors import LearnerkitError
from learnerkit.output import console, emit, output_option
from learnerkit_build.clitools import apply, handles_errors, root_option, select_options, selected
from learnerkit_build.project import find_project_root
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


def register_scan_commands(group: click.Group) -> None:
    group.add_command(scan_command)
