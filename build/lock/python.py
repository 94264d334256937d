"""Python distributions of a lock: pip resolves the requirements to wheels, which are hashed and cached.

`pip download` resolves every dependency exactly as an install into an empty venv would (wheels only, for
this host's CPython, which must be the image's minor version on the same platform), from the same index,
extra indexes and find-links the build would use; each downloaded wheel is hashed into the cache. A builder
stage's source distributions are downloaded the same way, as sources and without dependencies.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename

from learnerkit_build.lock.cache import admit
from learnerkit_build.lock.model import LockedSource, LockedWheel, LockError, normalise_name, pip_requirements
from learnerkit_build.recipes.render import BuildInputs


def resolve_wheels(requirements: list[str], python: str, inputs: BuildInputs) -> list[LockedWheel]:
    """The wheels `requirements` resolve to, with dependencies, each admitted to the cache."""
    have = f"{sys.version_info.major}.{sys.version_info.minor}"
    if have != python:
        raise LockError(f"locking for Python {python} needs a host Python {python}; this one is {have}")
    with tempfile.TemporaryDirectory(prefix="learnerkit-wheels-") as scratch:
        dest = Path(scratch) / "wheels"
        _pip(["download", "--only-binary=:all:", "--dest", str(dest), *_where(inputs), *requirements])
        return [_admitted(path) for path in sorted(dest.iterdir())]


def resolve_sources(requirements: list[str], inputs: BuildInputs) -> list[LockedSource]:
    """The source distributions of `requirements` (no dependencies: a builder compiles them against its own
    packages), each admitted to the cache."""
    with tempfile.TemporaryDirectory(prefix="learnerkit-sources-") as scratch:
        dest = Path(scratch) / "sources"
        _pip(["download", "--no-binary=:all:", "--no-deps", "--dest", str(dest), *_where(inputs), *requirements])
        return [_admitted_source(path) for path in sorted(dest.iterdir())]


def download_wheels(wheels: list[LockedWheel], inputs: BuildInputs) -> None:
    """Fetch locked wheels (pip checks each against its hash) and admit each to the cache."""
    _download(wheels, "--only-binary=:all:", inputs)


def download_sources(sources: list[LockedSource], inputs: BuildInputs) -> None:
    """Fetch locked source distributions (pip checks each against its hash) and admit each to the cache."""
    _download(sources, "--no-binary=:all:", inputs)


def _download(files: Sequence[LockedWheel], kind: str, inputs: BuildInputs) -> None:
    if not files:
        return
    with tempfile.TemporaryDirectory(prefix="learnerkit-download-") as scratch:
        requirements = Path(scratch) / "requirements.txt"
        requirements.write_text(pip_requirements(files), encoding="utf-8")
        dest = Path(scratch) / "files"
        fetch = ["download", kind, "--no-deps", "--require-hashes", "--dest", str(dest)]
        _pip([*fetch, *_where(inputs), "-r", str(requirements)])
        expected = {w.filename: w.sha256 for w in files}
        for path in sorted(dest.iterdir()):
            admit(path, expected.get(path.name))


def _admitted(path: Path) -> LockedWheel:
    try:
        name, version, _, _ = parse_wheel_filename(path.name)
    except InvalidWheelFilename as e:
        raise LockError(f"pip resolved {path.name}, which is not a wheel: {e}") from e
    return LockedWheel(name=normalise_name(name), version=str(version), filename=path.name, sha256=admit(path))


def _admitted_source(path: Path) -> LockedSource:
    try:
        name, version = parse_sdist_filename(path.name)
    except InvalidSdistFilename as e:
        raise LockError(f"pip downloaded {path.name}, which is not a source distribution: {e}") from e
    return LockedSource(name=normalise_name(name), version=str(version), filename=path.name, sha256=admit(path))


def _where(inputs: BuildInputs) -> list[str]:
    args = ["--index-url", inputs.index_url] if inputs.index_url else []
    for url in inputs.extra_index_urls:
        args += ["--extra-index-url", url]
    for link in [*map(str, inputs.wheelhouses), *inputs.find_links]:
        args += ["--find-links", link]
    if inputs.ca_bundle is not None:
        args += ["--cert", str(inputs.ca_bundle)]
    return args


def _pip(args: list[str]) -> None:
    # The inputs already hold what the host's pip configuration says (learnerkit_build.recipes.pipconfig):
    # no second reading.
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
    env = {k: v for k, v in env.items() if not k.startswith("PIP_") or k == "PIP_CONFIG_FILE"}
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", "-q", *args]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise LockError(f"pip {args[0]} failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
