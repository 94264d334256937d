"""The Docker engine through docker-py: one client, engine errors translated to learnerkit errors."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import docker
import docker.errors

from learnerkit.errors import LearnerkitError


class EngineError(LearnerkitError):
    """The Docker engine cannot be reached or refused a request."""


@cache
def engine() -> Any:
    """A docker-py client for the engine of $DOCKER_HOST (default: the local socket)."""
    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except docker.errors.DockerException as e:
        raise EngineError(f"no Docker engine answers ({e}); start one, e.g. with `make setup`") from e
    return client


def image_id(reference: str) -> str | None:
    """The ID of a local image, or None when the engine has no such image."""
    try:
        return str(engine().images.get(reference).id)
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.APIError as e:
        raise EngineError(f"inspecting image {reference}: {e.explanation}") from e


def image_labels(reference: str) -> dict[str, str]:
    try:
        return dict(engine().images.get(reference).labels or {})
    except docker.errors.ImageNotFound as e:
        raise EngineError(f"no image {reference} on this engine") from e


def tag_image(image: str, repository: str, tag: str) -> None:
    try:
        engine().images.get(image).tag(repository, tag)
    except docker.errors.APIError as e:
        raise EngineError(f"tagging {image} as {repository}:{tag}: {e.explanation}") from e


def image_size(reference: str) -> int:
    return int(engine().images.get(reference).attrs["Size"])


def image_attrs(reference: str) -> dict[str, Any]:
    """`docker image inspect` of a local image."""
    try:
        return dict(engine().images.get(reference).attrs)
    except docker.errors.ImageNotFound as e:
        raise EngineError(f"no image {reference} on this engine") from e
    except docker.errors.APIError as e:
        raise EngineError(f"inspecting image {reference}: {e.explanation}") from e


def save_image(reference: str, dest: Path) -> None:
    """`docker save` of one image into the file `dest`."""
    try:
        chunks = engine().images.get(reference).save(chunk_size=4 << 20, named=False)
        with dest.open("wb") as handle:
            for chunk in chunks:
                handle.write(chunk)
    except docker.errors.ImageNotFound as e:
        raise EngineError(f"no image {reference} on this engine") from e
    except docker.errors.APIError as e:
        raise EngineError(f"saving image {reference}: {e.explanation}") from e
