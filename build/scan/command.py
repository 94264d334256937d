"""`learnerkit image scan`: resolve what to scan, run the scanner, keep the records the publish gate reads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from learnerkit.common import engine
from learnerkit.common.errors import ConfigError
from learnerkit_build.builds.images import render_image
from learnerkit_build.errors import BuildToolError
from learnerkit_build.recipes.render import BuildInputs
from learnerkit_build.recipes.spec import ImageSpec
from learnerkit_build.scan.policy import load_allowlist, load_policy
from learnerkit_build.scan.records import record_scan, write_documents
from learnerkit_build.scan.runner import ScanReport, ScanRequest, scan_image


class ScanError(BuildToolError):
    """An image cannot be scanned (not built)."""


POLICY_FILE = "scan-policy.yaml"
ALLOWLIST_FILE = "scan-allowlist.yaml"


@dataclass(frozen=True)
class ScanOptions:
    policy: Path | None = None
    allowlist: Path | None = None
    osv_db: Path | None = None
    sbom_version: str = "1.6"
    debian_security: bool = True
    report_dir: Path | None = None
    """Also write <report_dir>/<name>/{report.json,sbom.cdx.json,report.sarif}."""


def default_file(project: Path | None, given: Path | None, name: str) -> Path | None:
    if given is not None:
        if not given.is_file():
            raise ConfigError(f"{given} does not exist")
        return given
    if project is not None and (project / name).is_file():
        return project / name
    return None


def requests_for_specs(
    project: Path, images: list[ImageSpec], options: ScanOptions
) -> tuple[list[ScanRequest], list[str]]:
    """Requests for the built images, and the specs skipped because their base is not on this engine."""
    inputs = BuildInputs()
    skipped = []
    for image in images:
        reference = f"{image.repository()}:{image.tag}"
        if engine.image_id(reference) is None:
            if image.local_base is None and engine.image_id(image.variant.base) is None:
                skipped.append(f"{image.name}: not built, its base {image.variant.base} is not on this engine")
                continue
            raise ScanError(f"{reference} is not built: run `learnerkit image build {image.name}` first")
    built = [image for image in images if engine.image_id(f"{image.repository()}:{image.tag}")]
    requests = [
        ScanRequest(
            reference=f"{image.repository()}:{image.tag}",
            spec=image.name,
            dockerfile=render_image(project, image, inputs),
            hadolint_config=project / ".hadolint.yaml",
            osv_db=options.osv_db,
            sbom_version=options.sbom_version,
            debian_security=options.debian_security,
            project=project,
        )
        for image in built
    ]
    return requests, skipped


def request_for_image(
    reference: str, dockerfile: Path | None, project: Path | None, options: ScanOptions, archive: Path | None = None
) -> ScanRequest:
    return ScanRequest(
        reference=reference,
        dockerfile=dockerfile.read_text(encoding="utf-8") if dockerfile else None,
        hadolint_config=project / ".hadolint.yaml" if project else None,
        osv_db=options.osv_db,
        sbom_version=options.sbom_version,
        debian_security=options.debian_security,
        archive=archive,
        project=project,
    )


def run_scans(project: Path | None, requests: list[ScanRequest], options: ScanOptions) -> list[ScanReport]:
    policy = load_policy(default_file(project, options.policy, POLICY_FILE))
    allowlist = load_allowlist(default_file(project, options.allowlist, ALLOWLIST_FILE))
    reports = []
    for request in requests:
        report = scan_image(request, policy, allowlist)
        if request.archive is None:
            record_scan(report)
        if options.report_dir is not None:
            name = (request.spec or request.reference).replace("/", "_").replace(":", "_")
            write_documents(report, options.report_dir / name)
        reports.append(report)
    return reports
