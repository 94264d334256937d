"""The Docker engine through docker-py: one client per thread, engine errors translated to learnerkit errors.

Looking up and tagging images by reference lives in `learnerkit.common.engineimages`, which a no-op build uses
without importing docker-py; its functions and `EngineError` are named here too, for the callers that hold a
client anyway.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
import threading
from collections.abc import Generator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.types
import requests

from learnerkit.common.engineimages import EngineError as EngineError
from learnerkit.common.engineimages import image_attrs as image_attrs
from learnerkit.common.engineimages import image_id as image_id
from learnerkit.common.engineimages import image_labels as image_labels
from learnerkit.common.engineimages import image_size as image_size
from learnerkit.common.engineimages import tag_image as tag_image

_clients = threading.local()


def engine() -> Any:
    """A docker-py client for the engine of $DOCKER_HOST (default: the local socket), one per thread: docker-py's
    client is a `requests.Session`, which neither requests nor docker-py says is safe to share between threads
    (docker/docker-py#3229 asks, unanswered), and `image build --jobs N` saves and loads images in N threads."""
    client = getattr(_clients, "client", None)
    if client is None:
        try:
            client = docker.from_env(timeout=600)
            client.ping()
        except docker.errors.DockerException as e:
            raise EngineError(f"no Docker engine answers ({e}); start one, e.g. with `make setup`") from e
        _clients.client = client
    return client


def inspected(reference: str) -> dict[str, Any] | None:
    """`docker image inspect` of a local image through docker-py, None when there is none (engineimages asks
    here for a $DOCKER_HOST that is not a Unix socket)."""
    try:
        return dict(engine().images.get(reference).attrs)
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.APIError as e:
        raise EngineError(f"inspecting image {reference}: {e.explanation}") from e


def tagged(image: str, repository: str, tag: str) -> None:
    """`docker tag` through docker-py (as `inspected`)."""
    try:
        engine().images.get(image).tag(repository, tag)
    except docker.errors.APIError as e:
        raise EngineError(f"tagging {image} as {repository}:{tag}: {e.explanation}") from e


def remove_image(image: str) -> None:
    """Remove an image by ID (an intermediate of the build tool); gone already is fine."""
    try:
        engine().images.remove(image, force=True)
    except docker.errors.ImageNotFound:
        return
    except docker.errors.APIError as e:
        raise EngineError(f"removing image {image}: {e.explanation}") from e


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


def saved_image(reference: str) -> Generator[bytes, None, None]:
    """`docker save` of one image as the engine sends it, chunk by chunk; read it to the end (the engine holds
    the whole archive in its own temporary folder until then) or close it."""
    try:
        yield from engine().images.get(reference).save(chunk_size=4 << 20, named=False)
    except docker.errors.ImageNotFound as e:
        raise EngineError(f"no image {reference} on this engine") from e
    except docker.errors.APIError as e:
        raise EngineError(f"saving image {reference}: {e.explanation}") from e
    except requests.exceptions.RequestException as e:
        # An OSError: raised while the HTTP client sends another request its body, it would be taken for a
        # broken connection of that request.
        raise EngineError(f"saving image {reference}: {e}") from e


MAX_SYMLINKS = 8


def read_file(reference: str, path: str) -> bytes | None:
    """One file of an image (from a created, never started, container), or None when it is absent.

    Symbolic links are followed (``/etc/os-release`` links to ``../usr/lib/os-release`` on Debian).
    """
    try:
        container = engine().containers.create(reference, entrypoint=["/nonexistent"], network_disabled=True)
    except docker.errors.APIError as e:
        raise EngineError(f"creating a container of {reference}: {e.explanation}") from e
    try:
        for _ in range(MAX_SYMLINKS):
            stream, _ = container.get_archive(path)
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as archive:
                member = archive.next()
                if member is None:
                    return None
                if member.issym():
                    path = posixpath.normpath(posixpath.join(posixpath.dirname(path), member.linkname))
                    continue
                handle = archive.extractfile(member)
                return handle.read() if handle is not None else None
        raise EngineError(f"{reference}:{path}: more than {MAX_SYMLINKS} symbolic links")
    except docker.errors.NotFound:
        return None
    finally:
        container.remove(force=True)


ALL_GPUS = -1


def gpu_request(count: int = ALL_GPUS) -> Any:
    """The device request for `count` NVIDIA GPUs (all of them by default): what `docker run --gpus` sends.

    The engine hands them over through the NVIDIA container toolkit, which also mounts the host's driver
    (libcuda.so.1, NVML) into the container."""
    return docker.types.DeviceRequest(count=count, capabilities=[["gpu"]])


def refuses_gpus(error: docker.errors.APIError) -> bool:
    """Whether the engine refused a container because it has no way to give it GPUs (no NVIDIA toolkit)."""
    return "could not select device driver" in str(error.explanation or error)
