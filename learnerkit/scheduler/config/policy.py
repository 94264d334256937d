"""What the scheduler accepts from a tenant beyond a valid manifest: the limits of its settings (docs/security.md).

:func:`check_submission` runs on every submit, before anything is stored, and refuses with a
`ManifestError` naming each field; :func:`check_admissible` is the part a restart applies to stored jobs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from learnerkit.common.errors import ConfigError
from learnerkit.common.yamlfile import FieldPath, Problem
from learnerkit.scheduler.errors import ManifestError
from learnerkit.scheduler.manifest.model import FFDL_DEFAULTS, DataStore, JobManifest, ResourceDefaults

PriorityRange = tuple[int, int]
DEFAULT_PRIORITY: PriorityRange = (-1000, 0)
"""A tenant may lower its jobs' priority but not raise it above 0 unless its settings allow it."""
DEFAULT_MAX_LEARNERS = 64
DEFAULT_MAX_MANIFEST_BYTES = 256 * 1024
DEFAULT_MAX_MODEL_BYTES = 512 * 1024 * 1024


@dataclass(frozen=True)
class SubmitPolicy:
    max_manifest_bytes: int = DEFAULT_MAX_MANIFEST_BYTES
    """``$LEARNERKIT_MAX_MANIFEST_BYTES``: larger manifests are refused unread."""
    parse_seconds: float | None = 5.0
    """``$LEARNERKIT_MANIFEST_PARSE_BUDGET_S``: reading one manifest may take this long."""
    max_learners: int = DEFAULT_MAX_LEARNERS
    """``$LEARNERKIT_MAX_LEARNERS``: learners per job."""
    object_stores: tuple[str, ...] = ()
    """Origins (``scheme://host:port``) a data store's ``auth_url`` may name; see :func:`origin`."""
    host_paths: tuple[str, ...] = ()
    """Host folders a ``mount_volume`` store may mount (and everything under them); none: host mounts are off."""
    priorities: Mapping[str, PriorityRange] = field(default_factory=dict)
    """Per tenant, the priorities its jobs may take."""
    default_priority: PriorityRange = DEFAULT_PRIORITY
    opt_out: Mapping[str, bool] = field(default_factory=dict)
    """Per tenant, whether its jobs may opt out of preemption (``learnerkit.preemptible: false``)."""
    default_opt_out: bool = False
    defaults: ResourceDefaults = FFDL_DEFAULTS
    """What a manifest without ``cpus`` or ``memory`` gets."""

    def priority_range(self, tenant: str) -> PriorityRange:
        return self.priorities.get(tenant, self.default_priority)

    def may_opt_out(self, tenant: str) -> bool:
        return self.opt_out.get(tenant, self.default_opt_out)


def origin(url: str) -> str | None:
    """``scheme://host:port`` of an http(s) URL, lower-cased and with the scheme's port; None if it has none."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return None
    default = 443 if parts.scheme.lower() == "https" else 80
    return f"{parts.scheme.lower()}://{parts.hostname.lower()}:{port or default}"


def check_admissible(manifest: JobManifest, policy: SubmitPolicy, source: str) -> None:
    """What every job the scheduler keeps must satisfy, also after a restart: a number of learners it can run."""
    _refuse(_admissible(manifest, policy), source)


def check_submission(manifest: JobManifest, tenant: str, policy: SubmitPolicy, source: str) -> None:
    """Refuse, naming each field, what this tenant may not submit under these settings."""
    problems = _admissible(manifest, policy) + _tenant_problems(manifest, tenant, policy)
    for index, store in enumerate(manifest.data_stores):
        loc: FieldPath = ("data_stores", index, "connection")
        if store.type == "mount_volume":
            problems += _host_path_problems(store_folder(store), policy, (*loc, "path"))
        elif (url := store.connection.get("auth_url")) is not None and origin(url) not in policy.object_stores:
            allowed = ", ".join(policy.object_stores) or "none (set LEARNERKIT_OBJECT_STORES)"
            problems.append(((*loc, "auth_url"), f"{url!r} is not an object store this scheduler allows: {allowed}"))
    _refuse(problems, source)


def check_tenant_settings(manifest: JobManifest, tenant: str, policy: SubmitPolicy, source: str) -> None:
    """Refuse, naming each field, what the tenants file forbids this tenant (``job validate`` with a tenants file:
    the same checks as :func:`check_submission`'s)."""
    _refuse(_tenant_problems(manifest, tenant, policy), source)


def _tenant_problems(manifest: JobManifest, tenant: str, policy: SubmitPolicy) -> list[tuple[FieldPath, str]]:
    problems: list[tuple[FieldPath, str]] = []
    extensions = manifest.extensions
    if extensions.tenant not in ("default", tenant):
        problems.append((("learnerkit", "tenant"), f"{extensions.tenant!r} is not your tenant ({tenant!r})"))
    low, high = policy.priority_range(tenant)
    if not low <= extensions.priority <= high:
        message = f"tenant {tenant!r} may use priorities {low}..{high}; got {extensions.priority}"
        problems.append((("learnerkit", "priority"), message))
    if not extensions.preemptible and not policy.may_opt_out(tenant):
        message = f"tenant {tenant!r} may not opt out of preemption (the tenants file's opt_out); remove it"
        problems.append((("learnerkit", "preemptible"), message))
    return problems


def _admissible(manifest: JobManifest, policy: SubmitPolicy) -> list[tuple[FieldPath, str]]:
    learners = manifest.resources.learners
    if learners > policy.max_learners:
        return [
            (("learners",), f"at most {policy.max_learners} learners per job (LEARNERKIT_MAX_LEARNERS); got {learners}")
        ]
    return []


def _refuse(problems: list[tuple[FieldPath, str]], source: str) -> None:
    if problems:
        raise ManifestError([Problem(Path(source), None, loc, message) for loc, message in problems])


def store_folder(store: DataStore) -> str:
    """The host folder of a ``mount_volume`` store: its ``path``, and in it its ``training_data`` container."""
    return str(PurePosixPath(store.connection.get("path", "")) / (store.training_data or ""))


def host_folder(path: str, policy: SubmitPolicy) -> str:
    """The host folder a ``mount_volume`` store mounts, its links resolved; `ConfigError` unless it lies under a
    folder of ``policy.host_paths``."""
    if not policy.host_paths:
        raise ConfigError("host mounts are off on this scheduler (LEARNERKIT_HOST_PATHS names no host folder)")
    resolved = PurePosixPath(os.path.realpath(path))
    allowed = [PurePosixPath(os.path.realpath(folder)) for folder in policy.host_paths]
    if ".." in PurePosixPath(path).parts or not any(resolved.is_relative_to(folder) for folder in allowed):
        raise ConfigError(f"{path!r} is not under a host folder this scheduler allows: {', '.join(policy.host_paths)}")
    return str(resolved)


def _host_path_problems(path: str, policy: SubmitPolicy, loc: FieldPath) -> list[tuple[FieldPath, str]]:
    try:
        host_folder(path, policy)
    except ConfigError as e:
        return [(loc, str(e))]
    return []
