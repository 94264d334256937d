"""Making a base image: mmdebstrap from the committed lock's .debs (or the mirrors), cleaned, packed and loaded
with a canonical config (the recipe, its hash and tag: learnerkit_build.builds.baseimage)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from learnerkit.common import engine
from learnerkit_build.builds.baseimage import BASE_REPOSITORY, BaseRecipe, mmdebstrap_version, recipe_hash
from learnerkit_build.builds.buildkit import LogSink
from learnerkit_build.builds.rootfs import bootstrap, local_repository, pack
from learnerkit_build.errors import BuildToolError
from learnerkit_build.lock.hostapt import ARCHIVE_KEYRING, fetch_debs
from learnerkit_build.lock.model import read_lock
from learnerkit_build.recipes.render import SOURCE_DATE_EPOCH as EPOCH
from learnerkit_build.repro.reproducible import layer_archive, load_archive


class BaseImageError(BuildToolError):
    """The base could not be made (not root)."""


def make_base(recipe: BaseRecipe, reference: str, on_line: LogSink) -> str:
    with tempfile.TemporaryDirectory(prefix=f"learnerkit-{recipe.name}-") as scratch:
        archive, image = base_archive(recipe, Path(scratch), on_line)
        on_line(f"loading {archive.stat().st_size / 1e6:.0f} MB as {reference} ({image})")
        load_archive(archive, image)
    repository, tag = reference.split(":", 1)
    engine.tag_image(image, repository, tag)
    engine.tag_image(image, BASE_REPOSITORY, recipe.name)
    return image


def base_archive(recipe: BaseRecipe, scratch: Path, on_line: LogSink) -> tuple[Path, str]:
    """Make the base in the empty folder `scratch`: its `docker load` archive there, and its image ID.

    From the committed lock: exactly the lock's .debs (fetched once into the lock cache), bootstrapped with
    mmdebstrap's custom variant; without a lock, mmdebstrap's `variant` from the mirrors. Either way with
    SOURCE_DATE_EPOCH, the same cleaning, a tarball sorted by name and a canonical config, so the same lock
    gives the same image ID in any folder, clock, time zone or umask."""
    if os.geteuid() != 0:
        raise BaseImageError(f"making base {recipe.name} runs mmdebstrap in root mode: run as root or via sudo")
    rootfs = scratch / "rootfs"
    rootfs.mkdir(mode=0o755)
    rootfs.chmod(0o755)
    if recipe.lock_file is not None:
        lock = read_lock(recipe.lock_file)
        fetch_debs(list(lock.debian), source_lines(recipe))
        on_line(f"bootstrapping {len(lock.debian)} locked packages of {recipe.lock_file.name}")
        repository = local_repository(lock, scratch / "repository")
        include = sorted(deb.package for deb in lock.debian)
        bootstrap(
            recipe.suite, rootfs, sources=[repository], variant="custom", include=include, epoch=EPOCH, on_line=on_line
        )
    else:
        sources = source_lines(recipe)
        bootstrap(
            recipe.suite, rootfs, sources=sources, variant=recipe.variant, include=[], epoch=EPOCH, on_line=on_line
        )
    _write_sources(rootfs, recipe)
    packages = _package_list(rootfs)
    if recipe.slim:
        _slim(rootfs)
    _clean(rootfs)
    tarball = scratch / "rootfs.tar"
    pack(rootfs, tarball, on_line)
    labels = {
        "io.learnerkit.base.name": recipe.name,
        "io.learnerkit.base.suite": recipe.suite,
        "io.learnerkit.base.mirror": recipe.mirror,
        "io.learnerkit.base.security-mirror": recipe.security_mirror,
        "io.learnerkit.base.mmdebstrap": mmdebstrap_version(),
        "io.learnerkit.base.recipe-hash": recipe_hash(recipe),
        "io.learnerkit.base.packages": packages,
        "org.opencontainers.image.created": "",
    }
    made_by = f"--variant=custom from {recipe.lock_file.name}" if recipe.lock_file else f"--variant={recipe.variant}"
    config = {
        "architecture": _architecture(),
        "os": "linux",
        "config": {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "Cmd": ["/bin/bash"],
            "Labels": labels,
        },
        "history": [{"created_by": f"learnerkit base {recipe.name}: mmdebstrap {made_by}"}],
    }
    archive = scratch / "image.tar"
    image = layer_archive(tarball, archive, config, EPOCH)
    tarball.unlink()
    return archive, image


def source_lines(recipe: BaseRecipe) -> list[str]:
    """One-line apt sources of the recipe's mirrors: the suite, its updates and its security updates."""
    keyring = f"[signed-by={ARCHIVE_KEYRING}]"
    return [
        f"deb {keyring} {recipe.mirror} {recipe.suite} main",
        f"deb {keyring} {recipe.mirror} {recipe.suite}-updates main",
        f"deb {keyring} {recipe.security_mirror} {recipe.suite}-security main",
    ]


def _architecture() -> str:
    """The Docker architecture name of the packages mmdebstrap installs (the host's native one)."""
    native = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=True).stdout.strip()
    return {"i386": "386", "armhf": "arm", "ppc64el": "ppc64le"}.get(native, native)


def _write_sources(rootfs: Path, recipe: BaseRecipe) -> None:
    sources = (
        f"Types: deb\nURIs: {recipe.mirror}\nSuites: {recipe.suite} {recipe.suite}-updates\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        f"Types: deb\nURIs: {recipe.security_mirror}\nSuites: {recipe.suite}-security\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    )
    (rootfs / "etc/apt/sources.list").unlink(missing_ok=True)
    _write(rootfs / "etc/apt/sources.list.d/debian.sources", sources, 0o644)


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
    _write(rootfs / "etc/dpkg/dpkg.cfg.d/learnerkit-slim", SLIM_DPKG_CONFIG, 0o644)
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
        # owned by _apt, or by root where apt could not drop to _apt (a scratch folder _apt cannot read)
        "var/cache/apt/archives/partial",
        "var/log/*.log",
        "var/log/apt/*",
        "tmp/*",
        "var/tmp/*",
    ):
        for path in rootfs.glob(pattern):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
    _write(rootfs / "etc/machine-id", "", 0o444)


def _write(path: Path, text: str, mode: int) -> None:
    """Write `text` with `mode` whatever the umask (the base's bytes must not depend on it)."""
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
