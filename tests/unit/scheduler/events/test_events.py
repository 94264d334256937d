"""The event stream's logic over a fake watch: what each key's change becomes, tenants kept apart, resuming by
position from the buffer, a snapshot when the position is no longer covered, caps and slow clients."""

from __future__ import annotations

import asyncio
import http.client
import io
import json
from collections.abc import AsyncGenerator
from typing import cast

import pytest

from controller_sidecar.etcdstore import WatchEvent
from learnerkit.scheduler.client.http import read_events
from learnerkit.scheduler.events import hub as hub_module
from learnerkit.scheduler.events.changes import LAST, Change, Event, Position, change_of
from learnerkit.scheduler.events.hub import EventHub, Snapshot, Stream, TooManyStreams
from learnerkit.scheduler.events.responses import resume_point

ROOT = "/lk/jobs"


def status(job_id: str, tenant: str, state: str, revision: int, reason: str = "") -> WatchEvent:
    value = {"job_id": job_id, "tenant": tenant, "name": "n", "status": state, "reason": reason, "attempt": 1}
    return WatchEvent(f"{ROOT}/{job_id}/status", json.dumps(value).encode(), revision)


def test_each_key_becomes_its_event_and_other_keys_none() -> None:
    job = change_of(status("j1", "team-a", "RUNNING", 5, "why"), ROOT)
    assert job is not None and (job.kind, job.tenant) == ("job", "team-a")
    assert job.data == {"status": "RUNNING", "reason": "why", "attempt": 1, "name": "n"}
    learner = json.dumps({"status": "FAILED", "message": "oom", "exit_code": 137, "sequence": 9}).encode()
    got = change_of(WatchEvent(f"{ROOT}/j1/learners/2/status", learner, 6), ROOT)
    assert got is not None and got.data == {"learner_id": 2, "status": "FAILED", "message": "oom", "exit_code": 137}
    alive = change_of(WatchEvent(f"{ROOT}/j1/learners/2/alive", None, 7), ROOT)
    assert alive is not None and alive.data == {"learner_id": 2, "alive": False}
    metrics = change_of(WatchEvent(f"{ROOT}/j1/learners/1/metrics", b'{"loss": 0.5, "tag": "x", "ok": true}', 8), ROOT)
    assert metrics is not None and metrics.data == {"learner_id": 1, "metrics": {"loss": 0.5}}
    attempt = change_of(WatchEvent(f"{ROOT}/j1/attempts/3", b"{}", 9), ROOT)
    assert attempt is not None and (attempt.kind, attempt.data) == ("attempt", {"attempt": 3})
    deleted = change_of(WatchEvent(f"{ROOT}/j1/status", None, 10), ROOT)
    assert deleted is not None and deleted.kind == "job-deleted"
    for key, value in (
        (f"{ROOT}/j1/history/job-0000000001", b"{}"),
        (f"{ROOT}/j1/spec", b"{}"),
        (f"{ROOT}/j1/learners/1/status_seq", b"0000000001"),
        (f"{ROOT}/j1/status", b"not json"),
        ("/elsewhere/j1/status", b"{}"),
    ):
        assert change_of(WatchEvent(key, value, 11), ROOT) is None, key


def sweep_state(sweep_id: str, status: str, revision: int, reason: str = "") -> WatchEvent:
    """A sweep's state as `SweepStore` writes it, beside the jobs' root."""
    value = {"status": status, "decisions": 3, "reason": reason}
    return WatchEvent(f"/lk/sweeps/{sweep_id}/state", json.dumps(value).encode(), revision)


def test_a_sweeps_state_becomes_a_sweep_event_and_its_other_keys_none() -> None:
    got = change_of(sweep_state("sweep-0a1b2c3d", "halted", 5, "halted"), ROOT)
    assert got is not None and (got.kind, got.job_id, got.sweep_id, got.tenant) == ("sweep", "", "sweep-0a1b2c3d", None)
    assert got.data == {"status": "halted", "reason": "halted", "decisions": 3}
    assert got.subject == "sweep sweep-0a1b2c3d"
    sse = Event(Position(5, 0), "team-a", got).sse().decode()
    assert sse.endswith('data: {"sweep_id":"sweep-0a1b2c3d","status":"halted","reason":"halted","decisions":3}\n\n')
    for key, value in (
        ("/lk/sweeps/sweep-0a1b2c3d/spec", b'{"tenant": "team-a"}'),
        ("/lk/sweeps/sweep-0a1b2c3d/decisions/0000000001", b"{}"),
        ("/lk/sweeps/sweep-0a1b2c3d/trials/1", b"{}"),
        ("/lk/sweeps/sweep-0a1b2c3d/state", b"not json"),
        ("/lk/sweeps/sweep-0a1b2c3d/state", None),
        ("/other/sweeps/sweep-0a1b2c3d/state", b'{"status": "done", "decisions": 1}'),
    ):
        assert change_of(WatchEvent(key, value, 6), ROOT) is None, key


@pytest.mark.asyncio
async def test_a_sweeps_events_reach_its_tenant_only() -> None:
    feed = Feed()
    feed.tenants["sweep sweep-0a1b2c3d"] = "team-a"  # from its spec
    hub, task = await started(feed)
    a, b = hub.subscribe("team-a", "10.0.0.1", None), hub.subscribe("team-b", "10.0.0.2", None)
    await delivered(
        feed,
        hub,
        sweep_state("sweep-0a1b2c3d", "running", 101),
        sweep_state("sweep-0a1b2c3d", "halted", 102, "halted"),
        sweep_state("sweep-unknown", "done", 103),
    )
    got = [(e.change.kind, e.change.sweep_id, e.change.data["status"]) for e in drain(a) if isinstance(e, Event)]
    assert got == [("sweep", "sweep-0a1b2c3d", "running"), ("sweep", "sweep-0a1b2c3d", "halted")]
    assert [e for e in drain(b) if isinstance(e, Event) and e.change.kind == "sweep"] == []
    task.cancel()


def test_positions_order_by_revision_then_index_and_parse_back() -> None:
    assert Position(7, 2) < Position(7, 10) < Position(8, 0)
    assert Position.parse(str(Position(123, 4))) == Position(123, 4)
    for bad in ("", "abc", "12", "1.x", "-1.0", "9" * 50 + ".1"):
        assert Position.parse(bad) is None, bad
    assert resume_point(None, None) is None
    assert resume_point("5.1", "3.0") == Position(5, 1), "Last-Event-ID wins over ?after="
    assert resume_point(None, "3.0") == Position(3, 0)
    assert resume_point("garbage", None) == Position(-1, 0), "a made-up id resumes from before everything"


class Feed:
    """A fake etcd: the hub's watch yields what the test puts."""

    def __init__(self, revision: int = 100) -> None:
        self.revision = revision
        self.queue: asyncio.Queue[WatchEvent] = asyncio.Queue()
        self.tenants: dict[str, str] = {}

    async def start(self) -> int:
        return self.revision

    async def watch(self) -> AsyncGenerator[WatchEvent, None]:
        while True:
            yield await self.queue.get()

    async def tenant_of(self, change: Change) -> str | None:
        return self.tenants.get(change.subject)


async def started(feed: Feed, **caps: int) -> tuple[EventHub, asyncio.Task[None]]:
    hub = EventHub(ROOT, streams_per_address=caps.get("per_address", 10), streams_per_tenant=caps.get("per_tenant", 10))
    task = asyncio.create_task(hub.run(feed.start, feed.watch, feed.tenant_of))
    await asyncio.wait_for(hub.ready.wait(), 5)
    return hub, task


async def delivered(feed: Feed, hub: EventHub, *events: WatchEvent) -> None:
    """Puts the events and waits until the hub has taken the last (a marker job's status after them)."""
    marker = status("marker", "nobody", "QUEUED", events[-1].revision + 1)
    for event in (*events, marker):
        feed.queue.put_nowait(event)
    async with asyncio.timeout(5):
        while hub.latest.revision < marker.revision:
            await asyncio.sleep(0)


def drain(stream: Stream) -> list[Event | Snapshot | None]:
    got = []
    while not stream.queue.empty():
        got.append(stream.queue.get_nowait())
    return got


@pytest.mark.asyncio
async def test_a_stream_gets_its_tenants_events_only_in_order() -> None:
    feed = Feed()
    feed.tenants["old"] = "team-a"  # submitted before the hub started: its tenant is looked up
    hub, task = await started(feed)
    a, b = hub.subscribe("team-a", "10.0.0.1", None), hub.subscribe("team-b", "10.0.0.2", None)
    await delivered(
        feed,
        hub,
        status("j1", "team-a", "QUEUED", 101),
        status("j2", "team-b", "QUEUED", 102),
        WatchEvent(f"{ROOT}/old/learners/1/metrics", b'{"loss": 1.0}', 103),
        WatchEvent(f"{ROOT}/j2/learners/1/metrics", b'{"loss": 2.0}', 104),
        WatchEvent(f"{ROOT}/unknown/learners/1/metrics", b'{"loss": 3.0}', 105),
    )
    got_a, got_b = drain(a), drain(b)
    assert [(e.change.job_id, e.change.kind) for e in got_a if isinstance(e, Event)] == [
        ("j1", "job"),
        ("old", "metrics"),
    ]
    assert [e.change.job_id for e in got_b if isinstance(e, Event)] == ["j2", "j2"]
    assert all(isinstance(e, Event) and e.tenant == "team-b" for e in got_b)
    task.cancel()


@pytest.mark.asyncio
async def test_one_revisions_events_get_distinct_positions() -> None:
    feed = Feed()
    hub, task = await started(feed)
    stream = hub.subscribe("team-a", "a", None)
    await delivered(
        feed,
        hub,
        status("j1", "team-a", "RUNNING", 101),
        WatchEvent(f"{ROOT}/j1/history/job-1", b"{}", 101),
        WatchEvent(f"{ROOT}/j1/attempts/1", b"{}", 101),
        status("j1", "team-a", "COMPLETED", 102),
    )
    positions = [e.position for e in drain(stream) if isinstance(e, Event)]
    assert positions == [Position(101, 0), Position(101, 1), Position(102, 0)]
    task.cancel()


@pytest.mark.asyncio
async def test_resuming_after_a_position_replays_what_came_after_it() -> None:
    feed = Feed()
    hub, task = await started(feed)
    await delivered(feed, hub, *(status(f"j{n}", "team-a" if n % 2 else "team-b", "QUEUED", 101 + n) for n in range(6)))
    stream = hub.subscribe("team-a", "a", Position(102, 0))
    replayed = [e.position.revision for e in drain(stream) if isinstance(e, Event)]
    assert replayed == [104, 106], "team-a's events after 102.0, none of team-b's"
    await delivered(feed, hub, status("j9", "team-a", "RUNNING", 200))
    assert [e.position.revision for e in drain(stream) if isinstance(e, Event)] == [200]
    task.cancel()


@pytest.mark.asyncio
async def test_a_position_from_before_the_hub_or_evicted_or_ahead_gets_a_snapshot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hub_module, "BUFFERED", 3)
    feed = Feed(revision=100)
    hub, task = await started(feed)
    before = hub.subscribe("team-a", "a", Position(99, 5))
    assert [type(i) for i in drain(before)] == [Snapshot], "a restart: the position is from an earlier scheduler"
    at_start = hub.subscribe("team-a", "a", Position(100, 0))
    assert drain(at_start) == [Snapshot(Position(100, LAST))], "part of revision 100 may have been missed"
    drawn_now = hub.subscribe("team-a", "a", hub.latest)
    assert drain(drawn_now) == [], "a page drawn at the hub's start follows on without a snapshot"
    await delivered(feed, hub, *(status(f"j{n}", "team-a", "QUEUED", 101 + n) for n in range(5)))
    evicted = hub.subscribe("team-a", "b", Position(101, 0))
    assert drain(evicted) == [Snapshot(Position(106, 0))], "the buffer holds 104, 105 and the marker 106"
    covered = hub.subscribe("team-a", "b", Position(103, 0))
    assert [e.position.revision for e in drain(covered) if isinstance(e, Event)] == [104, 105]
    ahead = hub.subscribe("team-a", "c", Position(999, 0))
    assert [type(i) for i in drain(ahead)] == [Snapshot], "an etcd that was replaced: ahead of what it holds"
    task.cancel()


@pytest.mark.asyncio
async def test_caps_per_tenant_and_per_address() -> None:
    feed = Feed()
    hub, task = await started(feed, per_tenant=2, per_address=3)
    first = hub.subscribe("team-a", "a", None)
    hub.subscribe("team-a", "b", None)
    with pytest.raises(TooManyStreams, match="tenant team-a has 2"):
        hub.subscribe("team-a", "c", None)
    hub.unsubscribe(first)
    hub.subscribe("team-a", "c", None)
    hub.subscribe("team-b", "c", None)
    hub.subscribe("team-c", "c", None)
    with pytest.raises(TooManyStreams, match=r"from c.*LEARNERKIT_API_MAX_CONNECTIONS_PER_ADDRESS"):
        hub.subscribe("team-d", "c", None)
    task.cancel()


@pytest.mark.asyncio
async def test_a_slow_stream_is_ended_and_resumes_from_its_last_event(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hub_module, "QUEUED", 2)
    feed = Feed()
    hub, task = await started(feed)
    slow = hub.subscribe("team-a", "a", None)
    await delivered(feed, hub, *(status(f"j{n}", "team-a", "QUEUED", 101 + n) for n in range(3)))
    got = drain(slow)
    assert got[-1] is None and slow.ended, "ended with the end mark"
    last = [e for e in got if isinstance(e, Event)][-1].position
    again = hub.subscribe("team-a", "a", last)
    assert [e.position.revision for e in drain(again) if isinstance(e, Event)] == [103]
    task.cancel()


def test_an_event_as_server_sent_events_text() -> None:
    change = change_of(status("j1", "team-a", "RUNNING", 5), ROOT)
    assert change is not None
    text = Event(Position(5, 0), "team-a", change).sse().decode()
    lines = text.split("\n")
    assert lines[:2] == ["id: 5.0", "event: job"] and text.endswith("\n\n")
    assert json.loads(lines[2].removeprefix("data: "))["job_id"] == "j1"


def test_the_client_reads_events_and_keep_alives_from_the_stream_text() -> None:
    change = change_of(status("j1", "team-a", "FAILED", 7, "oom"), ROOT)
    assert change is not None
    text = b"retry: 1000\n: position 6.0\n\n" + Event(Position(7, 0), "team-a", change).sse() + b": keep-alive\n\n"
    got = list(read_events(cast(http.client.HTTPResponse, io.BytesIO(text))))
    assert got[0] is None and got[-1] is None, "comments are keep-alives"
    event = got[1]
    assert event is not None
    assert (event["id"], event["event"], event["job_id"], event["reason"]) == ("7.0", "job", "j1", "oom")


@pytest.mark.asyncio
async def test_closing_the_hub_ends_every_stream_and_refuses_new_ones() -> None:
    feed = Feed()
    hub, task = await started(feed)
    streams = [hub.subscribe("team-a", "a", None), hub.subscribe("team-b", "b", None)]
    hub.close()
    assert [drain(s) for s in streams] == [[None], [None]], "each ended with the end mark"
    with pytest.raises(TooManyStreams, match="stopping"):
        hub.subscribe("team-a", "a", None)
    task.cancel()
