"""OpenVEX from the scan gate's own data, and the gate's verdict recomputed from that VEX.

Every piece of vulnerability evidence the gate saw (checks `vuln.*` that FAILed or WARNed) becomes one
statement per (vulnerability, package): `not_affected` when an allowlist entry accepted it (its reason, review
date and justification), `fixed` when the caller knows an applied Debian update removed it, `affected` when a
CVE or advisory id names it, `under_investigation` when the evidence names no id (a pending update whose
changelog was not read). `apply_vex` marks the same evidence from the VEX alone, so `decide` over it gives the
gate's verdict; publish refuses an image where it would not.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
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


@dataclass(frozen=True)
class Fixed:
    """A vulnerability an applied Debian update removed: seen in `package` at `before`, gone at `after`."""

    vulnerability: str
    package: str
    before: str
    after: str


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


def build_vex(
    checks: list[CheckResult], product: str, purls: dict[str, str], timestamp: str, fixed: Iterable[Fixed] = ()
) -> dict[str, Any]:
    """The OpenVEX document of one image (`product`, a purl); `purls` maps package names to SBOM purls."""
    groups: dict[tuple[str, str], list[Finding]] = {}
    for finding in findings(checks):
        groups.setdefault((finding.vulnerability, finding.package), []).append(finding)
    statements = [
        {
            "vulnerability": {"name": name},
            "products": [{"@id": product, "subcomponents": [{"@id": package_purl(package, purls)}]}],
            **_status(group),
        }
        for (name, package), group in sorted(groups.items())
    ]
    statements += [
        {
            "vulnerability": {"name": item.vulnerability},
            "products": [{"@id": product, "subcomponents": [{"@id": package_purl(item.package, purls)}]}],
            "status": "fixed",
            "status_notes": f"applied Debian update: {item.package} {item.before} -> {item.after}",
        }
        for item in sorted(fixed, key=lambda f: (f.vulnerability, f.package))
        if (item.vulnerability, item.package) not in groups
    ]
    body = {"product": product, "statements": statements}
    return {
        "@context": CONTEXT,
        "@id": f"https://learnerkit.dev/vex/{hashlib.sha256(canonical(body)).hexdigest()}",
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
