"""Publish's security-update gate: no Debian security update available but not applied at publish.

The scan compared the image with the security suite when it ran; an image published later may lack an update
Debian released since. So publish reads the image's installed packages (its dpkg status) and codename, fetches
`<codename>-security`'s index as it is now (the scan's `learnerkit_build.scan.debian_security`: the InRelease
checked with gpgv against Debian's archive keys and its Valid-Until, the Packages index against the signed
SHA256), and judges the pending updates as the scan gate judges `vuln.debian-security`: with the project's scan
policy and allowlist. Under the default policy a pending security update is HIGH evidence and refuses the
publish unless a live allowlist entry accepts it; a policy whose threshold is above HIGH lets it through, and
the result still lists it. Without the index (offline, a mirror down, an expired or unsigned index) publish
refuses and says so: it cannot claim what it did not check.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from learnerkit.common import engine
from learnerkit_build.errors import BuildToolError
from learnerkit_build.scan.debian_security import DebianIndexError, SuiteIndex, pending_updates, suite_index
from learnerkit_build.scan.model import CheckResult, Evidence, Severity, result
from learnerkit_build.scan.packages import DebPackage, parse_dpkg_status
from learnerkit_build.scan.policy import AllowEntry, Policy, apply_allowlist, decide, load_allowlist, load_policy

CHECK_ID = "vuln.debian-security"
"""The scan's check of the same question: one allowlist entry accepts a pending update at scan and publish."""
POLICY_FILE, ALLOWLIST_FILE = "scan-policy.yaml", "scan-allowlist.yaml"
DPKG_STATUS, OS_RELEASE = "/var/lib/dpkg/status", "/etc/os-release"
IndexSource = Callable[[str, str], SuiteIndex]
"""(suite, architecture) -> that suite's index as it is now."""


class SecurityUpdatesRefused(BuildToolError):
    """A security update is available but not applied, or the security index could not be read."""


@dataclass(frozen=True)
class ImagePackages:
    codename: str
    architecture: str
    packages: list[DebPackage]


@dataclass(frozen=True)
class SecurityUpdates:
    """What publish found: the suite and its date, how many packages it compared, what is pending."""

    suite: str
    index_date: str
    checked: int
    pending: list[str]
    """`package installed -> available`, each accepted by the allowlist or let through by the policy."""


def live_index(suite: str, architecture: str) -> SuiteIndex:
    return suite_index("security", suite, architecture)


def image_packages(reference: str) -> ImagePackages:
    """The image's installed Debian packages, codename and architecture, read from the image itself."""
    status, release = engine.read_file(reference, DPKG_STATUS), engine.read_file(reference, OS_RELEASE)
    fields = dict(
        line.split("=", 1) for line in (release or b"").decode("utf-8", "replace").splitlines() if "=" in line
    )
    codename = fields.get("VERSION_CODENAME", "").strip('"')
    if status is None or not codename:
        raise SecurityUpdatesRefused(
            f"security gate: {reference} has no {DPKG_STATUS} or no VERSION_CODENAME in {OS_RELEASE}: "
            "not a Debian image, its security updates cannot be checked"
        )
    architecture = str(engine.image_attrs(reference).get("Architecture") or "amd64")
    return ImagePackages(codename, architecture, parse_dpkg_status(status.decode("utf-8", "replace")))


def check_security_updates(
    reference: str,
    image: ImagePackages,
    policy: Policy,
    allowlist: list[AllowEntry],
    today: date,
    index_source: IndexSource = live_index,
) -> SecurityUpdates:
    """Refuse when the suite's index now has a security update the image lacks and the gate would block it."""
    suite = f"{image.codename}-security"
    try:
        index = index_source(suite, image.architecture)
    except DebianIndexError as e:
        raise SecurityUpdatesRefused(
            f"security gate: {suite}'s index could not be read, so {reference} cannot be shown to lack no security "
            f"update (publish needs Debian's archive, or the mirror in this host's apt sources): {e}"
        ) from e
    pending = pending_updates(image.packages, index)
    evidence = [
        Evidence(
            f"{package.name} {package.version} -> {entry.version} ({suite}, source {entry.source})",
            path=DPKG_STATUS,
            ids=(package.name, f"src:{entry.source}"),
        )
        for package, entry in pending
    ]
    check: CheckResult = result(
        CHECK_ID, "no Debian security update available but not applied", Severity.HIGH, evidence
    )
    marked, _ = apply_allowlist([check], allowlist, reference, today)
    decision = decide(marked, [], policy)
    if not decision.passed:
        listed = "; ".join(blocker.message for blocker in decision.blockers)
        raise SecurityUpdatesRefused(
            f"security gate: {len(decision.blockers)} Debian security update(s) available but not applied in "
            f"{reference} ({suite} of {index.date.date().isoformat()}): {listed}; rebuild the base and the image "
            "with them (a locked image: lock again) and scan again"
        )
    return SecurityUpdates(
        suite, index.date.isoformat(), len(image.packages), [item.message for item in marked[0].evidence]
    )


def project_gate(root: Path | None) -> tuple[Policy, list[AllowEntry]]:
    """The scan gate's policy and allowlist of the project at `root` (the defaults where it has none)."""
    policy = root / POLICY_FILE if root is not None else None
    allowlist = root / ALLOWLIST_FILE if root is not None else None
    return (
        load_policy(policy if policy is not None and policy.is_file() else None),
        load_allowlist(allowlist if allowlist is not None and allowlist.is_file() else None),
    )
