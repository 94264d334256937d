"""Image lookups over the engine's Unix socket (learnerkit.common.engineimages), against a stand-in engine: a real
HTTP server on a Unix socket answering as the Engine API does."""

from __future__ import annotations

import json
import socketserver
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import ClassVar

import pytest

from learnerkit.common import engineimages
from learnerkit.common.engineimages import EngineError

IMAGES = {"learnerkit/pytorch:2.13-cpu-py3.11": {"Id": "sha256:abc", "Size": 42, "Config": {"Labels": {"a": "b"}}}}


class _Engine(BaseHTTPRequestHandler):
    asked: ClassVar[list[tuple[str, str]]] = []

    def address_string(self) -> str:
        return "engine"

    def log_message(self, format: str, *args: object) -> None:
        return

    def _answer(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.asked.append(("GET", self.path))
        if self.path == "/_ping":
            self._answer(200, "OK")
            return
        name = self.path.removeprefix("/images/").removesuffix("/json")
        if name == "broken":
            self._answer(500, {"message": "the store is locked"})
        elif name in IMAGES:
            self._answer(200, IMAGES[name])
        else:
            self._answer(404, {"message": f"No such image: {name}"})

    def do_POST(self) -> None:
        self.asked.append(("POST", self.path))
        self._answer(201 if self.path.startswith("/images/sha256:abc/tag?") else 404, {"message": "No such image"})


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@pytest.fixture
def engine_at(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str]]]:
    socket_path = tmp_path / "docker.sock"
    server = _Server(str(socket_path), _Engine)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("DOCKER_HOST", f"unix://{socket_path}")
    _Engine.asked = []
    yield _Engine.asked
    server.shutdown()
    server.server_close()


def test_an_image_is_found_by_reference_and_a_missing_one_is_none(engine_at: list[tuple[str, str]]) -> None:
    assert engineimages.image_id("learnerkit/pytorch:2.13-cpu-py3.11") == "sha256:abc"
    assert engineimages.image_size("learnerkit/pytorch:2.13-cpu-py3.11") == 42
    assert engineimages.image_labels("learnerkit/pytorch:2.13-cpu-py3.11") == {"a": "b"}
    assert engineimages.image_id("learnerkit/none:1") is None
    assert engine_at[0] == ("GET", "/images/learnerkit/pytorch:2.13-cpu-py3.11/json")
    with pytest.raises(EngineError, match="no image learnerkit/none:1 on this engine"):
        engineimages.image_attrs("learnerkit/none:1")


def test_an_engine_error_names_the_image_and_the_engines_message(engine_at: list[tuple[str, str]]) -> None:
    with pytest.raises(EngineError, match="inspecting image broken: the store is locked"):
        engineimages.image_id("broken")
    with pytest.raises(EngineError, match="tagging sha256:def as learnerkit/x:1: No such image"):
        engineimages.tag_image("sha256:def", "learnerkit/x", "1")


def test_a_tag_sends_repository_and_tag(engine_at: list[tuple[str, str]]) -> None:
    engineimages.tag_image("sha256:abc", "learnerkit/pytorch", "2.13-cpu-py3.11")
    assert engine_at == [("POST", "/images/sha256:abc/tag?repo=learnerkit%2Fpytorch&tag=2.13-cpu-py3.11")]
    engineimages.ping()


def test_no_engine_at_the_socket_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'none.sock'}")
    with pytest.raises(EngineError, match=r"no Docker engine answers at .*none\.sock"):
        engineimages.image_id("learnerkit/pytorch:2.13-cpu-py3.11")


@pytest.mark.parametrize(
    ("host", "socket"),
    [
        (None, "/var/run/docker.sock"),
        ("unix:///run/user/1000/docker.sock", "/run/user/1000/docker.sock"),
        ("tcp://10.0.0.1:2376", None),
        ("ssh://me@build-host", None),
    ],
)
def test_only_a_unix_socket_is_asked_without_docker_py(
    host: str | None, socket: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if host is None:
        monkeypatch.delenv("DOCKER_HOST", raising=False)
    else:
        monkeypatch.setenv("DOCKER_HOST", host)
    assert engineimages.engine_socket() == socket
