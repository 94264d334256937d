"""Locked base .debs fetched by the host's apt, in a private state of its own.

The base is made from its lock, so the .debs of the base cannot come from a container of it: the host's apt
(Debian's, whichever release) downloads them from the recipe's mirrors with its own lists, checked against
Debian's archive keys, without touching the host's package state; each file is then admitted to the cache
only if its sha256 is the locked one.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from learnerkit.common.errors import ToolMissingError
from learnerkit_build.lock.cache import admit, cached_path
from learnerkit_build.lock.debian import pool_name
from learnerkit_build.lock.fetch import Download
from learnerkit_build.lock.model import LockedDeb, LockError

ARCHIVE_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
_URI = re.compile(r"^'(?P<url>[^']+)' \S+ (?P<size>\d+) SHA256:(?P<sha256>[0-9a-f]{64})$")


def fetch_debs(debs: list[LockedDeb], sources: list[str]) -> None:
    """Download those of `debs` the cache lacks, from `sources` (one-line apt source entries)."""
    wanted = [deb for deb in debs if not cached_path(deb.sha256).is_file()]
    if not wanted:
        return
    with private_apt(sources) as (apt, root):
        (root / "debs").mkdir()
        _apt([*apt, "download", *(f"{d.package}={d.version}" for d in wanted)], root / "debs")
        by_name = {deb.filename: deb for deb in wanted}
        for path in sorted((root / "debs").iterdir()):
            deb = by_name.get(pool_name(path.name))
            if deb is None:
                raise LockError(f"apt downloaded {path.name}, which the lock does not name")
            admit(path, deb.sha256)
    still = [deb.filename for deb in wanted if not cached_path(deb.sha256).is_file()]
    if still:
        raise LockError(f"could not fetch {', '.join(still)} from {', '.join(sources)}")


def deb_downloads(debs: list[LockedDeb], sources: list[str]) -> tuple[list[Download], list[LockedDeb]]:
    """The URL of each of `debs` on `sources` as apt's signed indexes name it (`apt-get --print-uris download`:
    nothing is downloaded), and the debs no index offers with their locked sha256."""
    if not debs:
        return [], []
    with private_apt(sources) as (apt, root):
        listed = _apt([*apt, "--print-uris", "download", *(f"{d.package}={d.version}" for d in debs)], root)
    offers = {}
    for line in listed.splitlines():
        match = _URI.match(line)
        if match:
            offers[match["sha256"]] = (match["url"], int(match["size"]))
    found = [Download(d.filename, d.sha256, *offers[d.sha256]) for d in debs if d.sha256 in offers]
    return found, [d for d in debs if d.sha256 not in offers]


@contextmanager
def private_apt(sources: list[str]) -> Iterator[tuple[list[str], Path]]:
    """The host's apt-get with a state, cache and sources of its own (in a temporary folder), its lists updated."""
    exe = shutil.which("apt-get")
    if exe is None:
        raise ToolMissingError("apt-get is not installed: the locked .debs are fetched with the host's apt")
    with tempfile.TemporaryDirectory(prefix="learnerkit-hostapt-") as scratch:
        root = Path(scratch)
        for folder in ("state/lists/partial", "cache/archives/partial", "parts", "prefs"):
            (root / folder).mkdir(parents=True)
        (root / "status").write_text("", encoding="utf-8")
        (root / "sources.list").write_text("".join(f"{line}\n" for line in sources), encoding="utf-8")
        options = [
            f"Dir::State={root}/state",
            f"Dir::State::status={root}/status",
            f"Dir::Cache={root}/cache",
            f"Dir::Etc::SourceList={root}/sources.list",
            f"Dir::Etc::SourceParts={root}/parts",
            f"Dir::Etc::PreferencesParts={root}/prefs",
            "Dir::Etc::Preferences=/dev/null",
            "Debug::NoLocking=true",
            "APT::Sandbox::User=root",
        ]
        apt = [exe, "-qq", *(arg for option in options for arg in ("-o", option))]
        _apt([*apt, "update"], root)
        yield apt, root


def _apt(argv: list[str], cwd: Path) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise LockError(
            f"{' '.join(argv[-2:])}: apt-get failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}"
        )
    return done.stdout
