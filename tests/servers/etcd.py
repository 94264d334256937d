"""pytest fixtures over :class:`learnerkit.dev.etcd.EtcdServer`: a real etcd on free loopback ports.

The server can be stopped and started again on the same ports and data, so tests can cause an outage.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from learnerkit.common.errors import ToolMissingError
from learnerkit.dev.etcd import EtcdServer, etcd_binary

__all__ = ["EtcdServer", "etcd_server", "job_id"]


@pytest.fixture(scope="session")
def etcd_server() -> Iterator[EtcdServer]:
    """A running etcd for the whole session; tests that stop it must start it again."""
    try:
        binary = etcd_binary()
    except ToolMissingError as e:
        pytest.fail(str(e))
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
