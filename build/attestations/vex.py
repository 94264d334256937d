"""OpenVEX from the scan gate's own data, and the gate's verdict recomputed from that VEX.

Every piece of vulnerability evidence the gate saw (checks `vuln.*` that FAILed or WARNed) becomes one
statement per (vulnerability, package): `not_affected` when an allowlist entry accepted it (its reason, review
date and justification), `affected` when a CVE or advisory id names it, `under_investigation` when the evidence
names no id (a pending update whose changelog was not read). `apply_vex` marks the same evidence from the VEX
alone, so `decide` over it gives the gate's verdict; publish refuses an image where it would not.

The document is a function of the image and of the advisory data given (the scan's vulnerability findings, with
the allowlist's markings) and nothing else: no scan history, clock or host. Its `@id` records both digests.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from typing import Any
from urllib.parse import quote

from learnerkit_build.attestations.envelope import canonical
from learnerkit_build.scan.model import CheckResult, Evidence, Status

CONTEXT = "https://openvex.dev/ns/v0.2.0"
PREDICATE_TYPE = "https://openvex.dev/ns"
AUTHOR = "learnerkit scan gate"
SUPPRESSING = frozenset({"not_affected", "fixed"})
VULNERABILITY_ID = re.compile(r"^[A-Z][A-Z0-9]*-\S*\d")


@dataclass(frozen=True)
class Finding:
    """One (vulnerability, package) of one piece of evidence."""

    vulnerability: str
    package: str
    check: str
    message: str
    allowed_by: str | None
    justification: str | None


def _vulnerability_check(check: CheckResult) -> bool:
    return check.id.startswith("vuln.") and check.status in (Status.FAIL, Status.WARN)


def evidence_findings(check_id: str, item: Evidence) -> list[Finding]:
    if not item.ids:
        return []
    package = item.ids[-1] if check_id == "vuln.osv" else item.ids[0]
    names = sorted({i for i in item.ids if VULNERABILITY_ID.match(i)}) or [f"{check_id}/{package}"]
    return [Finding(name, package, check_id, item.message, item.allowed_by, item.justification) for name in names]


def findings(checks: Iterable[CheckResult]) -> list[Finding]:
    return [
        finding
        for check in checks
        if _vulnerability_check(check)
        for item in check.evidence
        for finding in evidence_findings(check.id, item)
    ]


def _status(group: list[Finding]) -> dict[str, str]:
    """One statement's status fields for every finding of one (vulnerability, package)."""
    notes = "; ".join(sorted({f"{f.check}: {f.message}" for f in group}))
    if all(f.allowed_by for f in group):
        accepted = "; ".join(sorted({str(f.allowed_by) for f in group}))
        fields = {"status": "not_affected", "impact_statement": accepted, "status_notes": notes}
        justifications = {f.justification for f in group}
        if len(justifications) == 1 and None not in justifications:
            fields["justification"] = str(justifications.pop())
        return fields
    if not VULNERABILITY_ID.match(group[0].vulnerability):
        return {"status": "under_investigation", "status_notes": notes}
    action = "rebuild on a base with the fix (`learnerkit image base --rebuild`) or accept it in scan-allowlist.yaml"
    return {"status": "affected", "action_statement": action, "status_notes": notes}


def advisory_digest(found: list[Finding]) -> str:
    """sha256 of the advisory data a VEX is made from: every finding, canonical and in order."""
    rows = sorted(canonical(asdict(finding)) for finding in found)
    return hashlib.sha256(b"\n".join(rows)).hexdigest()


def build_vex(
    checks: list[CheckResult], product: str, image_digest: str, purls: dict[str, str], timestamp: str
) -> dict[str, Any]:
    """The OpenVEX document of one image (`product`, a purl, of `image_digest`); `purls` maps package names to
    SBOM purls. Its `@id` is `https://learnerkit.dev/vex/sha256:<image>/advisories/sha256:<advisory data>`."""
    found = findings(checks)
    groups: dict[tuple[str, str], list[Finding]] = {}
    for finding in found:
        groups.setdefault((finding.vulnerability, finding.package), []).append(finding)
    statements = [
        {
            "vulnerability": {"name": name},
            "products": [{"@id": product, "subcomponents": [{"@id": package_purl(package, purls)}]}],
            **_status(group),
        }
        for (name, package), group in sorted(groups.items())
    ]
    image = image_digest if image_digest.startswith("sha256:") else f"sha256:{image_digest}"
    return {
        "@context": CONTEXT,
        "@id": f"https://learnerkit.dev/vex/{image}/advisories/sha256:{advisory_digest(found)}",
        "author": AUTHOR,
        "timestamp": timestamp,
        "version": 1,
        "tooling": "learnerkit",
        "statements": statements,
    }


def package_purl(package: str, purls: dict[str, str]) -> str:
    return purls.get(package) or f"pkg:generic/{quote(package, safe='')}"


def apply_vex(checks: list[CheckResult], vex: dict[str, Any], purls: dict[str, str]) -> list[CheckResult]:
    """The checks with vulnerability evidence accepted exactly where the VEX says not_affected or fixed."""
    statuses: dict[tuple[str, str], str] = {}
    for raw in vex.get("statements", []):
        for product in raw["products"]:
            for sub in product.get("subcomponents", []):
                statuses[(raw["vulnerability"]["name"], sub["@id"])] = raw["status"]
    marked = []
    for check in checks:
        if not _vulnerability_check(check):
            marked.append(check)
            continue
        evidence = []
        for item in check.evidence:
            found = evidence_findings(check.id, item)
            said = [statuses.get((f.vulnerability, package_purl(f.package, purls))) for f in found]
            accepted = bool(found) and all(status in SUPPRESSING for status in said)
            evidence.append(replace(item, allowed_by="VEX: not_affected" if accepted else None, justification=None))
        marked.append(check.with_status(check.status, evidence))
    return marked


def disagreements(checks: list[CheckResult], vex: dict[str, Any], purls: dict[str, str]) -> list[str]:
    """Evidence the gate accepted and the VEX does not, or the reverse; empty when they agree.

    `decide` reads only these markings, so agreement here is the same verdict under any policy."""
    differ = []
    for gate, from_vex in zip(checks, apply_vex(checks, vex, purls), strict=True):
        for before, after in zip(gate.evidence, from_vex.evidence, strict=True):
            if _vulnerability_check(gate) and bool(before.allowed_by) != bool(after.allowed_by):
                differ.append(f"{gate.id}: {before.message} (gate: {'accepted' if before.allowed_by else 'open'})")
    return differ
