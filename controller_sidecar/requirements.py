"""The model code's ``requirements.txt``: checked, then installed by the sidecar for the offline learner.

The learner has no network and a read-only image, so the sidecar (which has the network and the index
settings) runs pip for it during DOWNLOADING: wheels only (nothing is built or run), for the learner's Python
version, into ``/job/packages``, which the learner's ``PYTHONPATH`` names. A line that would make pip reach
somewhere else than the platform's index (a URL, a local path or archive name, an option, anything that is not
a PEP 508 requirement) is refused naming the line, and pip runs in an empty folder; the
scheduler runs the same check at submit (``learnerkit.scheduler.modelcode.archive``) and the sidecar again on what it
downloaded, because the archive lives in the tenant's own bucket.

The learner image's locked packages are pip's constraints: a requirement that would replace one (another torch, a
different numpy) is refused naming both versions, at submit and here; a dependency pip fetches of a locked package
is held to the locked version and then left out of ``/job/packages``, so the learner imports the image's own copy.
A failure's reason is one line naming the requirement and the cause; pip's whole output goes to the sidecar's log.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from controller_sidecar.errors import PermanentError
from controller_sidecar.pipfailure import PYPI, failure_reason
from controller_sidecar.provenancerecord import InstalledPackage

LOGGER = logging.getLogger(__name__)
REQUIREMENTS = "requirements.txt"
PIP_TIMEOUT_S = 900.0
ARCHIVE_SUFFIXES = (
    *(".zip", ".whl", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz"),
    *(".tar.xz", ".txz", ".tlz", ".tar.lz", ".tar.lzma"),
)
"""pip's archive extensions (``pip._internal.utils.filetypes``): a requirement so named is read as a file."""
_HASH_OPTION = re.compile(r"\s--hash[=\s]\S+")


class RequirementError(PermanentError):
    """A line of requirements.txt is refused; the message names the file and the line."""


@dataclass(frozen=True)
class PackageIndex:
    """Where pip looks (the scheduler's ``LEARNERKIT_PIP_*`` settings) and for which Python."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    trusted_hosts: tuple[str, ...] = ()
    python_version: str | None = None
    """``3.11``: the learner image's Python; None: the sidecar's own (both images share one base)."""
    find_links: tuple[str, ...] = ()
    """URLs pip reads links from, and folders mounted read-only into the sidecar (the Docker backend)."""
    ca_bundle: str | None = None
    """The CA bundle pip trusts (``--cert``): a file in the sidecar, mounted read-only from the platform's host."""
    locked: Mapping[str, str] = field(default_factory=dict)
    """The learner image's locked packages, normalised name -> version: pip's constraints."""

    @classmethod
    def from_config(cls, raw: Mapping[str, object]) -> PackageIndex:
        def texts(name: str) -> tuple[str, ...]:
            value = raw.get(name) or ()
            return tuple(str(item) for item in value) if isinstance(value, list | tuple) else (str(value),)

        index, python, ca = raw.get("index_url"), raw.get("python_version"), raw.get("ca_bundle")
        locked = raw.get("locked")
        return cls(
            index_url=str(index) if index else None,
            extra_index_urls=texts("extra_index_urls"),
            trusted_hosts=texts("trusted_hosts"),
            find_links=texts("find_links"),
            ca_bundle=str(ca) if ca else None,
            locked={str(k): str(v) for k, v in locked.items()} if isinstance(locked, Mapping) else {},
            python_version=str(python) if python else None,
        )

    def to_config(self) -> dict[str, object]:
        """The sidecar config's ``requirements`` mapping, as :meth:`from_config` reads it (find-links, CA bundle
        and lock only where given: the document keeps the shape older sidecars read)."""
        given = {
            "find_links": list(self.find_links),
            "ca_bundle": self.ca_bundle,
            "locked": dict(sorted(self.locked.items())),
        }
        return {
            "index_url": self.index_url,
            "extra_index_urls": list(self.extra_index_urls),
            "trusted_hosts": list(self.trusted_hosts),
            "python_version": self.python_version,
        } | {name: value for name, value in given.items() if value}

    def constraints(self) -> str:
        """pip's ``--constraint`` file: ``name==version`` per locked package."""
        return "".join(f"{name}=={version}\n" for name, version in sorted(self.locked.items()))


def check_requirements(
    text: str, source: str = REQUIREMENTS, locked: Mapping[str, str] | None = None
) -> tuple[str, ...]:
    """The requirement lines of ``text``; refuses URLs, local paths and pip options, naming the line.

    A line must be a PEP 508 requirement (``packaging.requirements``) without a URL whose name is not one
    that pip would read as a local archive (``pkg.tgz``, ``PKG.ZIP``): checked by grammar, not by pattern.
    ``locked``: the image's locked packages; a requirement their version does not satisfy is refused.
    """
    wanted: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _HASH_OPTION.sub("", raw.split(" #", 1)[0]).strip()
        if not line or line.startswith("#"):
            continue
        where = f"{source} line {number}: {raw.strip()!r}"
        if line.startswith("-"):
            raise RequirementError(f"{where}: pip options are not allowed; the platform sets the package index")
        if "://" in line:
            raise RequirementError(f"{where}: URLs are not allowed; name a package of the index (name==1.2)")
        if line.startswith((".", "/", "~")) or "\\" in line:
            raise RequirementError(f"{where}: local paths are not allowed; name a package of the index")
        try:
            requirement = Requirement(line)
        except InvalidRequirement as e:
            reason = str(e).splitlines()[0]
            raise RequirementError(
                f"{where}: not a requirement ({reason}; expected name, name==1.2 or name>=1.0,<2)"
            ) from e
        if any(not clause.version for clause in requirement.specifier):
            raise RequirementError(f"{where}: not a requirement (a version clause without a version)")
        if requirement.url is not None:
            raise RequirementError(f"{where}: URLs are not allowed; name a package of the index (name==1.2)")
        if requirement.name.lower().endswith(ARCHIVE_SUFFIXES):
            raise RequirementError(
                f"{where}: local paths are not allowed; pip reads {requirement.name!r} as an archive file"
            )
        _check_locked(requirement, locked or {}, f"{source} line {number}")
        wanted.append(line)
    return tuple(wanted)


def _check_locked(requirement: Requirement, locked: Mapping[str, str], where: str) -> None:
    version = locked.get(canonicalize_name(requirement.name))
    if version is not None and not requirement.specifier.contains(version, prereleases=True):
        shown = f"{requirement.name}{requirement.specifier}"
        raise RequirementError(
            f"{where}: {shown} would replace the image's locked {requirement.name} {version} (leave it out, or "
            f"ask for a version {version} satisfies: the image's packages are the ones it was scanned with)"
        )


def pip_command(
    requirements: Path,
    target: Path,
    index: PackageIndex,
    report: Path | None = None,
    constraints: Path | None = None,
) -> list[str]:
    """pip, wheels only (no package's code runs here), for the learner's Python, into ``target``; ``report``: pip's
    installation report (name, version and wheel digest of each package) goes there; ``constraints``: the
    image's locked packages (:meth:`PackageIndex.constraints`)."""
    command = [sys.executable, "-m", "pip", "install", "--no-input", "--disable-pip-version-check", "--no-cache-dir"]
    command += ["--only-binary=:all:", "--target", str(target), "--requirement", str(requirements)]
    if report is not None:
        command += ["--report", str(report)]
    if constraints is not None:
        command += ["--constraint", str(constraints)]
    if index.python_version:
        command += ["--python-version", index.python_version]
    if index.index_url:
        command += ["--index-url", index.index_url]
    for url in index.extra_index_urls:
        command += ["--extra-index-url", url]
    for host in index.trusted_hosts:
        command += ["--trusted-host", host]
    for link in index.find_links:
        command += ["--find-links", link]
    if index.ca_bundle:
        command += ["--cert", index.ca_bundle]
    return command


def _pip_env() -> dict[str, str]:
    """No credential of the sidecar reaches pip (or a package's metadata): only what a download needs."""
    kept = ("PATH", "HOME", "LANG", "SSL_CERT_FILE", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")
    env = {name: os.environ[name] for name in kept if name in os.environ}
    return env | {"PIP_CONFIG_FILE": os.devnull}


@dataclass(frozen=True)
class Installed:
    requested: int
    """The requirements' count."""
    packages: tuple[InstalledPackage, ...] = ()
    """Every package pip installed, dependencies included, as its report names them."""


def installed_packages(report: bytes, locked: Mapping[str, str] | None = None) -> tuple[InstalledPackage, ...]:
    """The packages of pip's installation report (``pip install --report``) but the ``locked`` ones (the image has
    them); an unreadable report gives none."""
    try:
        entries = json.loads(report).get("install", [])
        found = []
        for entry in entries:
            metadata = entry.get("metadata", {})
            hashes = (entry.get("download_info", {}).get("archive_info") or {}).get("hashes") or {}
            if canonicalize_name(str(metadata["name"])) in (locked or {}):
                continue
            found.append(InstalledPackage(str(metadata["name"]), str(metadata["version"]), hashes.get("sha256")))
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        LOGGER.warning("pip's installation report cannot be read: %s", e)
        return ()
    return tuple(sorted(found, key=lambda package: package.name.lower()))


async def install_requirements(model_dir: Path, packages_dir: Path, index: PackageIndex) -> Installed:
    """Install ``model_dir/requirements.txt`` into ``packages_dir`` (replaced whole).

    No file: nothing to do (0 requested). A refused line or a pip failure is a `RequirementError` whose message
    is one line naming the requirement and the cause (pip's whole output is logged). Cancelled (a halt during
    DOWNLOADING), pip is killed at once.
    """
    path = model_dir / REQUIREMENTS
    if not path.is_file() or path.is_symlink():
        return Installed(0)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise RequirementError(f"{REQUIREMENTS}: cannot be read ({e})") from e
    wanted = check_requirements(text, locked=index.locked)
    if not wanted:
        return Installed(0)
    packages_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{packages_dir.name}.install-", dir=packages_dir.parent))
    try:
        report, constraints = staging / "report.json", staging / "constraints.txt"
        constraints.write_text(index.constraints(), encoding="utf-8")
        command = pip_command(path, staging / "site", index, report, constraints)
        LOGGER.info("requirements: %s", " ".join(command))
        empty = staging / "cwd"  # pip reads some names as files of its working folder: here there are none
        empty.mkdir()
        code, output = await _run(command, empty)
        if code != 0:
            LOGGER.error("requirements: pip exited %d:\n%s", code, output)
            indexes = (index.index_url or PYPI, *index.extra_index_urls)
            reason = failure_reason(output, text.splitlines(), indexes, index.ca_bundle)
            raise RequirementError(f"{REQUIREMENTS}: {reason}")
        site = staging / "site"
        site.mkdir(exist_ok=True)
        _drop_locked(site, index.locked)
        if packages_dir.exists():
            shutil.rmtree(packages_dir)
        site.rename(packages_dir)
        packages = installed_packages(report.read_bytes(), index.locked) if report.is_file() else ()
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Installed(len(wanted), packages)


def _drop_locked(site: Path, locked: Mapping[str, str]) -> None:
    """Remove from ``site`` each distribution the image has locked (pip, writing to a folder of its own, fetched
    it as a dependency, at the locked version): the learner then imports the image's scanned copy."""
    for info in site.glob("*.dist-info"):
        name = canonicalize_name(info.name.removesuffix(".dist-info").rsplit("-", 1)[0])
        if name not in locked:
            continue
        record = info / "RECORD"
        listed = record.read_text(encoding="utf-8").splitlines() if record.is_file() else []
        for line in listed:
            member = (site / line.rsplit(",", 2)[0]).resolve()
            if member.is_relative_to(site.resolve()) and member.is_file():
                member.unlink()
        shutil.rmtree(info, ignore_errors=True)
    for folder in sorted((p for p in site.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        if not any(folder.iterdir()):  # what only the removed distributions held (their packages, caches)
            folder.rmdir()


async def _run(command: list[str], cwd: Path) -> tuple[int, str]:
    """pip's exit status and its output (stderr after stdout), run in ``cwd``; killed when cancelled or past
    the timeout."""
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=_pip_env(), cwd=cwd
    )
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), PIP_TIMEOUT_S)
    except TimeoutError as e:
        raise PermanentError(f"{REQUIREMENTS}: pip did not finish within {PIP_TIMEOUT_S:.0f}s") from e
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    return process.returncode or 0, (stdout + stderr).decode("utf-8", "replace")
