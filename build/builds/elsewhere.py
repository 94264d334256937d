"""A second build made as another party would make it: a clock 30 days ahead, another time zone, umask, hostname
and build folder, for the reproducibility checks (`make repro`, the reproducibility tests).

The build runs in a child process started as
`unshare --uts -- faketime -f +30d python -m learnerkit_build.builds.elsewhere` with `TZ` set;
the child names its own host and sets its umask before it builds. libfaketime moves the clock of the child and of
what it runs with the C library (mmdebstrap, apt, dpkg's host side, tar, the hooks: mmdebstrap
inherits the preload, see `learnerkit_build.builds.rootfs`). It does not move the kernel's clock, so the Docker engine,
whose BuildKit runs an image's RUN steps, and Go programs keep the real time: what those write is clamped to
SOURCE_DATE_EPOCH instead (`learnerkit_build.repro.reproducible`). The child prints one JSON line: the image ID and
what it saw (its clock when it started, hostname, zone, umask), and for the base the clock mmdebstrap logged.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from learnerkit.common.errors import ToolMissingError
from learnerkit_build.builds.baseimage import recipe_for
from learnerkit_build.builds.basemake import base_archive
from learnerkit_build.builds.images import build_image
from learnerkit_build.builds.sidecarimage import build_sidecar
from learnerkit_build.errors import BuildToolError
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.recipes.pipconfig import BuildOptions, pip_config, resolve_build_inputs

CLOCK_LINE = "build clock: "
"""What mmdebstrap's setup hook logs (`learnerkit_build.builds.rootfs.CLOCK_HOOK`)."""
TIMEOUT_S = 1800


class ElsewhereError(BuildToolError):
    """The build in the varied environment failed or said nothing readable."""


@dataclass(frozen=True)
class Environment:
    days_ahead: int = 30
    zone: str = "Asia/Tokyo"
    umask: int = 0o077
    hostname: str = "learnerkit-elsewhere"


@dataclass(frozen=True)
class Rebuilt:
    image_id: str
    archive: str | None
    """The base's `docker load` archive (the base only)."""
    clock: float
    """The child's clock (seconds since the epoch) when it started."""
    hostname: str
    zone: str
    umask: int
    build_clock: str | None
    """The clock mmdebstrap logged (the base only), ISO 8601 UTC."""


def rebuild_elsewhere(what: str, root: Path, scratch: Path, environment: Environment) -> Rebuilt:
    """Build `what` (`base`, `sidecar` or a spec) from the project copy `root` in the varied environment."""
    tools = {name: shutil.which(name) for name in ("unshare", "faketime")}
    if tools["faketime"] is None:
        raise ToolMissingError("faketime is not installed (Debian package `faketime`; `make setup` installs it)")
    if tools["unshare"] is None:
        raise ToolMissingError("unshare is not installed (Debian package `util-linux`)")
    argv = [str(tools["unshare"]), "--uts", "--", str(tools["faketime"]), "-f", f"+{environment.days_ahead}d"]
    argv += [sys.executable, "-m", "learnerkit_build.builds.elsewhere", what, str(root), str(scratch)]
    argv += [environment.hostname, f"{environment.umask:o}"]
    try:
        done = subprocess.run(
            argv,
            env={**os.environ, "TZ": environment.zone},
            capture_output=True,
            text=True,
            errors="replace",
            timeout=TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        raise ElsewhereError(f"building {what} elsewhere took more than {TIMEOUT_S} s") from e
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise ElsewhereError(f"building {what} elsewhere failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    try:
        return Rebuilt(**json.loads(lines[-1]))
    except (ValueError, TypeError) as e:
        raise ElsewhereError(f"building {what} elsewhere: not a result: {lines[-1][:300]}") from e


def _build(what: str, root: Path, scratch: Path, log: list[str]) -> tuple[str, str | None]:
    if what == "base":
        archive, image_id = base_archive(recipe_for("debian-bookworm", root), scratch, log.append)
        return image_id, str(archive)
    inputs = resolve_build_inputs(BuildOptions(), pip_config()).inputs
    if what == "sidecar":
        return str(build_sidecar(root, inputs, log.append, rebuild=True).image_id), None
    image = load_matrix(root).select([what])[0]
    return str(build_image(root, image, inputs, log.append, rebuild=True).image_id), None


def main(argv: list[str]) -> None:
    what, root, scratch, hostname, umask = argv
    socket.sethostname(hostname)
    os.umask(int(umask, 8))
    time.tzset()
    clock = time.time()
    log: list[str] = []
    image_id, archive = _build(what, Path(root), Path(scratch), log)
    logged = [line.removeprefix(CLOCK_LINE) for line in log if line.startswith(CLOCK_LINE)]
    result = Rebuilt(
        image_id,
        archive,
        clock,
        socket.gethostname(),
        time.tzname[0],
        int(umask, 8),
        logged[0] if logged else None,
    )
    print(json.dumps(asdict(result)), flush=True)


def days_ahead(rebuilt_clock: float | str) -> float:
    """How many days `rebuilt_clock` (seconds, or an ISO 8601 UTC time) is ahead of this process's clock."""
    if isinstance(rebuilt_clock, str):
        rebuilt_clock = datetime.strptime(rebuilt_clock, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    return (rebuilt_clock - time.time()) / 86400


if __name__ == "__main__":
    main(sys.argv[1:])
