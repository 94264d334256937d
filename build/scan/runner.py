"""Scan one image: index its layers, run every check, make the SBOM, apply the allowlist, decide the gate."""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from learnerkit.common import engine
from learnerkit_build.lock.committed import SIDECAR_LOCK
from learnerkit_build.scan import debian_security
from learnerkit_build.scan.checks_config import config_checks
from learnerkit_build.scan.checks_fs import fs_checks
from learnerkit_build.scan.checks_history import history_checks
from learnerkit_build.scan.hadolint import check_dockerfile
from learnerkit_build.scan.layers import ImageIndex, index_archive
from learnerkit_build.scan.model import CheckResult
from learnerkit_build.scan.osv import check_osv
from learnerkit_build.scan.packages import deb_packages, os_release, python_dists, wanted
from learnerkit_build.scan.policy import AllowEntry, GateDecision, Policy, apply_allowlist, decide
from learnerkit_build.scan.sbom import BASE_DIGEST_LABEL, ImageLock, build_sbom, read_image_lock, validate_sbom
from learnerkit_build.scan.secrets import SecretScanner, secret_checks


@dataclass(frozen=True)
class ScanRequest:
    reference: str
    """The image as the user named it (a tag or an ID)."""
    spec: str | None = None
    dockerfile: str | None = None
    hadolint_config: Path | None = None
    osv_db: Path | None = None
    sbom_version: str = "1.6"
    debian_security: bool = True
    archive: Path | None = None
    """A `docker save` tar to scan instead of asking the engine (the image ID comes from its config)."""
    project: Path | None = None
    """The checkout whose committed lock of the image (found by its labels) gives the SBOM its file hashes."""


@dataclass(frozen=True)
class ScanReport:
    reference: str
    spec: str | None
    image_id: str
    scanned_at: str
    seconds: float
    archive_bytes: int
    checks: list[CheckResult]
    gate: GateDecision
    sbom: dict[str, Any]

    @property
    def passed(self) -> bool:
        return self.gate.passed


def canonical_json(payload: Any) -> bytes:
    return (json.dumps(payload, indent=2, sort_keys=True) + "\n").encode()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def scan_image(
    request: ScanRequest, policy: Policy, allowlist: list[AllowEntry], today: date | None = None
) -> ScanReport:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="learnerkit-scan-") as scratch:
        archive = request.archive
        if archive is None:
            archive = Path(scratch) / "image.tar"
            engine.save_image(request.reference, archive)
        scanner = SecretScanner()
        index = index_archive(archive, request.reference, wanted=wanted, visit=scanner)
        size = archive.stat().st_size
    image_id = index.config_digest
    checks = run_checks(index, request, policy, scanner, _base_layers(index, request))
    debs, dists = deb_packages(index) or [], python_dists(index)
    sbom = build_sbom(index, image_id, debs, dists, request.sbom_version, image_lock(request.project, index))
    validate_sbom(sbom)
    marked, expired = apply_allowlist(checks, allowlist, request.reference, today or datetime.now(UTC).date())
    return ScanReport(
        reference=request.reference,
        spec=request.spec,
        image_id=image_id,
        scanned_at=datetime.now(UTC).isoformat(timespec="seconds"),
        seconds=round(time.monotonic() - started, 2),
        archive_bytes=size,
        checks=marked,
        gate=decide(marked, expired, policy),
        sbom=sbom,
    )


def image_lock(project: Path | None, index: ImageIndex) -> ImageLock | None:
    """The lock `project` commits for the image its labels name (a learner image's framework, version and variant,
    or the sidecar), if there is one."""
    if project is None:
        return None
    labels = index.container_config.get("Labels") or {}
    framework, version = labels.get("io.learnerkit.framework"), labels.get("io.learnerkit.framework.version")
    variant = labels.get("io.learnerkit.variant")
    if labels.get("io.learnerkit.component") == "sidecar":
        path = project / SIDECAR_LOCK
    elif framework and version and variant:
        path = project / "frameworks" / str(framework) / "lock" / f"{version}-{variant}.json"
    else:
        return None
    return read_image_lock(path) if path.is_file() else None


def run_checks(
    index: ImageIndex, request: ScanRequest, policy: Policy, scanner: SecretScanner, base_layers: int | None
) -> list[CheckResult]:
    debs, dists = deb_packages(index), python_dists(index)
    checks = [
        *config_checks(index, policy.config),
        *history_checks(index),
        *fs_checks(index, base_layers),
        *secret_checks(index, scanner.hits),
        check_dockerfile(request.spec or request.reference, request.dockerfile, request.hadolint_config),
    ]
    if request.debian_security:
        codename = os_release(index).get("VERSION_CODENAME")
        arch = str(index.config.get("architecture") or "amd64")
        checks += debian_security.check_pending(debs, codename, arch, with_changelogs=policy.debian_changelogs)
    checks.append(check_osv(request.osv_db, debs, dists, policy.osv))
    return checks


def _base_layers(index: ImageIndex, request: ScanRequest) -> int | None:
    """How many of the image's layers its base image made (from the base-digest label), if the base is here."""
    base = (index.container_config.get("Labels") or {}).get(BASE_DIGEST_LABEL)
    if not base or request.archive is not None:
        return None
    try:
        base_ids = engine.image_attrs(str(base)).get("RootFS", {}).get("Layers", [])
    except engine.EngineError:
        return None
    ids = [layer.diff_id for layer in index.layers]
    return len(base_ids) if ids[: len(base_ids)] == base_ids else None
