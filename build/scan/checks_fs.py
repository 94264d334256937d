"""Checks on the final file system: setuid/setgid, world-writable paths, caches, accounts, unowned files."""

from __future__ import annotations

import posixpath
import stat
from collections import defaultdict

from learnerkit_build.scan.layers import ImageIndex
from learnerkit_build.scan.model import CheckResult, Evidence, Severity, result, unknown
from learnerkit_build.scan.packages import dpkg_owned_files

CACHE_PREFIXES = (
    "/var/cache/apt/archives/",
    "/var/cache/apt/pkgcache.bin",
    "/var/cache/apt/srcpkgcache.bin",
    "/root/.cache/pip/",
    "/root/.npm/_cacache/",
    "/var/cache/yum/",
    "/var/cache/apk/",
)
SYSTEM_DIRS = ("/usr/bin/", "/usr/sbin/", "/usr/lib/x86_64-linux-gnu/", "/usr/lib/aarch64-linux-gnu/")
SKIP_MOUNTS = ("/proc/", "/sys/", "/dev/")


def check_setuid(index: ImageIndex, base_layers: int | None) -> CheckResult:
    """New setuid/setgid files fail; those the base image already had are a warning of their own."""
    evidence = []
    for entry in index.files.values():
        if entry.kind == "file" and entry.mode & (stat.S_ISUID | stat.S_ISGID):
            bits = "setuid" if entry.mode & stat.S_ISUID else "setgid"
            origin = ""
            if base_layers is not None:
                origin = " (from the base image)" if entry.layer < base_layers else " (added by this image)"
            evidence.append(
                Evidence(
                    f"{bits} {oct(entry.mode)}{origin}",
                    path=entry.path,
                    layer=entry.layer,
                    history=index.history_of(entry.layer),
                )
            )
    return result("fs.setuid", "no setuid/setgid files (compared with the base image)", Severity.HIGH, evidence)


def check_world_writable(index: ImageIndex) -> CheckResult:
    evidence = []
    for entry in index.files.values():
        if entry.kind not in ("file", "dir") or entry.path.startswith(SKIP_MOUNTS):
            continue
        if entry.mode & stat.S_IWOTH and not (entry.kind == "dir" and entry.mode & stat.S_ISVTX):
            evidence.append(
                Evidence(
                    f"world-writable {entry.kind} {oct(entry.mode)} without the sticky bit",
                    path=entry.path,
                    layer=entry.layer,
                    history=index.history_of(entry.layer),
                )
            )
    return result("fs.world-writable", "no world-writable paths without the sticky bit", Severity.MEDIUM, evidence)


def check_package_caches(index: ImageIndex) -> CheckResult:
    hits: dict[str, list[str]] = defaultdict(list)
    for entry in index.files.values():
        if entry.kind == "file" and not entry.path.endswith("/lock"):
            prefix = next((p for p in CACHE_PREFIXES if entry.path.startswith(p)), None)
            if prefix:
                hits[prefix].append(entry.path)
    evidence = [
        Evidence(
            f"{len(paths)} package-manager cache file(s) under {prefix}",
            path=sorted(paths)[0],
            layer=index.files[sorted(paths)[0]].layer,
        )
        for prefix, paths in sorted(hits.items())
    ]
    return result("fs.package-cache", "no package-manager caches in the final file system", Severity.LOW, evidence)


def check_empty_passwords(index: ImageIndex) -> CheckResult:
    cid, title = "fs.empty-password", "no account with an empty password"
    text = index.text("/etc/shadow")
    if text is None:
        if index.text("/etc/passwd") is None:
            return unknown(cid, title, Severity.HIGH, "the image has neither /etc/shadow nor /etc/passwd")
        text = index.text("/etc/passwd") or ""
        where = "/etc/passwd"
    else:
        where = "/etc/shadow"
    evidence = [
        Evidence(f"account {parts[0]} has an empty password", path=where)
        for parts in (line.split(":") for line in text.splitlines())
        if len(parts) > 1 and parts[1] == ""
    ]
    return result(cid, title, Severity.HIGH, evidence)


def check_duplicate_ids(index: ImageIndex) -> CheckResult:
    cid, title = "fs.duplicate-ids", "no duplicate UIDs or GIDs"
    evidence = []
    for path, what in (("/etc/passwd", "UID"), ("/etc/group", "GID")):
        text = index.text(path)
        if text is None:
            return unknown(cid, title, Severity.MEDIUM, f"the image has no {path}")
        owners: dict[str, list[str]] = defaultdict(list)
        for parts in (line.split(":") for line in text.splitlines()):
            if len(parts) > 2:
                owners[parts[2]].append(parts[0])
        evidence += [
            Evidence(f"{what} {number} is shared by {', '.join(names)}", path=path)
            for number, names in owners.items()
            if len(names) > 1
        ]
    return result(cid, title, Severity.MEDIUM, evidence)


def check_unowned(index: ImageIndex) -> CheckResult:
    """Executables and libraries in system folders that no Debian package installed."""
    cid, title = "fs.unowned-files", "no files in system folders that no package owns"
    owned = dpkg_owned_files(index)
    if owned is None:
        return unknown(cid, title, Severity.MEDIUM, "no dpkg file lists in the image (/var/lib/dpkg/info/*.list)")
    canonical = {index.resolve(path) for path in owned}
    evidence = []
    for entry in index.files.values():
        if entry.kind not in ("file", "symlink") or not entry.path.startswith(SYSTEM_DIRS):
            continue
        if entry.kind == "symlink" and entry.linkname.startswith("/etc/alternatives/"):
            continue
        if posixpath.dirname(entry.path).count("/") > 3 or entry.path.endswith(".pyc"):
            continue
        if entry.path not in canonical:
            evidence.append(
                Evidence(
                    "not installed by any package",
                    path=entry.path,
                    layer=entry.layer,
                    history=index.history_of(entry.layer),
                )
            )
    return result(cid, title, Severity.MEDIUM, evidence, warn=True)


def fs_checks(index: ImageIndex, base_layers: int | None) -> list[CheckResult]:
    return [
        check_setuid(index, base_layers),
        check_world_writable(index),
        check_package_caches(index),
        check_empty_passwords(index),
        check_duplicate_ids(index),
        check_unowned(index),
    ]
