"""Which attestations `image verify` requires: the VEX exactly where the signed scan report holds a finding."""

from __future__ import annotations

from typing import Any

from learnerkit_build.publish.verify import _optional


def scan(cves: tuple[str, ...]) -> dict[str, tuple[dict[str, Any], str]]:
    evidence = [{"message": "openssl", "ids": ["openssl", "src:openssl", *cves], "severity": None}] if cves else []
    check = {"id": "vuln.debian-security", "title": "t", "status": "FAIL" if cves else "PASS", "severity": "high"}
    return {"scan": ({"predicate": {"checks": [{**check, "evidence": evidence}]}}, "sha256:m")}


def test_a_vex_may_be_absent_only_where_the_signed_scan_saw_no_vulnerability() -> None:
    assert _optional(scan(())) == {"vex"}
    assert _optional(scan(("CVE-2024-0001",))) == set()
    assert _optional({}) == set()  # no verified scan report: nothing is optional
