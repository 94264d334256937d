"""A network link for benchmarks: a network namespace of the benchmark's own, joined to this one by a veth pair,
whose rate (``tc`` tbf) and one-way delay (``tc`` netem, where the kernel has it) can be set between runs.

A server started with :attr:`Link.launcher` runs inside the namespace at :attr:`Link.remote`; this process
reaches it across the pair. The namespace (and with it both ends of the pair) is deleted on every way out of
the ``with`` block, SIGTERM and SIGINT included. Needs root.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

SUBNET = "10.251.{n}.{host}"
"""A /30 per link, the third byte from this process' id: two benchmarks at once get distinct ones."""


class LinkError(RuntimeError):
    """A namespace, veth or qdisc the benchmark needs could not be made."""


@dataclass(frozen=True)
class Link:
    namespace: str
    near: str
    """The veth end in this namespace."""
    far: str
    """The veth end in the benchmark's namespace."""
    local: str
    remote: str

    @property
    def launcher(self) -> list[str]:
        """The argv prefix that runs a program in the benchmark's namespace."""
        return ["ip", "netns", "exec", self.namespace]

    def shape(self, gbit: float | None, delay_ms: float = 0.0) -> None:
        """Each direction limited to ``gbit`` Gbit/s (None: unlimited) with ``delay_ms`` one way."""
        qdisc = _qdisc(gbit, delay_ms)
        for prefix, device in (([*self.launcher], self.far), ([], self.near)):
            _ip(*prefix, "tc", "qdisc", "del", "dev", device, "root", check=False)
            if qdisc:
                _ip(*prefix, "tc", "qdisc", "add", "dev", device, "root", *qdisc)


def _qdisc(gbit: float | None, delay_ms: float) -> list[str]:
    if gbit is None and not delay_ms:
        return []
    rate = ["rate", f"{gbit * 1000:.0f}mbit"] if gbit is not None else []
    if delay_ms:
        # netem limits the rate itself: tbf and netem would need a classful qdisc to combine.
        return ["netem", "delay", f"{delay_ms:g}ms", *rate, "limit", "100000"]
    # A burst of 4 ms at the rate: enough for the kernel's timer, small enough to hold the rate.
    burst = max(int((gbit or 0) * 1e9 / 8 * 0.004), 65536)
    return ["tbf", *rate, "burst", str(burst), "latency", "50ms"]


def netem_available(link: Link) -> bool:
    """Whether this kernel has the netem qdisc (some build it out): tried on the link, then taken off."""
    try:
        link.shape(None, 1.0)
    except LinkError:
        return False
    link.shape(None)
    return True


@contextmanager
def veth_link() -> Iterator[Link]:
    n = os.getpid() % 250 + 1
    tag = f"lkb{os.getpid()}"
    link = Link(f"{tag}-ns", f"{tag}h", f"{tag}n", SUBNET.format(n=n, host=1), SUBNET.format(n=n, host=2))
    previous = {sig: signal.signal(sig, _leave) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        _ip("ip", "netns", "add", link.namespace)
        try:
            _ip("ip", "link", "add", link.near, "type", "veth", "peer", "name", link.far)
            _ip("ip", "link", "set", link.far, "netns", link.namespace)
            _ip("ip", "addr", "add", f"{link.local}/30", "dev", link.near)
            _ip("ip", "link", "set", link.near, "up")
            _ip(*link.launcher, "ip", "addr", "add", f"{link.remote}/30", "dev", link.far)
            _ip(*link.launcher, "ip", "link", "set", link.far, "up")
            _ip(*link.launcher, "ip", "link", "set", "lo", "up")
            yield link
        finally:
            # Deleting the namespace deletes the end inside it, and a veth pair goes with either end.
            _ip("ip", "link", "del", link.near, check=False)
            _ip("ip", "netns", "del", link.namespace, check=False)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _leave(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def _ip(*argv: str, check: bool = True) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise LinkError(f"{' '.join(argv)}: {done.stderr.strip() or f'exit {done.returncode}'}")
