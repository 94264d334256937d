"""The sidecar's record through etcd: its attempt read from the outputs the scheduler planned, put in parts under a
head written last, retried while etcd does not answer, and read back only whole."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from controller_sidecar import keys
from controller_sidecar.errors import TransientError
from controller_sidecar.etcdstore import EtcdStore
from controller_sidecar.provenancerecord import Digested, SidecarRecord
from controller_sidecar.recordchannel import HEAD, PART_BYTES, assemble, attempt_of
from controller_sidecar.runtime import Sidecar
from controller_sidecar.settings import load_settings

pytestmark = [pytest.mark.timeout(20)]
ENV = {"ETCD_ENDPOINTS": "127.0.0.1:2379", "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}


class Keys(EtcdStore):
    """etcd's keys in memory, in the order written; the first ``outage`` writes fail as an outage would."""

    def __init__(self, outage: int = 0) -> None:
        self.values: dict[str, bytes] = {}
        self.order: list[str] = []
        self.outage = outage

    async def put(self, key: str, value: str | bytes) -> int:
        if self.outage:
            self.outage -= 1
            raise TransientError("etcd does not answer")
        self.values[key] = value.encode() if isinstance(value, str) else value
        self.order.append(key)
        return len(self.order)

    async def delete(self, key: str) -> None:
        self.values.pop(key, None)


def sidecar(tmp_path: Path, prefix: str) -> Sidecar:
    doc = {
        "job_id": "job-1",
        "learner_id": 2,
        "num_learners": 2,
        "results": {"bucket": "results", "prefix": prefix},
        "data": {"mode": "mount"},
        "job_dir": str(tmp_path / "job"),
    }
    return Sidecar(load_settings({**ENV, "LEARNERKIT_SIDECAR_CONFIG_JSON": json.dumps(doc)}), asyncio.Event())


def test_the_attempt_is_that_of_the_planned_outputs() -> None:
    assert attempt_of("job-1/attempt-3/learner-2/") == 3
    assert attempt_of("tenants/a/job-1/attempt-12/learner-1/") == 12
    assert attempt_of("job-1/evaluations/round-1/robust/") is None


@pytest.mark.asyncio
async def test_a_large_record_goes_in_parts_its_head_last_through_an_outage(tmp_path: Path) -> None:
    record = SidecarRecord(2, results=tuple(Digested(f"results/f-{n:05d}", f"{n:064x}", n) for n in range(8000)))
    assert len(record.to_json()) > 2 * PART_BYTES
    running, etcd = sidecar(tmp_path, "job-1/attempt-3/learner-2/"), Keys(outage=2)
    running._etcd = etcd
    await running._put_record(record)
    prefix = keys.provenance_record_prefix("job-1", 3, 2)
    assert etcd.order[-1] == prefix + HEAD
    assert all(len(value) <= PART_BYTES for key, value in etcd.values.items() if key != prefix + HEAD)
    assert assemble(etcd.values, "job-1", keys.ROOT).records == {(3, 2): record}


@pytest.mark.asyncio
async def test_outputs_of_another_layout_put_no_record(tmp_path: Path) -> None:
    running, etcd = sidecar(tmp_path, "job-1/evaluations/round-1/robust/"), Keys()
    running._etcd = etcd
    await running._put_record(SidecarRecord(2))
    assert etcd.values == {}


def test_a_record_without_its_head_or_with_a_part_changed_is_not_taken() -> None:
    prefix = keys.provenance_record_prefix("job-1", 1, 1)
    body = SidecarRecord(1).to_json()
    head = json.dumps({"parts": 1, "sha256": "0" * 64, "size": len(body)}).encode()
    read = assemble({prefix + "part-0000": body, prefix + HEAD: head}, "job-1", keys.ROOT)
    assert read.unreadable == {(1, 1): "attempt 1 learner 1: its record's parts do not hash to its head's sha256"}
    unfinished = assemble({prefix + "part-0000": body}, "job-1", keys.ROOT)
    reason = "attempt 1 learner 1: its sidecar started and put no record (it died, or etcd was out until it ended)"
    opened = assemble({prefix + "opened": b""}, "job-1", keys.ROOT)
    assert (unfinished.unreadable, opened.unreadable) == ({(1, 1): reason}, {(1, 1): reason})
