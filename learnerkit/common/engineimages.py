"""Local images by reference: inspect and tag, over the engine's Unix socket with the standard library.

A no-op `learnerkit image build` asks the engine three questions and must answer within 0.5 s; importing
docker-py (requests, urllib3, charset_normalizer) alone took 0.10-0.16 s of it (docs/dependencies.md). These
two endpoints need no more than `http.client`, so they skip it where the engine is a Unix socket ($DOCKER_HOST
unset or `unix://`, as docker-py reads it); any other $DOCKER_HOST (tcp, TLS, ssh) goes through docker-py's
client (`learnerkit.common.engine`), imported then.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
from typing import Any
from urllib.parse import quote, urlencode

from learnerkit.common.errors import LearnerkitError

DEFAULT_SOCKET = "/var/run/docker.sock"
TIMEOUT_S = 600
"""As docker-py's client is made (`engine()`): a tag or an inspect of a busy engine may wait."""


class EngineError(LearnerkitError):
    """The Docker engine cannot be reached or refused a request."""


def engine_socket() -> str | None:
    """The engine's Unix socket as $DOCKER_HOST names it (docker-py's default when unset); None for other hosts."""
    host = os.environ.get("DOCKER_HOST", "")
    if not host:
        return DEFAULT_SOCKET
    for scheme in ("unix://", "http+unix://"):
        if host.startswith(scheme):
            return host[len(scheme) :]
    return None


def ping() -> None:
    """Raise `EngineError` unless an engine answers."""
    path = engine_socket()
    if path is None:
        from learnerkit.common import engine  # as in _docker_py_inspect

        engine.engine()
        return
    status, body = _request(path, "GET", "/_ping")
    if status >= 300:
        raise EngineError(f"the Docker engine at {path} is not ready: {_message(body)}")


def image_attrs(reference: str) -> dict[str, Any]:
    """`docker image inspect` of a local image."""
    attrs = _inspect(reference)
    if attrs is None:
        raise EngineError(f"no image {reference} on this engine")
    return attrs


def image_id(reference: str) -> str | None:
    """The ID of a local image, or None when the engine has no such image."""
    attrs = _inspect(reference)
    return str(attrs["Id"]) if attrs is not None else None


def image_labels(reference: str) -> dict[str, str]:
    return dict(image_attrs(reference).get("Config", {}).get("Labels") or {})


def image_size(reference: str) -> int:
    return int(image_attrs(reference)["Size"])


def tag_image(image: str, repository: str, tag: str) -> None:
    path = engine_socket()
    if path is None:
        _docker_py_tag(image, repository, tag)
        return
    status, body = _request(path, "POST", f"/images/{_quoted(image)}/tag?{urlencode({'repo': repository, 'tag': tag})}")
    if status >= 300:
        raise EngineError(f"tagging {image} as {repository}:{tag}: {_message(body)}")


def _inspect(reference: str) -> dict[str, Any] | None:
    path = engine_socket()
    if path is None:
        return _docker_py_inspect(reference)
    status, body = _request(path, "GET", f"/images/{_quoted(reference)}/json")
    if status == 404:
        return None
    if status >= 300:
        raise EngineError(f"inspecting image {reference}: {_message(body)}")
    attrs: dict[str, Any] = json.loads(body)
    return attrs


def _quoted(reference: str) -> str:
    return quote(reference, safe="/:")  # as docker-py puts a name into a path


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=TIMEOUT_S)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def _request(path: str, method: str, url: str) -> tuple[int, bytes]:
    connection = _UnixConnection(path)
    try:
        connection.request(method, url)
        response = connection.getresponse()
        return response.status, response.read()
    except (OSError, http.client.HTTPException) as e:
        raise EngineError(f"no Docker engine answers at {path} ({e}); start one, e.g. with `make setup`") from e
    finally:
        connection.close()


def _message(body: bytes) -> str:
    try:
        return str(json.loads(body)["message"])
    except (ValueError, KeyError, TypeError):
        return body.decode(errors="replace").strip()


def _docker_py_inspect(reference: str) -> dict[str, Any] | None:
    from learnerkit.common import engine  # docker-py: imported only for a $DOCKER_HOST that is not a socket

    return engine.inspected(reference)


def _docker_py_tag(image: str, repository: str, tag: str) -> None:
    from learnerkit.common import engine  # as in _docker_py_inspect

    engine.tagged(image, repository, tag)
