"""Base images made on this machine: `debootstrap --variant=minbase` imported with `docker import`.

No registry can be pulled from, so the root of every learner image is made here. A base is cached by
the hash of its recipe (suite, mirror, components, debootstrap version): the hash is part of its tag.
Pending security updates are applied at creation; `--rebuild` makes a fresh one from the same recipe.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import docker.errors
import requests

from learnerkit.common import engine
from learnerkit.common.errors import ConfigError, ToolMissingError
from learnerkit_build.buildkit import LogSink
from learnerkit_build.errors import BuildToolError

BASE_REPOSITORY = "learnerkit/base"
RECIPE_SCHEME = "learnerkit-base/2"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_SECURITY_MIRROR = "http://deb.debian.org/debian-security"


class BaseImageError(BuildToolError):
    """debootstrap or the import of its result failed."""


@dataclass(frozen=True)
class BaseRecipe:
    name: str
    suite: str
    python: str
    """The Python minor version the suite's python3 package provides."""
    mirror: str = DEFAULT_MIRROR
    security_mirror: str = DEFAULT_SECURITY_MIRROR
    variant: str = "minbase"
    slim: bool = True
    """Drop docs (copyright files kept), man pages and translations, now and for every later install."""


BASES = {"debian-bookworm": BaseRecipe(name="debian-bookworm", suite="bookworm", python="3.11")}


def recipe_for(name: str) -> BaseRecipe:
    """The recipe of a local base, with mirrors from $LEARNERKIT_DEBIAN_MIRROR / _SECURITY_MIRROR."""
    if name not in BASES:
        raise ConfigError(f"unknown local base {name!r}; valid: {', '.join(sorted(BASES))}")
    recipe = BASES[name]
    return BaseRecipe(
        name=recipe.name,
        suite=recipe.suite,
        python=recipe.python,
        mirror=os.environ.get("LEARNERKIT_DEBIAN_MIRROR", recipe.mirror),
        security_mirror=os.environ.get("LEARNERKIT_DEBIAN_SECURITY_MIRROR", recipe.security_mirror),
        variant=recipe.variant,
        slim=recipe.slim,
    )


def debootstrap_version() -> str:
    try:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Version}", "debootstrap"],
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError:
        return "unknown"
    return out.stdout.strip() or "unknown"


def recipe_hash(recipe: BaseRecipe) -> str:
    payload = json.dumps(
        {"scheme": RECIPE_SCHEME, **asdict(recipe), "debootstrap": debootstrap_version()}, sort_keys=True
    )
    return hashlib.sha256(payload.encode()).hexdigest()


def base_reference(recipe: BaseRecipe) -> str:
    """The immutable tag of a base: known without an engine, so templates render anywhere."""
    return f"{BASE_REPOSITORY}:{recipe.name}-{recipe_hash(recipe)[:12]}"


def ensure_base(recipe: BaseRecipe, on_line: LogSink, *, rebuild: bool = False) -> tuple[str, bool]:
    """The base's image ID, making it first when missing (or when `rebuild`); returns (id, made)."""
    reference = base_reference(recipe)
    existing = engine.image_id(reference)
    if existing and not rebuild:
        return existing, False
    image = _make_base(recipe, reference, on_line)
    return image, True


def _make_base(recipe: BaseRecipe, reference: str, on_line: LogSink) -> str:
    exe = shutil.which("debootstrap") or shutil.which("debootstrap", path="/usr/sbin:/sbin")
    if exe is None:
        raise ToolMissingError("debootstrap is not installed (Debian package `debootstrap`; `make setup` installs it)")
    if os.geteuid() != 0:
        raise BaseImageError(f"making base {recipe.name} runs debootstrap, which needs root: run as root or via sudo")
    with tempfile.TemporaryDirectory(prefix=f"learnerkit-{recipe.name}-") as scratch:
        rootfs = Path(scratch) / "rootfs"
        _run(
            [exe, f"--variant={recipe.variant}", recipe.suite, str(rootfs), recipe.mirror],
            on_line,
            "debootstrap",
        )
        _write_sources(rootfs, recipe)
        _run(["chroot", str(rootfs), "apt-get", "update"], on_line, "apt-get update (in the new base)")
        _run(
            ["chroot", str(rootfs), "apt-get", "-y", "-o", "Dpkg::Options::=--force-confold", "upgrade"],
            on_line,
            "apt-get upgrade (security and point-release updates)",
            env={"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        )
        packages = _package_list(rootfs)
        if recipe.slim:
            _slim(rootfs)
        _clean(rootfs)
        tarball = Path(scratch) / "rootfs.tar"
        _run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(tarball), "."], on_line, "tar")
        labels = {
            "io.learnerkit.base.name": recipe.name,
            "io.learnerkit.base.suite": recipe.suite,
            "io.learnerkit.base.mirror": recipe.mirror,
            "io.learnerkit.base.security-mirror": recipe.security_mirror,
            "io.learnerkit.base.debootstrap": debootstrap_version(),
            "io.learnerkit.base.recipe-hash": recipe_hash(recipe),
            "io.learnerkit.base.packages": packages,
            "org.opencontainers.image.created": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        on_line(f"importing {tarball.stat().st_size / 1e6:.0f} MB as {reference}")
        changes = [f"LABEL {json.dumps(k)}={json.dumps(v)}" for k, v in labels.items()]
        changes += [
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            'CMD ["/bin/bash"]',
        ]
        repository, tag = reference.split(":", 1)
        try:
            engine.engine().api.import_image_from_file(str(tarball), repository=repository, tag=tag, changes=changes)
        except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as e:
            raise BaseImageError(f"docker import of {reference} failed: {e}") from e
    image = engine.image_id(reference)
    if image is None:
        raise BaseImageError(f"docker import reported success but {reference} is missing")
    engine.tag_image(image, BASE_REPOSITORY, recipe.name)
    return image


def _write_sources(rootfs: Path, recipe: BaseRecipe) -> None:
    sources = (
        f"Types: deb\nURIs: {recipe.mirror}\nSuites: {recipe.suite} {recipe.suite}-updates\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        f"Types: deb\nURIs: {recipe.security_mirror}\nSuites: {recipe.suite}-security\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    )
    (rootfs / "etc/apt/sources.list").unlink(missing_ok=True)
    (rootfs / "etc/apt/sources.list.d/debian.sources").write_text(sources, encoding="utf-8")


def _package_list(rootfs: Path) -> str:
    out = subprocess.run(
        ["dpkg-query", f"--admindir={rootfs}/var/lib/dpkg", "-W", "-f", "${Package}=${Version}\n"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return ",".join(sorted(line for line in out.splitlines() if line))


SLIM_DPKG_CONFIG = """\
# learnerkit base: no docs (but copyright files), man pages or translations in learner images.
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
"""


def _slim(rootfs: Path) -> None:
    (rootfs / "etc/dpkg/dpkg.cfg.d/learnerkit-slim").write_text(SLIM_DPKG_CONFIG, encoding="utf-8")
    for folder in ("usr/share/man", "usr/share/info", "usr/share/locale", "usr/share/lintian"):
        for path in (rootfs / folder).glob("*"):
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    for path in (rootfs / "usr/share/doc").glob("*/*"):
        if path.name != "copyright":
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()


def _clean(rootfs: Path) -> None:
    """Drop what a base must not carry: apt lists and archives, logs, machine identity."""
    for pattern in (
        "var/lib/apt/lists/*",
        "var/cache/apt/*.bin",
        "var/cache/apt/archives/*.deb",
        "var/log/*.log",
        "var/log/apt/*",
        "tmp/*",
        "var/tmp/*",
    ):
        for path in rootfs.glob(pattern):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif path.name != "partial":
                path.unlink()
    (rootfs / "etc/machine-id").write_text("", encoding="utf-8")


def _run(argv: list[str], on_line: LogSink, what: str, env: dict[str, str] | None = None) -> None:
    on_line(f"$ {' '.join(argv)}")
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", env=env
    ) as proc:
        lines = []
        for raw in proc.stdout or []:
            line = raw.rstrip("\n")
            lines.append(line)
            on_line(line)
    if proc.returncode != 0:
        tail = "\n".join(lines[-30:])
        raise BaseImageError(f"{what} failed with exit code {proc.returncode}:\n{tail}")
