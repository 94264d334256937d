"""Debian packages of a lock: resolved, hashed and downloaded by apt in a throwaway container of the base.

apt in the base itself answers, so the versions are the ones the base's sources offer and apt checks every
index against Debian's archive keys; the sha256 of each .deb is the one those signed indexes name, and each
downloaded file is checked against it again on its way into the cache.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path, PurePosixPath

import docker.errors
import requests
from debian.deb822 import Deb822

from learnerkit.common import engine
from learnerkit_build.lock.cache import admit
from learnerkit_build.lock.model import LockedDeb, LockError

# Inst NAME [OLD] (VERSION ARCHIVE [ARCH])
_INST = re.compile(r"^Inst (?P<name>\S+) (?:\[[^]]*\] )?\((?P<version>\S+) .*\[(?P<arch>[^]]+)\]\)")
_RESOLVE = """\
set -eu
apt-get update -qq
dpkg-query -W -f '${db:Status-Abbrev}${Package}=${Version}\\n' | sed -n 's/^ii *//p' > /out/base.txt
apt-get install -s --no-install-recommends -qq "$@" > /out/simulate.txt
"""
_SHOW = """\
set -eu
apt-get update -qq
apt-cache show --no-all-versions "$@" > /out/show.txt
"""
_DOWNLOAD = """\
set -eu
apt-get update -qq
mkdir -p /tmp/debs && cd /tmp/debs && apt-get download -qq "$@" && cp -- *.deb /out/debs/
"""


def resolve_debs(base_ref: str, packages: list[str]) -> list[LockedDeb]:
    """Every package of `base_ref` (origin base) and what `apt-get install packages` adds (origin image)."""
    with tempfile.TemporaryDirectory(prefix="learnerkit-lock-") as scratch:
        out = Path(scratch)
        _in_base(base_ref, _RESOLVE, packages, out)
        base = (out / "base.txt").read_text(encoding="utf-8").split()
        added = [
            f"{m['name']}={m['version']}"
            for line in (out / "simulate.txt").read_text(encoding="utf-8").splitlines()
            if (m := _INST.match(line))
        ]
        _in_base(base_ref, _SHOW, base + added, out)
        show = (out / "show.txt").read_text(encoding="utf-8")
    found = {(p["Package"], p["Version"]): p for p in Deb822.iter_paragraphs(show.splitlines())}
    locked = []
    for origin, pins in (("base", base), ("image", added)):
        for pin in pins:
            name, _, version = pin.partition("=")
            para = found.get((name, version))
            if para is None:
                raise LockError(f"{base_ref}: no index of its sources offers {pin} any more (rebuild the base)")
            locked.append(
                LockedDeb(
                    package=name,
                    version=version,
                    architecture=para["Architecture"],
                    filename=PurePosixPath(para["Filename"]).name,
                    sha256=para["SHA256"],
                    origin="base" if origin == "base" else "image",
                )
            )
    return locked


def download_debs(base_ref: str, debs: list[LockedDeb]) -> None:
    """Fetch `debs` with apt in a container of the base and admit each to the cache, sha256 checked."""
    if not debs:
        return
    with tempfile.TemporaryDirectory(prefix="learnerkit-debs-") as scratch:
        out = Path(scratch)
        (out / "debs").mkdir()
        _in_base(base_ref, _DOWNLOAD, [f"{d.package}={d.version}" for d in debs], out)
        by_name = {d.filename: d for d in debs}
        for path in sorted((out / "debs").iterdir()):
            deb = by_name.get(pool_name(path.name))
            if deb is None:
                raise LockError(f"apt downloaded {path.name}, which the lock does not name")
            admit(path, deb.sha256)


def pool_name(downloaded: str) -> str:
    """The pool file name of a .deb apt downloaded: apt names it NAME_VERSION_ARCH.deb with the epoch's colon
    escaped, the pool name has no epoch."""
    return re.sub(r"_\d+%3a", "_", downloaded)


def _in_base(base_ref: str, script: str, args: list[str], out: Path) -> None:
    try:
        engine.engine().containers.run(
            base_ref,
            ["bash", "-c", script, "lock", *args],
            entrypoint=[],
            user="0",
            remove=True,
            environment={"DEBIAN_FRONTEND": "noninteractive"},
            volumes={str(out): {"bind": "/out", "mode": "rw"}},
        )
    except docker.errors.ContainerError as e:
        said = e.stderr.decode(errors="replace").strip() if isinstance(e.stderr, bytes) else str(e.stderr)
        raise LockError(f"apt in a container of {base_ref} failed (exit {e.exit_status}): {said[-2000:]}") from e
    except (docker.errors.DockerException, requests.exceptions.RequestException) as e:
        raise LockError(f"could not run apt in a container of {base_ref}: {e}") from e
