"""A real etcd server for tests: ``/usr/bin/etcd`` on free loopback ports, in a throwaway data folder.

The server can be stopped and started again on the same ports and data, so tests can cause an outage.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller_sidecar.settings import EtcdSettings
from tests.waiting import wait_until

ETCD_BINARY = "/usr/bin/etcd"
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class EtcdServer:
    """One etcd member on 127.0.0.1; ``stop()`` and ``start()`` keep its ports and data."""

    def __init__(self, binary: str, data_dir: Path) -> None:
        self.binary = binary
        self.data_dir = data_dir
        self.client_port = _free_port()
        self.peer_port = _free_port()
        self.log_path = data_dir.parent / "etcd.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def settings(self) -> EtcdSettings:
        return EtcdSettings(endpoints=(self.endpoint,))

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        if self.running:
            return
        client_url = f"http://{self.endpoint}"
        peer_url = f"http://127.0.0.1:{self.peer_port}"
        argv = [
            self.binary,
            "--name=learnerkit-test",
            f"--data-dir={self.data_dir}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=learnerkit-test={peer_url}",
            "--initial-cluster-state=new",
            "--log-level=warn",
        ]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        wait_until(self._healthy, timeout=START_TIMEOUT_S, interval=0.05, message=self._failure)

    def stop(self, sig: signal.Signals = signal.SIGKILL) -> None:
        """Stop the server (SIGKILL by default, like a crash) and wait until it is gone."""
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.send_signal(sig)
            self._process.wait(timeout=STOP_TIMEOUT_S)
        self._process = None

    def _healthy(self) -> bool:
        if self._process is None or self._process.poll() is not None:
            raise RuntimeError(self._failure())
        try:
            with urllib.request.urlopen(f"http://{self.endpoint}/health", timeout=1) as response:
                return b'"health":"true"' in response.read()
        except (urllib.error.URLError, OSError):
            return False

    def _failure(self) -> str:
        tail = self.log_path.read_text(errors="replace")[-2000:] if self.log_path.exists() else ""
        return f"etcd on {self.endpoint} to become healthy; its log ends:\n{tail}"


@pytest.fixture(scope="session")
def etcd_server() -> Iterator[EtcdServer]:
    """A running etcd for the whole session; tests that stop it must start it again."""
    binary = shutil.which("etcd") or (ETCD_BINARY if Path(ETCD_BINARY).exists() else None)
    if binary is None:
        pytest.fail("etcd is not installed (Debian package etcd-server): run make setup")
    with tempfile.TemporaryDirectory(prefix="learnerkit-etcd-") as tmp:
        server = EtcdServer(binary, Path(tmp) / "data")
        try:
            server.start()
            yield server
        finally:
            server.stop()


@pytest.fixture
def job_id() -> str:
    """A job id no other test uses, so tests share one etcd without seeing each other's keys."""
    return f"test-{uuid.uuid4().hex[:12]}"
