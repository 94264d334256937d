"""Locked base .debs fetched by the host's apt, in a private state of its own.

The base is made from its lock, so the .debs of the base cannot come from a container of it: the host's apt
(Debian's, whichever release) downloads them from the recipe's mirrors with its own lists, checked against
Debian's archive keys, without touching the host's package state; each file is then admitted to the cache
only if its sha256 is the locked one. The private lists are kept between runs (`<state home>/host-apt/`: an update
of a base's three suites took about 26 s of every fill) and updated when older than a day or when they lack a
locked version.
"""

from __future__ import annotations

import fcntl
import hashlib
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from learnerkit.common.errors import ToolMissingError
from learnerkit_build.lock.cache import admit, cached_path
from learnerkit_build.lock.debian import pool_name
from learnerkit_build.lock.fetch import Download
from learnerkit_build.lock.model import LockedDeb, LockError
from learnerkit_build.state import state_home

ARCHIVE_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
_NOT_FOUND = re.compile(r"Version '(?P<version>[^']+)' for '(?P<package>[^']+)' was not found")
_URI = re.compile(r"^'(?P<url>[^']+)' \S+ (?P<size>\d+) SHA256:(?P<sha256>[0-9a-f]{64})$")


LISTS_MAX_AGE_S = 24 * 3600.0
"""The private lists are updated again when older than this (Debian's mirrors publish a few times a day; a locked
version the lists no longer name updates them at once, whatever their age)."""
HOST_APT_DIR = "host-apt"
"""Under the state home: one private apt state per set of sources, kept between runs."""


def fetch_debs(debs: list[LockedDeb], sources: list[str]) -> None:
    """Download those of `debs` the cache lacks, from `sources` (one-line apt source entries)."""
    wanted = [deb for deb in debs if not cached_path(deb.sha256).is_file()]
    if not wanted:
        return
    argv = ["download", *(f"{d.package}={d.version}" for d in wanted)]
    with private_apt(sources) as apt, tempfile.TemporaryDirectory(prefix="learnerkit-hostapt-") as scratch:
        folder = Path(scratch)
        try:
            apt.run(argv, folder)
        except LockError:
            if apt.fresh:
                raise
            apt.update()
            apt.run(argv, folder)
        by_name = {deb.filename: deb for deb in wanted}
        for path in sorted(folder.iterdir()):
            deb = by_name.get(pool_name(path.name))
            if deb is None:
                raise LockError(f"apt downloaded {path.name}, which the lock does not name")
            admit(path, deb.sha256)
    still = [deb.filename for deb in wanted if not cached_path(deb.sha256).is_file()]
    if still:
        raise LockError(f"could not fetch {', '.join(still)} from {', '.join(sources)}")


def deb_downloads(debs: list[LockedDeb], sources: list[str]) -> tuple[list[Download], list[LockedDeb]]:
    """The URL of each of `debs` on `sources` as apt's signed indexes name it (`apt-get --print-uris download`:
    nothing is downloaded), and the debs no index offers with their locked sha256. Lists kept from an earlier run
    that lack one of `debs` are updated and asked again."""
    if not debs:
        return [], []
    with private_apt(sources) as apt:
        offers = _offers(apt, debs)
        if not apt.fresh and any(d.sha256 not in offers for d in debs):
            apt.update()
            offers = _offers(apt, debs)
    found = [Download(d.filename, d.sha256, *offers[d.sha256]) for d in debs if d.sha256 in offers]
    return found, [d for d in debs if d.sha256 not in offers]


def _offers(apt: HostApt, debs: list[LockedDeb]) -> dict[str, tuple[str, int]]:
    """{sha256: (url, size)} of those of `debs` the lists name. apt refuses a whole request for one version its
    lists lack, so those it names are asked without once more."""
    asked = [f"{d.package}={d.version}" for d in debs]
    try:
        listed = apt.run(["--print-uris", "download", *asked], apt.root)
    except LockError as e:
        lacking = {f"{m['package']}={m['version']}" for m in _NOT_FOUND.finditer(str(e))}
        rest = [a for a in asked if a not in lacking]
        if not lacking or not rest:
            return {}
        try:
            listed = apt.run(["--print-uris", "download", *rest], apt.root)
        except LockError:
            return {}
    offers = {}
    for line in listed.splitlines():
        match = _URI.match(line)
        if match:
            offers[match["sha256"]] = (match["url"], int(match["size"]))
    return offers


@dataclass
class HostApt:
    """The host's apt-get with a state, cache and sources of its own, kept between runs under the state home."""

    argv: list[str]
    root: Path
    fresh: bool = False
    """Its lists were updated by this command."""

    def run(self, args: list[str], cwd: Path) -> str:
        return _apt([*self.argv, *args], cwd)

    def update(self) -> None:
        self.run(["update"], self.root)
        (self.root / "updated").write_text(f"{time.time()}\n", encoding="utf-8")
        self.fresh = True

    def age_s(self) -> float:
        stamp = self.root / "updated"
        return time.time() - stamp.stat().st_mtime if stamp.is_file() else float("inf")


@contextmanager
def private_apt(sources: list[str], max_age_s: float = LISTS_MAX_AGE_S) -> Iterator[HostApt]:
    """The host's apt-get with a private state for `sources` (one folder per set of sources under the state
    home, held by one command at a time), its lists updated where older than `max_age_s`."""
    exe = shutil.which("apt-get")
    if exe is None:
        raise ToolMissingError("apt-get is not installed: the locked .debs are fetched with the host's apt")
    key = hashlib.sha256("".join(f"{line}\n" for line in sources).encode()).hexdigest()[:16]
    root = state_home() / HOST_APT_DIR / key
    for folder in ("state/lists/partial", "cache/archives/partial", "parts", "prefs"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    with (root / "lock").open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        # Written once: apt rebuilds its package cache (seconds) whenever these change.
        for name, text in (("status", ""), ("sources.list", "".join(f"{line}\n" for line in sources))):
            if not (root / name).is_file():
                (root / name).write_text(text, encoding="utf-8")
        options = [
            f"Dir::State={root}/state",
            f"Dir::State::status={root}/status",
            f"Dir::Cache={root}/cache",
            # Kept, where a host's apt.conf (Docker's docker-clean) turns the package cache off: parsing the
            # lists again took about 1 s of CPU on every call.
            "Dir::Cache::pkgcache=pkgcache.bin",
            "Dir::Cache::srcpkgcache=srcpkgcache.bin",
            f"Dir::Etc::SourceList={root}/sources.list",
            f"Dir::Etc::SourceParts={root}/parts",
            f"Dir::Etc::PreferencesParts={root}/prefs",
            "Dir::Etc::Preferences=/dev/null",
            "Debug::NoLocking=true",
            "APT::Sandbox::User=root",
        ]
        apt = HostApt([exe, "-qq", *(arg for option in options for arg in ("-o", option))], root)
        if apt.age_s() > max_age_s:
            apt.update()
        yield apt


def _apt(argv: list[str], cwd: Path) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise LockError(
            f"{' '.join(argv[-2:])}: apt-get failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}"
        )
    return done.stdout
