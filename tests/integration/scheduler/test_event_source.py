"""The event hub on the real etcd: its one watch covers the jobs' and the sweeps' keys and nothing beside them (the
credentials, node marks, the catalog never pass through it), a key that does not parse or names no job is skipped
and logged once while the stream goes on, and a sweep's tenant comes from its small ``tenant`` key, not its spec."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from contextlib import aclosing
from typing import Any

import pytest

from controller_sidecar.etcdstore import EtcdStore
from learnerkit.scheduler.events.changes import Event
from learnerkit.scheduler.events.hub import EventHub
from learnerkit.scheduler.events.source import follow_etcd, watched_range
from learnerkit.scheduler.sweeps.store import SweepSpecRecord, SweepState, SweepStore
from tests.waiting import await_until


def status(tenant: str, state: str = "QUEUED") -> str:
    return json.dumps({"tenant": tenant, "status": state, "name": "n"})


def spec(sweep_id: str, tenant: str) -> SweepSpecRecord:
    return SweepSpecRecord(sweep_id, tenant, 1.8e9, "search", "s.yml", "manifest", "m.yml")


def test_the_watch_holds_the_jobs_and_the_sweeps_keys_only(etcd_server: Any) -> None:
    parent = f"/learnerkit-range-{uuid.uuid4().hex[:8]}"
    root = f"{parent}/jobs"
    inside = [f"{root}/j1/status", f"{root}/j1/learners/1/metrics", f"{parent}/sweeps/s1/state"]
    beside = [f"{parent}/credentials/j1", f"{root}.nodes/n1", f"{root}.instance", f"{root}.catalog/t/m", f"{parent}/z"]

    async def run() -> list[str]:
        etcd = await EtcdStore.connect(etcd_server.settings())
        try:
            start = await etcd.put(f"{parent}/a", "before")
            for key in [*beside, *inside]:
                await etcd.put(key, "{}")
            seen: list[str] = []
            async with aclosing(etcd.watch_range(*watched_range(root), start_revision=start + 1)) as events:
                async for event in events:
                    seen.append(event.key)
                    if event.key == inside[-1]:
                        return seen
            return seen
        finally:
            await etcd.close()

    assert asyncio.run(asyncio.wait_for(run(), 30)) == inside


def test_a_bad_key_is_skipped_and_logged_once_and_a_sweep_s_tenant_needs_no_spec(
    etcd_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    root = f"/learnerkit-events-{uuid.uuid4().hex[:8]}/jobs"
    caplog.set_level(logging.WARNING, "learnerkit.scheduler.events.hub")

    async def run() -> list[Event]:
        etcd = await EtcdStore.connect(etcd_server.settings())
        hub = EventHub(root, streams_per_address=1)
        published: list[Event] = []
        hub.listen(published.append)
        following = asyncio.create_task(follow_etcd(hub, etcd))
        try:
            await asyncio.wait_for(hub.ready.wait(), 30)
            sweeps = SweepStore(etcd, root)
            await sweeps.create(spec("made", "team-m"))  # its spec, its tenant and its first state at once
            assert await etcd.get(f"{sweeps.root}/made/tenant") is not None
            state = json.dumps(SweepState().to_raw())  # a sweep with no spec: its tenant key alone names it
            await etcd.put_all({f"{sweeps.root}/new/tenant": "team-s", f"{sweeps.root}/new/state": state})
            await etcd.put(f"{sweeps.root}/old/spec", json.dumps(spec("old", "team-o").to_raw()))  # stored before
            await etcd.put(f"{sweeps.root}/old/state", json.dumps(SweepState().to_raw()))
            for _ in range(2):  # the same bad keys twice: each logged once
                await etcd.put(f"{root}/bad/status", "not json")
                await etcd.put(f"{root}/bad/learners/1/metrics", '{"loss": 1}')  # its tenant: from a bad status
                await etcd.put(f"{root}/notenant/status", json.dumps({"status": "QUEUED"}))
            await etcd.put(f"{root}/good/status", status("team-a"))

            async def last_seen() -> bool:
                return any(e.change.job_id == "good" for e in published) or following.done()

            await await_until(last_seen, timeout=30, message="the good job's event after the bad keys")
            assert not following.done(), "the hub ended"
            return published
        finally:
            following.cancel()
            await asyncio.gather(following, return_exceptions=True)
            await etcd.close()

    published = asyncio.run(run())
    assert [(e.change.kind, e.tenant, e.change.sweep_id or e.change.job_id) for e in published] == [
        ("sweep", "team-m", "made"),
        ("sweep", "team-s", "new"),
        ("sweep", "team-o", "old"),
        ("job", "team-a", "good"),
    ]
    skipped = [r.getMessage() for r in caplog.records if "skipped the change" in r.getMessage()]
    assert len(skipped) == 2, skipped  # a status that is no JSON makes no event, as a half-written key
    assert f"skipped the change of {root}/bad/learners/1/metrics at revision" in skipped[0]
    assert "JSONDecodeError" in skipped[0]
    assert f"skipped the change of {root}/notenant/status at revision" in skipped[1]
    assert "KeyError: 'tenant'" in skipped[1]
