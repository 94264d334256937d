"""The sidecar's provenance record through etcd, the channel the tenant cannot write.

The copy in the results bucket (``provenance/sidecar.json``) is the tenant's to read and to rewrite; the scheduler
signs only what the sidecar put here, under the job's etcd prefix (``provenance/records/attempt-<k>/learner-<n>/``),
which only the platform's etcd users reach (docs/security.md). A record of many result files may exceed etcd's
request limit (1.5 MiB by default), so it goes in parts of at most :data:`PART_BYTES`, one request each, and a
``head`` naming their count and the whole record's SHA-256 is written last: a reader takes a record only when its
head is there and the parts hash to it, so a sidecar killed half-way leaves no record, never a truncated one.

Before anything else, once connected, the sidecar puts ``opened`` there: a learner whose sidecar opened its record
and never finished it is named as missing, while one whose sidecar never started (a deploy that failed) stored
nothing and is not (a sidecar uploads nothing before it is connected to etcd).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from controller_sidecar import keys
from controller_sidecar.etcdstore import EtcdStore
from controller_sidecar.provenancerecord import RecordError, SidecarRecord

PART_BYTES = 512 * 1024
"""Well below etcd's default request limit (1.5 MiB) with the key and the request's framing."""
HEAD = "head"
OPENED = "opened"
_PLACE = re.compile(r"attempt-(\d+)/learner-(\d+)/$")


def attempt_of(results_prefix: str) -> int | None:
    """The attempt the scheduler planned these outputs for (``.../attempt-<k>/learner-<n>/``); None for outputs
    of another layout (an evaluation's), which have no job provenance record."""
    found = _PLACE.search(results_prefix)
    return int(found.group(1)) if found else None


def record_parts(record: SidecarRecord) -> tuple[list[bytes], bytes]:
    """The record's parts and its head."""
    body = record.to_json()
    parts = [body[i : i + PART_BYTES] for i in range(0, len(body), PART_BYTES)] or [b""]
    head = {"parts": len(parts), "sha256": hashlib.sha256(body).hexdigest(), "size": len(body)}
    return parts, json.dumps(head, sort_keys=True).encode()


async def open_record(etcd: EtcdStore, job_id: str, attempt: int, learner_id: int, root: str) -> None:
    await etcd.put(keys.provenance_record_prefix(job_id, attempt, learner_id, root) + OPENED, b"")


async def put_record(etcd: EtcdStore, job_id: str, attempt: int, record: SidecarRecord, root: str) -> None:
    """Parts first, then the head; a head of an earlier write is removed first, so no reader pairs it with new
    parts."""
    prefix = keys.provenance_record_prefix(job_id, attempt, record.learner_id, root)
    parts, head = record_parts(record)
    await etcd.delete(prefix + HEAD)
    for index, part in enumerate(parts):
        await etcd.put(f"{prefix}part-{index:04d}", part)
    await etcd.put(prefix + HEAD, head)


@dataclass(frozen=True)
class RecordsRead:
    records: dict[tuple[int, int], SidecarRecord]
    """By (attempt, learner)."""
    unreadable: dict[tuple[int, int], str]
    """Records opened but not finished, or not whole, or not readable, and why."""


def assemble(found: Mapping[str, bytes], job_id: str, root: str) -> RecordsRead:
    """The records among ``found`` (the keys under the job's provenance prefix and their values)."""
    base = keys.provenance_prefix(job_id, root) + "records/"
    grouped: dict[tuple[int, int], dict[str, bytes]] = {}
    for key, value in found.items():
        folder, _, leaf = key.removeprefix(base).rpartition("/")
        matched = _PLACE.fullmatch(folder + "/") if key.startswith(base) else None
        if matched is not None:
            grouped.setdefault((int(matched.group(1)), int(matched.group(2))), {})[leaf] = value
    records: dict[tuple[int, int], SidecarRecord] = {}
    unreadable: dict[tuple[int, int], str] = {}
    for place, leaves in sorted(grouped.items()):
        where = f"attempt {place[0]} learner {place[1]}"
        try:
            records[place] = _record(leaves, where)
        except RecordError as e:
            unreadable[place] = str(e)
    return RecordsRead(records, unreadable)


def _record(leaves: Mapping[str, bytes], where: str) -> SidecarRecord:
    if HEAD not in leaves:
        raise RecordError(f"{where}: its sidecar started and put no record (it died, or etcd was out until it ended)")
    try:
        head = json.loads(leaves[HEAD])
        count, sha256 = int(head["parts"]), str(head["sha256"])
    except (KeyError, TypeError, ValueError) as e:
        raise RecordError(f"{where}: its record's head is malformed: {e}") from e
    body = b"".join(leaves.get(f"part-{index:04d}", b"") for index in range(count))
    if hashlib.sha256(body).hexdigest() != sha256:
        raise RecordError(f"{where}: its record's parts do not hash to its head's sha256")
    return SidecarRecord.from_json(body, where)
