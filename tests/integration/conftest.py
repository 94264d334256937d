"""Integration tests run against the real Docker engine that `make setup` starts, and real builds."""

from __future__ import annotations

import functools
import http.server
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from learnerkit.common import engine
from learnerkit.dev.detached import log_tail
from learnerkit.dev.errors import PortTakenError, ServiceError
from learnerkit.dev.ports import FIRST_START_ATTEMPTS, LOOPBACK, free_port, port_was_taken
from learnerkit_build.recipes.pipconfig import BuildOptions, pip_config, resolve_build_inputs
from learnerkit_build.recipes.render import BuildInputs
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def docker_client() -> Any:
    """The engine; integration tests fail (never skip) without one: `make test` starts it."""
    return engine.engine()


@pytest.fixture(scope="session")
def build_inputs() -> BuildInputs:
    """What the plain `learnerkit image build` uses (the host's pip configuration), so tests find the images
    `make images` built."""
    return resolve_build_inputs(BuildOptions(), pip_config()).inputs


@pytest.fixture
def scratch_project(tmp_path: Path) -> Path:
    """A project root with the real learner_base and no frameworks yet."""
    root = tmp_path / "project"
    shutil.copytree(REPO / "learner_base", root / "learner_base", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "frameworks").mkdir()
    return root


@pytest.fixture
def image_cleanup(docker_client: Any) -> Iterator[list[str]]:
    """Repositories to delete after the test (every tag of each)."""
    repositories: list[str] = []
    yield repositories
    for repository in repositories:
        for image in docker_client.images.list(name=repository):
            docker_client.images.remove(image.id, force=True)


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Debian's docker-registry on a free 127.0.0.1 port with its own storage; killed in teardown. A port that
    another process binds between its choice and the registry's bind is chosen again."""
    exe = shutil.which("docker-registry")
    if exe is None:
        pytest.fail("docker-registry is not installed: `make setup` installs it")
    folder = tmp_path_factory.mktemp("registry")
    for attempt in range(1, FIRST_START_ATTEMPTS + 1):
        try:
            host, proc = _start_registry(exe, folder)
        except PortTakenError:
            if attempt == FIRST_START_ATTEMPTS:
                raise
            continue
        try:
            yield host
        finally:
            proc.kill()
            proc.wait(timeout=10)
        return


def _start_registry(exe: str, folder: Path) -> tuple[str, subprocess.Popen[bytes]]:
    """One start of the registry on a new free port: its ``host:port`` and its process, once it answers."""
    host = f"{LOOPBACK}:{free_port()}"
    config = folder / "config.yml"
    config.write_text(
        f"version: 0.1\nlog: {{level: warn}}\nstorage:\n  filesystem: {{rootdirectory: {folder / 'data'}}}\n"
        f"  delete: {{enabled: true}}\nhttp:\n  addr: {host}\n",
        encoding="utf-8",
    )
    log_path = folder / "registry.log"
    log_from = log_path.stat().st_size if log_path.exists() else 0
    with log_path.open("ab") as log:
        proc = subprocess.Popen([exe, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)

    def up() -> bool:
        if proc.poll() is not None:
            tail = log_tail(log_path, log_from)
            error = PortTakenError if port_was_taken(tail) else ServiceError
            raise error(f"docker-registry on {host} exited with {proc.returncode}: {tail}")
        try:
            return requests.get(f"http://{host}/v2/", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    try:
        wait_until(up, timeout=30, interval=0.1, message=f"docker-registry on {host}")
    except (TimeoutError, ServiceError):  # it never answered, or it exited (a taken port among them)
        proc.kill()
        proc.wait(timeout=10)
        raise
    return host, proc


@pytest.fixture(scope="session")
def loopback_file_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 serving tool.txt, for the bad image's ADD from a URL."""
    folder = tmp_path_factory.mktemp("served")
    (folder / "tool.txt").write_text("a tool\n", encoding="utf-8")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/tool.txt"
    finally:
        server.shutdown()
        thread.join(timeout=10)
