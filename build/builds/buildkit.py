"""Run `docker build` with BuildKit, streaming its log.

docker-py speaks only the classic builder, which has no build secrets and no RUN mounts; those are how
CA bundles, index credentials and wheelhouses stay out of every layer. So builds go through a docker CLI
that has BuildKit: `docker buildx build --load` where buildx is installed, else a pre-23 CLI (Debian's
docker.io 20.10) with DOCKER_BUILDKIT=1. Newer CLIs without buildx cannot build with BuildKit at all.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from learnerkit.common.errors import ConfigError, ToolMissingError
from learnerkit_build.errors import BuildError

STOP_WAIT_S = 10.0
"""How long an interrupted build's client gets to stop after SIGTERM before it is killed."""
LOG_TAIL_LINES = 40
CONTEXT_RECORD = "source.local"
"""BuildKit's cache record type of a build context copied from the client."""
LAYER_RECORD = "regular"
"""BuildKit's cache record type of what a build step made (a layer)."""
CACHE_MOUNT_RECORD = "exec.cachemount"
"""BuildKit's cache record type of a `RUN --mount=type=cache` folder: the Caffe builds' compiler caches."""
PRUNE_TIMEOUT_S = 120
CACHE_KEEP_VARIABLE = "LEARNERKIT_BUILD_CACHE_MB"
DEFAULT_CACHE_KEEP_MB = 8192
COMPILER_CACHE_VARIABLE = "LEARNERKIT_COMPILER_CACHE_MB"
DEFAULT_COMPILER_CACHE_MB = 2048
STEP_RE = re.compile(r"^#\d+ \[(?:(?P<stage>[\w.-]+) )?(?P<done>\d+)/(?P<total>\d+)\]")

LogSink = Callable[[str], None]


@dataclass(frozen=True)
class BuildkitCli:
    argv: tuple[str, ...]
    """Command prefix up to and including `build`."""
    env: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class CacheCaps:
    """How much of BuildKit's cache builds leave behind, in MiB."""

    layers_mb: int
    """`LEARNERKIT_BUILD_CACHE_MB`: the cache as a whole, of which only layers are removed to keep to it."""
    compiler_mb: int
    """`LEARNERKIT_COMPILER_CACHE_MB`: how far the cache mounts (compiler caches) may take the cache beyond
    `layers_mb` before the least recently used of them is removed."""


@dataclass(frozen=True)
class BuildRequest:
    context: Path
    image_name: str
    """For messages only: images are tagged by the caller after a successful build."""
    labels: dict[str, str]
    secrets: dict[str, Path]
    no_cache: bool = False


@cache
def find_buildkit_cli() -> BuildkitCli:
    """The first docker CLI on PATH (then /usr/bin) that can build with BuildKit."""
    candidates: list[str] = []
    for folder in [*os.environ.get("PATH", "").split(os.pathsep), "/usr/bin"]:
        exe = shutil.which("docker", path=folder)
        if exe and os.path.realpath(exe) not in map(os.path.realpath, candidates):
            candidates.append(exe)
    for exe in candidates:
        if _succeeds([exe, "buildx", "version"]):
            return BuildkitCli(argv=(exe, "buildx", "build", "--load"), env=())
        version = _client_version(exe)
        if version is not None and version < 23:
            return BuildkitCli(argv=(exe, "build"), env=(("DOCKER_BUILDKIT", "1"),))
    raise ToolMissingError(
        f"no docker CLI with BuildKit found (tried {', '.join(candidates) or 'none on PATH'}): install the "
        "buildx plugin, or Debian's docker.io (`make setup` does)"
    )


def _succeeds(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=30, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _client_version(exe: str) -> int | None:
    try:
        out = subprocess.run(
            [exe, "version", "--format", "{{.Client.Version}}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.match(r"(\d+)\.", out.strip())
    return int(match.group(1)) if match else None


_running: set[subprocess.Popen[str]] = set()
"""The `docker build` clients this process runs now (builds may run in several threads: `--jobs`)."""
_running_guard = threading.Lock()


def stop_running_builds() -> None:
    """Ask every build this process runs to stop (SIGTERM to its client; the engine cancels the build): a Ctrl-C
    reaches the main thread only, while builds may run in others."""
    with _running_guard:
        for proc in _running:
            if proc.poll() is None:
                proc.terminate()


def run_build(request: BuildRequest, on_line: LogSink) -> str:
    """Build the context; return the image ID. No tag is made here, so a failed build leaves none."""
    cli = find_buildkit_cli()
    caps = cache_caps()
    with tempfile.TemporaryDirectory(prefix="learnerkit-iid-") as scratch:
        iidfile = Path(scratch) / "iid"
        argv = [*cli.argv, "--progress=plain", "--iidfile", str(iidfile)]
        if request.no_cache:
            argv.append("--no-cache")
        for secret_id, path in sorted(request.secrets.items()):
            argv += ["--secret", f"id={secret_id},src={path}"]
        for key, value in sorted(request.labels.items()):
            argv += ["--label", f"{key}={value}"]
        argv.append(str(request.context))
        tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)
        env = {**os.environ, **dict(cli.env)}
        with subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True, errors="replace"
        ) as proc:
            with _running_guard:
                _running.add(proc)
            try:
                for raw in proc.stdout or ():
                    line = raw.rstrip("\n")
                    tail.append(line)
                    on_line(line)
            finally:
                # Still running here only when we were interrupted (Ctrl-C): stop the build, tag nothing.
                if proc.poll() is None:
                    proc.terminate()
                    try:
                        proc.wait(timeout=STOP_WAIT_S)
                    except subprocess.TimeoutExpired:
                        proc.kill()  # the engine cancels a build whose client is gone
                        proc.wait()
                with _running_guard:
                    _running.discard(proc)
        prune_cache(cli, caps, on_line)
        if proc.returncode != 0:
            raise BuildError(request.image_name, f"docker build exited {proc.returncode}", "\n".join(tail))
        image = iidfile.read_text(encoding="utf-8").strip() if iidfile.exists() else ""
        if not image:
            raise BuildError(request.image_name, "docker build wrote no image ID", "\n".join(tail))
        return image


def prune_argvs(cli: BuildkitCli, caps: CacheCaps) -> list[list[str]]:
    """The commands that remove the build contexts BuildKit copied, then the least recently used layers while the
    cache is over `caps.layers_mb`, then the least recently used cache mounts while it is over `caps.layers_mb +
    caps.compiler_mb` (no record a build is using is removed).

    A prune filtered by type counts the whole cache against its `--keep-storage` but removes only records of that
    type: so layers go first, and a compiler cache only when the cache mounts alone pass their own allowance."""
    prune = [*cli.argv[:-2], "prune"] if cli.argv[-2:] == ("build", "--load") else [*cli.argv[:-1], "builder", "prune"]
    return [
        [*prune, "--force", "--filter", f"type={CONTEXT_RECORD}"],
        [*prune, "--force", "--filter", f"type={LAYER_RECORD}", "--keep-storage", f"{caps.layers_mb}mb"],
        [
            *prune,
            "--force",
            "--filter",
            f"type={CACHE_MOUNT_RECORD}",
            "--keep-storage",
            f"{caps.layers_mb + caps.compiler_mb}mb",
        ],
    ]


def cache_caps() -> CacheCaps:
    """`LEARNERKIT_BUILD_CACHE_MB` (default 8192 MiB) and `LEARNERKIT_COMPILER_CACHE_MB` (default 2048 MiB)."""
    return CacheCaps(
        layers_mb=_mib_setting(CACHE_KEEP_VARIABLE, DEFAULT_CACHE_KEEP_MB),
        compiler_mb=_mib_setting(COMPILER_CACHE_VARIABLE, DEFAULT_COMPILER_CACHE_MB),
    )


def _mib_setting(variable: str, default: int) -> int:
    raw = os.environ.get(variable, str(default))
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigError(f"{variable}={raw!r}: a whole number of MiB (0 or more) is expected")
    return value


def prune_cache(cli: BuildkitCli, caps: CacheCaps, on_line: LogSink) -> None:
    """Once a build is over, drop BuildKit's copies of build contexts and keep at most `caps.layers_mb` of its
    layers, the most recently used, and of its compiler caches what `caps` allows (`prune_argvs`).

    Each build's context is a fresh folder, so BuildKit keeps a full copy of it (its `source.local` record) that no
    later build reuses: a locked cuda image's context holds gigabytes of wheels. And a locked image is normalised
    into new layers after its build, so the build's own layers stay behind in the cache beside the image, about
    its size again (29 GB after three locked cuda builds here). Without a cap the cache grows with every build
    until the disk is full. The compiler caches are kept apart from that cap: they spare a Caffe rebuild whose
    sources did not change its compile (minutes on 2 cores), and an unfiltered cap evicted them with the layers.
    A prune that fails costs disk, not the build: it is reported in the build's log."""
    env = {**os.environ, **dict(cli.env)}
    for argv in prune_argvs(cli, caps):
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=PRUNE_TIMEOUT_S, check=False, env=env)
        except (OSError, subprocess.TimeoutExpired) as e:
            on_line(f"note: BuildKit's cache was not pruned: {e}")
            return
        if proc.returncode != 0:
            said = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or [f"exit {proc.returncode}"]
            on_line(f"note: BuildKit's cache was not pruned: {said[0]}")
            return
