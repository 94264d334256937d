"""Checks on the image config: user, HEALTHCHECK, secret-looking variables, port 22, volumes, OCI labels."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from learnerkit_build.scan.layers import ImageIndex
from learnerkit_build.scan.model import CheckResult, Evidence, Severity, Status, result, unknown

SECRET_NAME = re.compile(r"(PASSWORD|PASSWD|SECRET|TOKEN|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL)", re.I)
SENSITIVE_MOUNTS = ("/proc", "/sys", "/dev")
DEFAULT_LABELS = (
    "org.opencontainers.image.title",
    "org.opencontainers.image.version",
    "org.opencontainers.image.revision",
    "org.opencontainers.image.created",
    "org.opencontainers.image.base.name",
)


@dataclass(frozen=True)
class ConfigPolicy:
    require_healthcheck: bool = True
    required_labels: tuple[str, ...] = DEFAULT_LABELS
    secret_env_allow: tuple[str, ...] = field(default_factory=tuple)
    """Variable names that look secret but are not (e.g. a path to a token file)."""


def passwd_users(index: ImageIndex) -> dict[str, int] | None:
    text = index.text("/etc/passwd")
    if text is None:
        return None
    users = {}
    for line in text.splitlines():
        parts = line.split(":")
        if len(parts) >= 3 and parts[2].isdigit():
            users[parts[0]] = int(parts[2])
    return users


def check_user(index: ImageIndex) -> CheckResult:
    cid, title = "config.root-user", "runs as a non-root user (USER resolved through /etc/passwd)"
    user = str(index.container_config.get("User") or "").split(":", 1)[0]
    if user in ("", "root", "0"):
        shown = user or "(unset: root)"
        return result(cid, title, Severity.HIGH, [Evidence(f"USER is {shown}", history=_history_with("USER", index))])
    if user.isdigit():
        return result(cid, title, Severity.HIGH, [] if int(user) else [Evidence(f"USER {user} is root")])
    users = passwd_users(index)
    if users is None:
        return unknown(cid, title, Severity.HIGH, f"USER {user}: the image has no /etc/passwd to resolve it")
    if not users or user not in users:
        return unknown(cid, title, Severity.HIGH, f"USER {user} is not in /etc/passwd")
    uid = users[user]
    return result(
        cid, title, Severity.HIGH, [Evidence(f"USER {user} has UID 0", path="/etc/passwd")] if uid == 0 else []
    )


def _history_with(keyword: str, index: ImageIndex) -> str | None:
    for item in reversed(index.config.get("history", [])):
        line = str(item.get("created_by", ""))
        if keyword in line:
            return line
    return None


def check_healthcheck(index: ImageIndex, policy: ConfigPolicy) -> CheckResult:
    cid, title = "config.healthcheck", "declares a HEALTHCHECK"
    if not policy.require_healthcheck:
        return CheckResult(cid, title, Status.PASS, Severity.LOW, [Evidence("not required by the policy")])
    test = (index.container_config.get("Healthcheck") or {}).get("Test") or []
    missing = not test or test[0] == "NONE"
    return result(cid, title, Severity.LOW, [Evidence("no HEALTHCHECK in the image config")] if missing else [])


def check_secret_env(index: ImageIndex, policy: ConfigPolicy) -> CheckResult:
    evidence = []
    for item in index.container_config.get("Env") or []:
        name, _, value = str(item).partition("=")
        if SECRET_NAME.search(name) and value and name not in policy.secret_env_allow:
            evidence.append(
                Evidence(f"ENV {name} is set ({len(value)} characters)", history=_history_with(name, index))
            )
    return result("config.secret-env", "no secret-looking variables in ENV", Severity.HIGH, evidence)


def check_port_22(index: ImageIndex) -> CheckResult:
    ports = index.container_config.get("ExposedPorts") or {}
    evidence = [Evidence(f"EXPOSE {port}") for port in ports if str(port).split("/")[0] == "22"]
    return result("config.port-22", "does not expose SSH (22)", Severity.MEDIUM, evidence)


def check_volumes(index: ImageIndex) -> CheckResult:
    volumes = index.container_config.get("Volumes") or {}
    evidence = [
        Evidence(f"VOLUME {volume}", path=str(volume))
        for volume in volumes
        if any(str(volume) == root or str(volume).startswith(root + "/") for root in SENSITIVE_MOUNTS)
    ]
    return result("config.sensitive-volume", "no VOLUME over /proc, /sys or /dev", Severity.HIGH, evidence)


def check_labels(index: ImageIndex, policy: ConfigPolicy) -> CheckResult:
    labels = index.container_config.get("Labels") or {}
    evidence = [Evidence(f"label {name} is missing") for name in policy.required_labels if not labels.get(name)]
    return result("config.oci-labels", "carries the required OCI labels", Severity.LOW, evidence)


def config_checks(index: ImageIndex, policy: ConfigPolicy) -> list[CheckResult]:
    return [
        check_user(index),
        check_healthcheck(index, policy),
        check_secret_env(index, policy),
        check_port_22(index),
        check_volumes(index),
        check_labels(index, policy),
    ]
