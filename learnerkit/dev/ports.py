"""Loopback ports: free ones from the kernel, and a preferred port when nothing listens on it."""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping

from learnerkit.dev.errors import PortTakenError

LOOPBACK = "127.0.0.1"
FIRST_START_ATTEMPTS = 3
"""A server's first start whose ports another process took between their choice and the server's bind gets new
ones, up to this many starts in all (a restart keeps its ports: its callers rely on them)."""


def port_was_taken(log: str) -> bool:
    """Whether a server's log says it could not bind a port (Go's words, as etcd and SeaweedFS print them)."""
    return "address already in use" in log


def start_on_new_ports_if_taken(start: Callable[[], None], new_ports: Callable[[], None], attempts: int) -> None:
    """``start()``; where it raises `PortTakenError`, ``new_ports()`` and start again, ``attempts`` starts in all."""
    for attempt in range(1, attempts + 1):
        try:
            start()
        except PortTakenError:
            if attempt == attempts:
                raise
            new_ports()
        else:
            return


def free_ports(count: int) -> list[int]:
    """Ports the kernel just handed out and released: free unless another process grabs one meanwhile.

    All sockets stay bound until every port is chosen, so the ports differ from each other.
    """
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((LOOPBACK, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def free_port() -> int:
    [port] = free_ports(1)
    return port


def port_is_free(port: int) -> bool:
    """Whether a server could bind ``port`` on loopback now (SO_REUSEADDR, as servers bind)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
        return True


def choose_ports(preferred: Mapping[str, int], *, any_port: bool = False) -> dict[str, int]:
    """Each named port: its preferred number when free (and ``any_port`` is false), else a free one."""
    chosen = {name: port for name, port in preferred.items() if not any_port and port_is_free(port)}
    missing = [name for name in preferred if name not in chosen]
    taken = set(chosen.values())
    extra = [port for port in free_ports(len(missing) + len(taken)) if port not in taken]
    chosen.update(zip(missing, extra, strict=False))
    return {name: chosen[name] for name in preferred}
