"""pytest fixtures over :class:`learnerkit.dev.s3.SeaweedServer`: a real S3 server (SeaweedFS).

``faulty_s3`` puts a loopback HTTP proxy in front of it that can answer 503, hold or corrupt responses,
and counts requests.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from learnerkit.common.errors import ToolMissingError
from learnerkit.dev.ports import free_ports
from learnerkit.dev.s3 import SeaweedServer
from tests.servers.proxy import FaultyProxy

__all__ = ["SeaweedServer", "faulty_s3", "free_ports", "s3_server"]


@pytest.fixture(scope="session")
def s3_server() -> Iterator[SeaweedServer]:
    root = Path(tempfile.mkdtemp(prefix="learnerkit-seaweed-"))
    try:
        server = SeaweedServer(root)
    except ToolMissingError as e:
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(str(e))
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def faulty_s3(s3_server: SeaweedServer) -> Iterator[FaultyProxy]:
    proxy = FaultyProxy(s3_server.endpoint_url)
    try:
        yield proxy
    finally:
        proxy.close()
