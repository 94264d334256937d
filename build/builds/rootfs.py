"""A base's root filesystem made by mmdebstrap: from its lock's .debs (a local repository of exactly those
files) or, for a base without a lock, from the recipe's mirrors; packed as one reproducible layer tarball.

mmdebstrap runs with SOURCE_DATE_EPOCH and removes logs, ldconfig's aux-cache and the machine ID itself; the
files it copies from the host (resolv.conf, hostname) are removed here. The tarball is sorted by name with
numeric owners; its times are clamped when it is loaded (`learnerkit_build.repro.reproducible`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from learnerkit.common.errors import ToolMissingError
from learnerkit_build.builds.buildkit import LogSink
from learnerkit_build.errors import BuildToolError
from learnerkit_build.lock.cache import cached_path, sha256_file
from learnerkit_build.lock.model import Lock

HOOKS = Path("/usr/share/mmdebstrap/hooks")
"""mmdebstrap's own hooks: `file-mirror-automount` makes a file:// repository visible in the chroot, `merged-usr`
sets up bookworm's merged /usr before any package is installed (the custom variant would not, and minbase would
pull in `usrmerge` and perl where debootstrap's base and the lock have `usr-is-merged`)."""
CLOCK_HOOK = "--setup-hook=date -u '+build clock: %Y-%m-%dT%H:%M:%SZ'"
"""Logs the clock mmdebstrap and its hooks read (with SOURCE_DATE_EPOCH nothing in the tree should depend on it):
how a rebuild under libfaketime shows that the clock was really moved."""
CLOCK_VARIABLES = ("LD_PRELOAD", "FAKETIME", "FAKETIME_SHARED", "FAKETIME_NO_CACHE", "DONT_FAKE_MONOTONIC")
"""The caller's libfaketime settings, the only variables of its environment mmdebstrap inherits, so a build run
under `faketime` runs mmdebstrap (and apt, and the hooks) at the faked time too."""
HOST_FILES = ("etc/resolv.conf", "etc/hostname")
"""What mmdebstrap copies from the building host (debootstrap's habit); Docker provides both at run time."""


class RootfsError(BuildToolError):
    """mmdebstrap, or the packing of its result, failed."""


def mmdebstrap_exe() -> str:
    exe = shutil.which("mmdebstrap")
    if exe is None:
        raise ToolMissingError("mmdebstrap is not installed (Debian package `mmdebstrap`; `make setup` installs it)")
    return exe


def local_repository(lock: Lock, dest: Path) -> str:
    """A flat apt repository of the lock's .debs at `dest` (each checked against its sha256); its source line."""
    dest.mkdir(parents=True)
    paragraphs = []
    for deb in lock.debian:
        source = cached_path(deb.sha256)
        if not source.is_file() or sha256_file(source) != deb.sha256:
            raise RootfsError(
                f"{lock.image}: the lock cache's {deb.filename} is missing or not the locked {deb.sha256}"
            )
        target = dest / deb.filename
        shutil.copyfile(source, target)
        control = subprocess.run(["dpkg-deb", "--field", str(target)], capture_output=True, text=True, check=False)
        if control.returncode != 0:
            raise RootfsError(f"{lock.image}: {deb.filename} is not a readable .deb: {control.stderr.strip()}")
        size = target.stat().st_size
        paragraphs.append(
            f"{control.stdout.rstrip()}\nFilename: ./{deb.filename}\nSize: {size}\nSHA256: {deb.sha256}\n"
        )
    (dest / "Packages").write_text("\n".join(paragraphs), encoding="utf-8")
    # trusted=yes: this repository is the lock's files, each checked above against the sha256 that Debian's
    # signed indexes gave when the lock was made.
    return f"deb [trusted=yes] file://{dest} ./"


def bootstrap(
    suite: str,
    rootfs: Path,
    *,
    sources: list[str],
    variant: str,
    include: list[str],
    epoch: int,
    on_line: LogSink,
) -> None:
    """Run mmdebstrap into the empty folder `rootfs` (root mode); what it leaves mounted there on a failure is
    unmounted."""
    argv = [mmdebstrap_exe(), "--mode=root", f"--variant={variant}", "--format=directory", "--verbose"]
    if include:
        argv.append(f"--include={','.join(include)}")
    argv += [CLOCK_HOOK, f"--hook-dir={HOOKS / 'merged-usr'}"]
    if any("file://" in line for line in sources):
        argv.append(f"--hook-dir={HOOKS / 'file-mirror-automount'}")
    argv += [suite, str(rootfs), *sources]
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "SOURCE_DATE_EPOCH": str(epoch),
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
        "TMPDIR": str(rootfs.parent),
        **{name: os.environ[name] for name in CLOCK_VARIABLES if name in os.environ},
    }
    try:
        _run(argv, on_line, "mmdebstrap", env)
    finally:
        _unmount_under(rootfs)
    for name in HOST_FILES:
        (rootfs / name).unlink(missing_ok=True)


def pack(rootfs: Path, tarball: Path, on_line: LogSink) -> None:
    """`rootfs` as a tar sorted by name, numeric owners, without /dev's nodes (Docker makes /dev)."""
    exe = shutil.which("tar")
    if exe is None:
        raise ToolMissingError("tar is not installed")
    argv = [exe, "--sort=name", "--numeric-owner", "--format=pax", "--xattrs", "--xattrs-include=security.capability"]
    argv += ["--exclude=./dev/*", "-C", str(rootfs), "-cf", str(tarball), "."]
    _run(argv, on_line, "tar", {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8"})


def _unmount_under(rootfs: Path) -> None:
    """Unmount what a failed mmdebstrap left mounted in `rootfs` (its file-mirror hook bind-mounts the
    repository), deepest first, so that removing the scratch folder removes only the scratch folder."""
    inside = str(rootfs.resolve()) + "/"
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text(encoding="utf-8").splitlines()]
    for point in sorted((m for m in mounts if m.startswith(inside)), key=len, reverse=True):
        subprocess.run(["umount", point], capture_output=True, check=False)


def _run(argv: list[str], on_line: LogSink, what: str, env: dict[str, str]) -> None:
    """Run `argv` under umask 022 whatever the caller's: folders mmdebstrap makes take their modes from it."""
    on_line(f"$ {' '.join(argv)}")
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", env=env, umask=0o022
    ) as proc:
        lines = []
        for raw in proc.stdout or []:
            line = raw.rstrip("\n")
            lines.append(line)
            on_line(line)
    if proc.returncode != 0:
        tail = "\n".join(lines[-30:])
        raise RootfsError(f"{what} failed with exit code {proc.returncode}:\n{tail}")
