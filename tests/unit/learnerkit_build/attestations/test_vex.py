"""The VEX made from the gate's data gives the gate's verdict when applied to the same scan data, and is valid
OpenVEX 0.2.0 by its published JSON schema."""

from __future__ import annotations

from datetime import date

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from learnerkit_build.attestations.vex import apply_vex, build_vex, disagreements
from learnerkit_build.scan.model import CheckResult, Evidence, Severity, Status
from learnerkit_build.scan.policy import AllowEntry, Policy, apply_allowlist, decide
from tests.schemas import assert_valid_openvex

TODAY = date(2026, 1, 1)
PURLS = {"openssl": "pkg:deb/debian/openssl@3.0.1?arch=amd64", "jinja2": "pkg:pypi/jinja2@2.10"}
PRODUCT = "pkg:oci/published@sha256%3Aabc?repository_url=127.0.0.1/learnerkit/published"


def debian(package: str, cves: tuple[str, ...]) -> Evidence:
    return Evidence(f"{package} 1 -> 2", path="/var/lib/dpkg/status", ids=(package, f"src:{package}", *cves))


def checks(security: list[Evidence], osv: list[Evidence], root: bool = False) -> list[CheckResult]:
    found = [
        CheckResult("vuln.debian-security", "t", Status.FAIL if security else Status.PASS, Severity.HIGH, security),
        CheckResult("vuln.osv", "t", Status.FAIL if osv else Status.PASS, Severity.HIGH, osv),
    ]
    if root:
        found.append(CheckResult("config.root-user", "t", Status.FAIL, Severity.HIGH, [Evidence("USER root")]))
    return found


def gate_and_vex(raw: list[CheckResult], allow: list[AllowEntry], policy: Policy) -> tuple[bool, bool, dict]:
    marked, expired = apply_allowlist(raw, allow, "learnerkit/pytorch:1", TODAY)
    gate = decide(marked, expired, policy)
    vex = build_vex(marked, PRODUCT, "sha256:" + "e" * 64, PURLS, "2026-01-01T00:00:00Z")
    if vex["statements"]:  # none: publish writes no VEX (test_documents.py)
        assert_valid_openvex(vex)
    # Only the VEX decides here: apply_vex drops the allowlist's markings before reading the statements.
    from_vex = decide(apply_vex(marked, vex, PURLS), expired, policy)
    return gate.passed, from_vex.passed, vex


CVES = st.lists(st.sampled_from(["CVE-2024-0001", "CVE-2024-0002", "CVE-2025-1234"]), max_size=2, unique=True)
EVIDENCE = st.builds(debian, st.sampled_from(["openssl", "libc6", "zlib1g"]), CVES.map(tuple))
OSV = st.sampled_from([Evidence("GHSA-1: jinja2 2.10", ids=("GHSA-abcd-1234", "CVE-2024-0001", "jinja2"))])
ALLOW = st.lists(
    st.builds(
        AllowEntry,
        id=st.sampled_from(["CVE-2024-0001", "CVE-2024-0002", "openssl", "vuln.osv", "libc6"]),
        scope=st.just("learnerkit/*"),
        reason=st.just("accepted after review"),
        review_by=st.sampled_from([date(2027, 1, 1), date(2025, 1, 1)]),
        justification=st.sampled_from([None, "vulnerable_code_not_in_execute_path"]),
    ),
    max_size=3,
)


@settings(max_examples=300, deadline=None)
@given(
    security=st.lists(EVIDENCE, max_size=4),
    osv=st.lists(OSV, max_size=1),
    allow=ALLOW,
    threshold=st.sampled_from(list(Severity)),
    root=st.booleans(),
)
def test_the_vex_gives_the_gates_verdict_wherever_publish_accepts_it(
    security: list[Evidence], osv: list[Evidence], allow: list[AllowEntry], threshold: Severity, root: bool
) -> None:
    raw = checks(security, osv, root)
    marked, _ = apply_allowlist(raw, allow, "learnerkit/pytorch:1", TODAY)
    vex = build_vex(marked, PRODUCT, "sha256:" + "e" * 64, PURLS, "2026-01-01T00:00:00Z")
    gate, from_vex, _ = gate_and_vex(raw, allow, Policy(severity_threshold=threshold, errors=("config.root-user",)))
    assume(not disagreements(marked, vex, PURLS))
    assert from_vex == gate


def test_statuses_carry_the_allowlist_and_what_is_open() -> None:
    allow = [
        AllowEntry(
            "CVE-2024-0001",
            "learnerkit/*",
            "not reachable",
            date(2027, 5, 31),
            None,
            "vulnerable_code_not_in_execute_path",
        )
    ]
    raw = checks([debian("openssl", ("CVE-2024-0001",)), debian("zlib1g", ("CVE-2024-0002",)), debian("libc6", ())], [])
    gate, from_vex, vex = gate_and_vex(raw, allow, Policy())
    assert (gate, from_vex) == (False, False)
    by_name = {s["vulnerability"]["name"]: s for s in vex["statements"]}
    accepted = by_name["CVE-2024-0001"]
    assert accepted["status"] == "not_affected"
    assert accepted["justification"] == "vulnerable_code_not_in_execute_path"
    assert "review by 2027-05-31" in accepted["impact_statement"]
    assert accepted["products"][0]["subcomponents"] == [{"@id": PURLS["openssl"]}]
    assert by_name["CVE-2024-0002"]["status"] == "affected" and by_name["CVE-2024-0002"]["action_statement"]
    assert by_name["vuln.debian-security/libc6"]["status"] == "under_investigation"
    assert vex["@context"] == "https://openvex.dev/ns/v0.2.0"


def test_accepting_everything_passes_both_and_a_dropped_statement_fails_the_vex_side() -> None:
    allow = [AllowEntry("openssl", "learnerkit/*", "reviewed", date(2027, 1, 1))]
    raw = checks([debian("openssl", ("CVE-2024-0001", "CVE-2024-0002"))], [])
    gate, from_vex, vex = gate_and_vex(raw, allow, Policy())
    assert (gate, from_vex) == (True, True)
    marked, expired = apply_allowlist(raw, allow, "learnerkit/pytorch:1", TODAY)
    vex["statements"] = vex["statements"][1:]
    assert not decide(apply_vex(marked, vex, PURLS), expired, Policy()).passed
    assert disagreements(marked, vex, PURLS)


def test_identical_scan_data_gives_an_identical_document() -> None:
    raw = checks([debian("openssl", ("CVE-2024-0001",))], [])
    assert gate_and_vex(raw, [], Policy())[2] == gate_and_vex(list(reversed(raw)), [], Policy())[2]
