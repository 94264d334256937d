"""D16: while a job's object store does not answer, reading its logs, files and metrics is "unavailable, retry"
(the API's 503 with Retry-After), never an internal error, and the answer names no internal address."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from controller_sidecar.endpoints import Endpoints
from controller_sidecar.retry import Backoff
from learnerkit.scheduler.errors import StoreUnavailableError
from learnerkit.scheduler.jobs.s3clients import S3Clients
from learnerkit.scheduler.jobs.state import JobState
from learnerkit.scheduler.manifest.parser import parse_manifest
from learnerkit.scheduler.outputs import files, logs
from learnerkit.scheduler.outputs.reader import OutputsReader
from tests.unit.scheduler.manifest.test_manifest import BASE

ONE_TRY = Backoff(initial_s=0.01, maximum_s=0.01, max_attempts=1, deadline_s=None)


@pytest.fixture
def down_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The URL of a port on 127.0.0.1 that is bound but never listens: every connection is refused."""
    monkeypatch.setattr(logs, "HOST_CALLS", ONE_TRY)
    monkeypatch.setattr(files, "HOST_CALLS", ONE_TRY)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{held.getsockname()[1]}"


def reads(reader: OutputsReader, url: str) -> dict[str, Callable[[], Awaitable[Any]]]:
    manifest = parse_manifest(BASE.replace("http://127.0.0.1:8333", url))
    state = JobState("job-0123456789ab", "team-a", "mnist", 0.0)
    endpoints = Endpoints("127.0.0.1:2379", s3_endpoint_url=url, s3_access_key="key", s3_secret_key="secret")
    return {
        "logs": lambda: reader.logs(endpoints, manifest, state, 1),
        "tail": lambda: reader.logs(endpoints, manifest, state, 1, tail=10),
        "files": lambda: reader.outputs(endpoints, manifest, state, "all"),
        "file": lambda: reader.open_output(endpoints, manifest, state, "attempt-1/learner-1/results/out.txt"),
        "metrics": lambda: reader.metrics_history(endpoints, manifest, state, 1),
    }


@pytest.mark.parametrize("what", ["logs", "tail", "files", "file", "metrics"])
def test_a_store_outage_is_unavailable_without_internal_addresses(down_store: str, what: str) -> None:
    read = reads(OutputsReader(S3Clients()), down_store)[what]
    with pytest.raises(StoreUnavailableError) as caught:
        asyncio.run(read())
    message = str(caught.value)
    assert "object store" in message and "try again" in message
    assert "127.0.0.1" not in message and "HTTPConnection" not in message, message
