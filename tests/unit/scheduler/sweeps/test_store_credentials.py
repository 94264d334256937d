"""A sweep's store credentials lie apart from its records (``/learnerkit/credentials/sweeps/<id>``), as a job's
do: never under the sweeps' prefix, nor in the range the event hub watches; gone when the sweep ends; a sweep
stored with them in its spec (the earlier layout) still runs, and has them moved out at start."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any, cast

from controller_sidecar.etcdstore import EtcdStore
from learnerkit.scheduler.events.source import watched_range
from learnerkit.scheduler.sweeps.store import SweepSpecRecord, SweepState, SweepStore

SECRET = "s3cr3t-value-9f1"
MANIFEST = f"""\
name: trial
version: "1.0"
framework: {{name: pytorch, version: "2.4"}}
learners: 1
cpus: 1
memory: 1Gb
data_stores:
  - id: store
    type: s3_datastore
    training_data: {{container: data}}
    training_results: {{container: results}}
    connection: {{auth_url: "http://127.0.0.1:8333", user_name: key-id, password: {SECRET}}}
command: python3 train.py
"""
SWEEP = "sweep-c4ed1a11"
KEY = f"/learnerkit/credentials/sweeps/{SWEEP}"
"""Where the sweep's credentials lie (docs/architecture.md), beside the jobs' ``/learnerkit/credentials/<job>``."""


class MemoryEtcd:
    """The key-value calls `SweepStore` makes, over a dictionary standing for etcd."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    async def get(self, key: str) -> tuple[bytes, int] | None:
        return (self.data[key], 1) if key in self.data else None

    async def put(self, key: str, value: str | bytes) -> int:
        await self.put_all({key: value})
        return 1

    async def put_all(self, items: Mapping[str, str | bytes], delete: tuple[str, ...] = ()) -> None:
        self.data.update({k: v.encode() if isinstance(v, str) else v for k, v in items.items()})
        for key in delete:
            self.data.pop(key, None)

    async def create_all(self, guard: str, items: Mapping[str, str | bytes]) -> bool:
        if guard in self.data:
            return False
        await self.put_all(items)
        return True

    async def iter_prefix(self, prefix: str) -> AsyncIterator[tuple[str, bytes]]:
        for key in sorted(self.data):
            if key.startswith(prefix):
                yield key, self.data[key]


def store() -> tuple[SweepStore, MemoryEtcd]:
    etcd = MemoryEtcd()
    return SweepStore(cast(EtcdStore, etcd)), etcd


def record() -> SweepSpecRecord:
    return SweepSpecRecord(SWEEP, "team-a", 0.0, "search", "search.yml", MANIFEST, "manifest.yml")


def holding_secret(etcd: MemoryEtcd) -> list[str]:
    return sorted(key for key, value in etcd.data.items() if SECRET.encode() in value)


def in_watched_range(key: str) -> bool:
    first, end = watched_range("/learnerkit/jobs")
    return first <= key < end


def test_the_credentials_key_lies_outside_the_sweeps_prefix_and_the_watched_range() -> None:
    assert not KEY.startswith("/learnerkit/sweeps/")
    assert not in_watched_range(KEY)
    assert in_watched_range(f"/learnerkit/sweeps/{SWEEP}/spec")  # the check itself can fail


def test_a_new_sweep_keeps_its_credentials_under_their_own_key_only() -> None:
    sweeps, etcd = store()
    assert asyncio.run(sweeps.create(record()))
    assert holding_secret(etcd) == [KEY]
    spec = json.loads(etcd.data[f"/learnerkit/sweeps/{SWEEP}/spec"])
    assert "(deleted)" in spec["manifest"]["text"]
    assert "credentials" not in spec
    loaded = asyncio.run(sweeps.load_all()).sweeps
    assert [s.spec.manifest_text for s in loaded] == [MANIFEST]  # a restarted scheduler runs it with them


def test_an_ended_sweep_loses_its_credentials_key_with_its_spec_marked_in_one_write() -> None:
    sweeps, etcd = store()
    assert asyncio.run(sweeps.create(record()))
    redacted = asyncio.run(sweeps.delete_credentials(record()))
    assert holding_secret(etcd) == []
    assert KEY not in etcd.data
    assert json.loads(etcd.data[f"/learnerkit/sweeps/{SWEEP}/spec"])["credentials"] == "deleted"
    assert redacted.credentials_deleted
    assert SECRET not in redacted.manifest_text


def test_a_sweep_stored_with_credentials_in_its_spec_runs_on_them_and_has_them_moved_out() -> None:
    sweeps, etcd = store()
    legacy: dict[str, Any] = record().to_raw()
    etcd.data[f"/learnerkit/sweeps/{SWEEP}/spec"] = json.dumps(legacy).encode()
    etcd.data[f"/learnerkit/sweeps/{SWEEP}/state"] = json.dumps(SweepState().to_raw()).encode()
    loaded = asyncio.run(sweeps.load_all()).sweeps
    assert [s.spec.manifest_text for s in loaded] == [MANIFEST]
    assert holding_secret(etcd) == [KEY]
    again = asyncio.run(sweeps.load_all()).sweeps  # the next start reads them from their own key
    assert [s.spec.manifest_text for s in again] == [MANIFEST]


def test_an_ended_sweep_of_the_earlier_layout_keeps_its_redacted_spec_and_gets_no_key() -> None:
    sweeps, etcd = store()
    asyncio.run(sweeps.create(record()))
    asyncio.run(sweeps.delete_credentials(record()))
    before = dict(etcd.data)
    asyncio.run(sweeps.load_all())
    assert etcd.data == before


def test_a_sweep_failed_at_start_for_records_that_do_not_read_loses_its_credentials() -> None:
    """No driver holds such a sweep, so none deletes them as it ends: `fail` does, with the state it writes."""
    sweeps, etcd = store()
    asyncio.run(sweeps.create(record()))
    etcd.data[f"/learnerkit/sweeps/{SWEEP}/trials/000000"] = b"{not json"
    loaded = asyncio.run(sweeps.load_all())
    assert list(loaded.unreadable) == [SWEEP]
    asyncio.run(sweeps.fail(SWEEP, loaded.unreadable[SWEEP]))
    assert holding_secret(etcd) == []
