"""etcd (Debian ``etcd-server``) on loopback: the attached :class:`EtcdServer` for tests and benchmarks,
and the detached dev service. Both share the command line and the readiness probe (``GET /health``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from controller_sidecar.settings import EtcdSettings
from learnerkit.common.errors import ToolMissingError
from learnerkit.dev.detached import log_tail
from learnerkit.dev.errors import PortTakenError, ServiceError
from learnerkit.dev.polling import poll_until
from learnerkit.dev.ports import (
    FIRST_START_ATTEMPTS,
    LOOPBACK,
    free_ports,
    port_was_taken,
    start_on_new_ports_if_taken,
)
from learnerkit.dev.service import Launch, Service

ETCD_BINARY = "/usr/bin/etcd"
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0


def etcd_binary() -> str:
    found = shutil.which("etcd") or (ETCD_BINARY if Path(ETCD_BINARY).exists() else None)
    if found is None:
        raise ToolMissingError("etcd is not installed (Debian package etcd-server): run make setup")
    return found


def etcd_argv(binary: str, name: str, data_dir: Path, client_port: int, peer_port: int) -> list[str]:
    client_url = f"http://{LOOPBACK}:{client_port}"
    peer_url = f"http://{LOOPBACK}:{peer_port}"
    return [
        binary,
        f"--name={name}",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client_url}",
        f"--advertise-client-urls={client_url}",
        f"--listen-peer-urls={peer_url}",
        f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster={name}={peer_url}",
        "--initial-cluster-state=new",
        "--auto-compaction-mode=periodic",
        "--auto-compaction-retention=1h",  # deleted credentials leave the history within the hour (docs/security.md)
        "--log-level=warn",
    ]


def etcd_healthy(endpoint: str) -> bool:
    """``endpoint`` is ``host:port``; true once ``/health`` reports a member that serves requests."""
    try:
        with urllib.request.urlopen(f"http://{endpoint}/health", timeout=1) as response:
            return b'"health":"true"' in response.read()
    except (urllib.error.URLError, OSError):
        return False


class EtcdServer:
    """One etcd member on 127.0.0.1, a child of this process; ``stop()`` and ``start()`` keep ports and data."""

    def __init__(self, binary: str, data_dir: Path) -> None:
        self.binary = binary
        self.data_dir = data_dir
        self.client_port, self.peer_port = free_ports(2)
        self.log_path = data_dir.parent / "etcd.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._started = False
        self._log_from = 0

    @property
    def endpoint(self) -> str:
        return f"{LOOPBACK}:{self.client_port}"

    def settings(self) -> EtcdSettings:
        return EtcdSettings(endpoints=(self.endpoint,))

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start etcd; a first start whose ports were taken meanwhile tries again on new ones, on an empty data
        directory (the failed start may have written its member's addresses there). A restart keeps its ports."""
        if self.running:
            return
        start_on_new_ports_if_taken(self._start_once, self._new_ports, 1 if self._started else FIRST_START_ATTEMPTS)
        self._started = True

    def _new_ports(self) -> None:
        self.client_port, self.peer_port = free_ports(2)
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def _start_once(self) -> None:
        argv = etcd_argv(self.binary, "learnerkit-test", self.data_dir, self.client_port, self.peer_port)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_from = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=_path_only())
        if not poll_until(self._healthy, START_TIMEOUT_S):
            raise ServiceError(self._failure())

    def stop(self, sig: signal.Signals = signal.SIGKILL) -> None:
        """Stop the server (SIGKILL by default, like a crash) and wait until it is gone."""
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.send_signal(sig)
            self._process.wait(timeout=STOP_TIMEOUT_S)
        self._process = None

    @contextmanager
    def paused(self) -> Iterator[None]:
        """The server frozen (SIGSTOP) for the block, then let go (SIGCONT): clients' connections stay open and
        unanswered, as when etcd is out of reach for a while; leases that ran out meanwhile are revoked after."""
        if self._process is None or self._process.poll() is not None:
            raise ServiceError(f"etcd on {self.endpoint} is not running: nothing to pause")
        self._process.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            self._process.send_signal(signal.SIGCONT)

    def _healthy(self) -> bool:
        if self._process is None or self._process.poll() is not None:
            tail = self._log_tail()
            error = PortTakenError if port_was_taken(tail) else ServiceError
            raise error(self._failure())
        return etcd_healthy(self.endpoint)

    def _log_tail(self) -> str:
        """The end of this start's part of the log."""
        return log_tail(self.log_path, self._log_from)

    def _failure(self) -> str:
        return f"etcd on {self.endpoint} did not become healthy; its log ends:\n{self._log_tail()}"


def _path_only() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def _dev_argv(launch: Launch) -> list[str]:
    ports = launch.ports
    return etcd_argv(etcd_binary(), "learnerkit-dev", launch.folder / "data", ports["client"], ports["peer"])


def _dev_probe(launch: Launch) -> bool:
    return etcd_healthy(f"{LOOPBACK}:{launch.ports['client']}")


def _dev_exports(launch: Launch) -> dict[str, str]:
    return {"ETCD_ENDPOINTS": f"{LOOPBACK}:{launch.ports['client']}"}


ETCD_SERVICE = Service(
    name="etcd",
    ports={"client": 2379, "peer": 2380},
    main_port="client",
    argv=_dev_argv,
    probe=_dev_probe,
    exports=_dev_exports,
    metrics_path="/metrics",
    start_timeout_s=START_TIMEOUT_S,
)
