"""Run learner containers the way the platform does: hardened, on a shared /job folder, tracked."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker.errors
import requests

from learner.paths import JOB_DIR
from learnerkit.common.engine import EngineError, engine, gpu_request, refuses_gpus
from learnerkit_build.errors import BuildToolError

JOB_SUBDIRS = ("data", "model", "results", "checkpoints", "logs", "control")
LEARNER_USER = "1000:0"


class GpusRefused(BuildToolError, EngineError):
    """The engine cannot give a container GPUs: it has none, or no NVIDIA container toolkit to hand them over."""


def make_job_folder(folder: Path) -> Path:
    """A host folder laid out like a learner's /job volume, writable by UID 1000 and by group 0."""
    for sub in JOB_SUBDIRS:
        (folder / sub).mkdir(parents=True, exist_ok=True)
    for path in [folder, *(folder / sub for sub in JOB_SUBDIRS)]:
        if os.geteuid() == 0:
            os.chown(path, 1000, 0)
            path.chmod(0o775)
        else:
            path.chmod(0o777)
    return folder


@dataclass
class LearnerRun:
    """A hardened learner container: read-only root, tmpfs /tmp, no network, no capabilities."""

    image: str
    job: Path
    command: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    user: str = LEARNER_USER
    entrypoint: list[str] | None = None
    inspection: bool = False
    """Run as root with default capabilities to look at the whole file system (checks only)."""
    gpus: bool = False
    """Ask the engine for every GPU it has (`docker run --gpus all`)."""

    def options(self) -> dict[str, Any]:
        gpus = {"device_requests": [gpu_request()]} if self.gpus else {}
        return {
            **gpus,
            "image": self.image,
            "command": self.command,
            "entrypoint": self.entrypoint,
            "environment": self.env,
            "user": "0:0" if self.inspection else self.user,
            "volumes": {str(self.job): {"bind": JOB_DIR, "mode": "rw"}},
            "read_only": True,
            "tmpfs": {"/tmp": "rw,size=256m,mode=1777"},
            "network_mode": "none",
            "cap_drop": [] if self.inspection else ["ALL"],
            "security_opt": ["no-new-privileges"],
        }


@contextmanager
def running(run: LearnerRun) -> Iterator[Any]:
    """Create and start the container; always remove it afterwards, whatever happened.

    Created and started in two steps (not ``containers.run``, which leaves the container it created behind
    when the start fails: a cuda image on an engine without GPUs stayed as a *created* container).
    """
    try:
        container = engine().containers.create(**run.options())
    except docker.errors.APIError as e:
        raise _refused(run, e) from e
    try:
        try:
            container.start()
        except docker.errors.APIError as e:
            raise _refused(run, e) from e
        yield container
    finally:
        with suppress(docker.errors.NotFound):
            container.remove(force=True)


def _refused(run: LearnerRun, error: docker.errors.APIError) -> EngineError:
    if run.gpus and refuses_gpus(error):
        return GpusRefused(f"the engine gives no GPUs: {error.explanation}")
    return EngineError(f"starting {run.image}: {error.explanation}")


def wait_exit(container: Any, timeout: float) -> int:
    """The container's exit status; kills it and raises TimeoutError after `timeout` seconds."""
    try:
        return int(container.wait(timeout=timeout)["StatusCode"])
    except requests.exceptions.RequestException as e:  # the engine API read timed out
        container.kill()
        raise TimeoutError(
            f"container of {container.image.tags or container.image.id} still running after {timeout:.0f} s"
        ) from e


def output_of(run: LearnerRun, timeout: float = 60) -> tuple[int, str]:
    """Run to completion; exit status and combined output."""
    with running(run) as container:
        status = wait_exit(container, timeout)
        return status, container.logs().decode("utf-8", "replace")


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Poll `predicate` until it is true or the deadline passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
