"""The model code's ``requirements.txt``: checked, then installed by the sidecar for the offline learner.

The learner has no network and a read-only image, so the sidecar (which has the network and the index
settings) runs pip for it during DOWNLOADING: wheels only (nothing is built or run), for the learner's Python
version, into ``/job/packages``, which the learner's ``PYTHONPATH`` names. A line that would make pip reach
somewhere else than the platform's index (a URL, a local path, an option) is refused naming the line; the
scheduler runs the same check at submit (``learnerkit.scheduler.modelcode.archive``) and the sidecar again on what it
downloaded, because the archive lives in the tenant's own bucket.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from controller_sidecar.errors import PermanentError

LOGGER = logging.getLogger(__name__)
REQUIREMENTS = "requirements.txt"
PIP_TIMEOUT_S = 900.0
PIP_MESSAGE_CHARS = 2000
"""The end of pip's output that goes into the job's failure message."""
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
_VERSION_CLAUSE = r"\s*(?:===|==|!=|~=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_-]+\s*"
_AFTER_NAME = re.compile(rf"\s*(?:\[[A-Za-z0-9._,\s-]*\])?\s*(?:{_VERSION_CLAUSE}(?:,{_VERSION_CLAUSE})*)?")
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

    @classmethod
    def from_config(cls, raw: Mapping[str, object]) -> PackageIndex:
        def texts(name: str) -> tuple[str, ...]:
            value = raw.get(name) or ()
            return tuple(str(item) for item in value) if isinstance(value, list | tuple) else (str(value),)

        index, python = raw.get("index_url"), raw.get("python_version")
        return cls(
            index_url=str(index) if index else None,
            extra_index_urls=texts("extra_index_urls"),
            trusted_hosts=texts("trusted_hosts"),
            python_version=str(python) if python else None,
        )

    def to_config(self) -> dict[str, object]:
        """The sidecar config's ``requirements`` mapping, as :meth:`from_config` reads it."""
        return {
            "index_url": self.index_url,
            "extra_index_urls": list(self.extra_index_urls),
            "trusted_hosts": list(self.trusted_hosts),
            "python_version": self.python_version,
        }


def check_requirements(text: str, source: str = REQUIREMENTS) -> tuple[str, ...]:
    """The requirement lines of ``text``; refuses URLs, local paths and pip options, naming the line."""
    wanted: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _HASH_OPTION.sub("", raw.split(" #", 1)[0]).strip()
        if not line or line.startswith("#"):
            continue
        where = f"{source} line {number}: {raw.strip()!r}"
        if line.startswith("-"):
            raise RequirementError(f"{where}: pip options are not allowed; the platform sets the package index")
        if "://" in line or "@" in line:
            raise RequirementError(f"{where}: URLs are not allowed; name a package of the index (name==1.2)")
        spec = line.split(";", 1)[0].strip()
        if spec.startswith((".", "/", "~")) or "/" in spec or "\\" in spec or spec.endswith((".whl", ".zip", ".gz")):
            raise RequirementError(f"{where}: local paths are not allowed; name a package of the index")
        name = _NAME.match(spec)
        if name is None or not _AFTER_NAME.fullmatch(spec[name.end() :]):
            raise RequirementError(f"{where}: not a requirement (expected name, name==1.2 or name>=1.0,<2)")
        wanted.append(line)
    return tuple(wanted)


def pip_command(requirements: Path, target: Path, index: PackageIndex) -> list[str]:
    """pip, wheels only (no package's code runs here), for the learner's Python, into ``target``."""
    command = [sys.executable, "-m", "pip", "install", "--no-input", "--disable-pip-version-check", "--no-cache-dir"]
    command += ["--only-binary=:all:", "--target", str(target), "--requirement", str(requirements)]
    if index.python_version:
        command += ["--python-version", index.python_version]
    if index.index_url:
        command += ["--index-url", index.index_url]
    for url in index.extra_index_urls:
        command += ["--extra-index-url", url]
    for host in index.trusted_hosts:
        command += ["--trusted-host", host]
    return command


def _pip_env() -> dict[str, str]:
    """No credential of the sidecar reaches pip (or a package's metadata): only what a download needs."""
    kept = ("PATH", "HOME", "LANG", "SSL_CERT_FILE", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")
    env = {name: os.environ[name] for name in kept if name in os.environ}
    return env | {"PIP_CONFIG_FILE": os.devnull}


async def install_requirements(model_dir: Path, packages_dir: Path, index: PackageIndex) -> int:
    """Install ``model_dir/requirements.txt`` into ``packages_dir`` (replaced whole); the requirements' count.

    No file: nothing to do (0). A refused line or a pip failure is a `PermanentError` with pip's message.
    Cancelled (a halt during DOWNLOADING), pip is killed at once.
    """
    path = model_dir / REQUIREMENTS
    if not path.is_file() or path.is_symlink():
        return 0
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise RequirementError(f"{REQUIREMENTS}: cannot be read ({e})") from e
    wanted = check_requirements(text)
    if not wanted:
        return 0
    packages_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{packages_dir.name}.install-", dir=packages_dir.parent))
    try:
        command = pip_command(path, staging / "site", index)
        LOGGER.info("requirements: %s", " ".join(command))
        code, output = await _run(command)
        if code != 0:
            said = output.strip()[-PIP_MESSAGE_CHARS:]
            raise PermanentError(f"{REQUIREMENTS}: pip could not install the requirements: {said}")
        (staging / "site").mkdir(exist_ok=True)
        if packages_dir.exists():
            shutil.rmtree(packages_dir)
        (staging / "site").rename(packages_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return len(wanted)


async def _run(command: list[str]) -> tuple[int, str]:
    """pip's exit status and its output (stderr after stdout); killed when cancelled or past the timeout."""
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=_pip_env()
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
