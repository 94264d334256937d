"""The sidecar's exit status, which the scheduler reads when a sidecar dies before its learner's final status: a
write given up because the sidecar's lease may have lapsed exits ``LEASE_LAPSED_EXIT`` (the scheduler requeues the
job, docs/security.md "Fencing"), with one line that says so; a fenced or failed sidecar does not."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from controller_sidecar import cli, outputs
from controller_sidecar.exits import CONFIG_EXIT, DONE_EXIT, FAILED_EXIT, LEASE_LAPSED_EXIT
from controller_sidecar.fence import Fence, FencedError, LeaseLapsedError
from controller_sidecar.retry import Backoff
from controller_sidecar.status import Phase
from tests.unit.controller_sidecar.test_fence import sidecar

pytestmark = pytest.mark.timeout(20)
DEADLINE_S = 0.2
LAPSED = LeaseLapsedError("put s3://results/a: waiting, the sidecar's lease may have expired (etcd unanswered)")


class Stand:
    """Stands in for the sidecar: ends as a test says, or runs until cancelled once SIGTERM's event is set."""

    ends: Any = Phase.COMPLETED
    held_back = False

    def __init__(self, settings: object, terminate: asyncio.Event) -> None:
        self.terminate = terminate
        self.fence = Fence(2, 9.0)
        if not self.held_back:
            self.fence.refreshed(1e12)  # held far into the future: its writes go

    async def run(self) -> Phase:
        if self.ends == "terminated":
            self.terminate.set()  # as SIGTERM would
            await asyncio.Event().wait()  # its writes wait past the shutdown deadline
        if isinstance(self.ends, BaseException):
            raise self.ends
        return Phase(self.ends)


def serve(monkeypatch: pytest.MonkeyPatch, ends: object, *, held_back: bool = False) -> int:
    stand = type("Ends", (Stand,), {"ends": ends, "held_back": held_back})
    monkeypatch.setattr(cli, "Sidecar", stand)
    settings = SimpleNamespace(timing=SimpleNamespace(shutdown_deadline_s=DEADLINE_S))
    return asyncio.run(cli.serve(settings))  # type: ignore[arg-type]


def test_the_statuses_are_distinct() -> None:
    assert len({DONE_EXIT, FAILED_EXIT, CONFIG_EXIT, LEASE_LAPSED_EXIT}) == 4


def test_a_write_given_up_on_a_lapsed_lease_exits_lease_lapsed_with_one_line_saying_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="controller_sidecar"):
        assert serve(monkeypatch, LAPSED) == LEASE_LAPSED_EXIT
    last = caplog.records[-1].getMessage()
    assert "lease may have lapsed" in last and f"exiting with status {LEASE_LAPSED_EXIT}" in last, last
    assert "resumes from its last checkpoint" in last and str(LAPSED) in last


@pytest.mark.parametrize(("held_back", "status"), [(True, LEASE_LAPSED_EXIT), (False, FAILED_EXIT)])
def test_a_shutdown_deadline_run_out_is_the_leases_only_while_the_writes_are_held_back(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, held_back: bool, status: int
) -> None:
    with caplog.at_level(logging.INFO, logger="controller_sidecar"):
        assert serve(monkeypatch, "terminated", held_back=held_back) == status
    assert f"shutdown deadline of {DEADLINE_S:.1f}s ran out" in caplog.records[-1].getMessage()


@pytest.mark.parametrize(
    ("phase", "status"), [(Phase.COMPLETED, DONE_EXIT), (Phase.HALTED, DONE_EXIT), (Phase.FAILED, FAILED_EXIT)]
)
def test_a_final_status_exits_as_before(monkeypatch: pytest.MonkeyPatch, phase: Phase, status: int) -> None:
    assert serve(monkeypatch, phase) == status


def test_a_fenced_sidecar_never_exits_lease_lapsed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fenced, another attempt owns the job: nothing for the scheduler to requeue (it ends HALTED, status 0; an
    error that escapes is Python's status 1)."""
    with pytest.raises(FencedError):
        serve(monkeypatch, FencedError("put s3://results/a: refused, this attempt is fenced"))


def test_a_fenced_sidecar_is_not_held_back() -> None:
    fence = Fence(2, 9.0)
    fence.lose("the job's fence names attempt 3, not 2")
    assert not fence.held_back


class LapsedStore:
    """A store whose every write is held back by a lapsed lease, as the sidecar's own gate refuses it."""

    def __init__(self) -> None:
        self.writes = 0

    def upload_stream(self, *args: object, **kwargs: object) -> None:
        self.writes += 1
        raise LAPSED


def test_a_result_held_back_past_the_bound_ends_the_storing_rather_than_being_counted_not_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not the file's fault, nor the job's: before, it was listed as "not stored" and a COMPLETED learner FAILED."""
    side = sidecar(tmp_path)
    results = side.settings.dirs.results
    results.mkdir(parents=True)
    (results / "model.bin").write_bytes(b"weights")
    monkeypatch.setattr(outputs, "transfer_backoff", lambda _settings: Backoff(held_back_s=0.0))  # no wait here
    store = LapsedStore()
    with pytest.raises(LeaseLapsedError):
        asyncio.run(
            outputs.store_tree(
                side.settings,
                store,  # type: ignore[arg-type]
                side.metrics,
                results,
                side.settings.locations.result_files,
                "results",
            )
        )
    assert store.writes == 1
