"""When each step of a job's start happened, from what the platform itself records.

- the scheduler's history entries and the sidecars' status records, caught by a watch on etcd as they are
  written (the scheduler trims a job's history when it ends);
- the engine's container start events (their ``timeNano``), which also start the cost sampling of each
  container when a :class:`proccost.ContainerSampler` is given.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from proccost import ContainerSampler

from controller_sidecar import keys
from controller_sidecar.etcdstore import EtcdStore
from controller_sidecar.settings import EtcdSettings
from controller_sidecar.status import StatusRecord
from learnerkit.common.engine import engine
from learnerkit.pair.docker import JOB_LABEL, ROLE_LABEL

TERMINAL = {"COMPLETED", "FAILED", "HALTED", "CANCELLED"}
PHASES = ("API", "admission pass", "deploy", "sidecar start", "data download", "start file")


@dataclass
class JobTimes:
    scheduler: list[dict[str, Any]] = field(default_factory=list)
    """The scheduler's history entries: status, reason, timestamp."""
    sidecar: list[StatusRecord] = field(default_factory=list)
    started: dict[str, float] = field(default_factory=dict)
    """Role (learner, sidecar) -> when its container started."""
    containers: dict[str, str] = field(default_factory=dict)
    """Role -> container id."""

    def scheduler_at(self, reason: str) -> float | None:
        times = [_epoch(e["timestamp"]) for e in self.scheduler if e["reason"] == reason]
        return min(times) if times else None

    def ended(self) -> tuple[str, float] | None:
        """The job's terminal status and when the scheduler recorded it, once it has."""
        for entry in self.scheduler:
            if entry["status"] in TERMINAL:
                return entry["status"], _epoch(entry["timestamp"])
        return None

    def sidecar_at(self, phase: str) -> float | None:
        times = [r.timestamp.timestamp() for r in self.sidecar if r.phase.value == phase]
        return min(times) if times else None


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class Trace:
    """Watches etcd and the engine on threads of its own until closed."""

    def __init__(self, etcd: EtcdSettings, sampler: ContainerSampler | None = None) -> None:
        self.jobs: dict[str, JobTimes] = defaultdict(JobTimes)
        self.sampler = sampler
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        threading.Thread(target=self._loop.run_forever, daemon=True).start()
        self._watch = asyncio.run_coroutine_threadsafe(self._watch_etcd(etcd, ready), self._loop)
        self._events = engine().events(
            decode=True, filters={"type": "container", "event": ["start"], "label": [JOB_LABEL]}
        )
        threading.Thread(target=self._follow_engine, daemon=True).start()
        ready.wait(30)

    def job(self, job_id: str) -> JobTimes:
        with self._lock:
            return self.jobs[job_id]

    def wait_ended(self, job_ids: list[str], timeout_s: float = 900) -> dict[str, tuple[str, float]]:
        """Each job's terminal status and when the scheduler recorded it, read from the watch (no API calls,
        which would charge the scheduler for the benchmark's polling)."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                ended = {job_id: self.jobs[job_id].ended() for job_id in job_ids}
            if all(ended.values()):
                return {job_id: end for job_id, end in ended.items() if end is not None}
            if time.monotonic() > deadline:
                raise TimeoutError(f"{sum(1 for e in ended.values() if e is None)} jobs not ended in {timeout_s:.0f} s")
            time.sleep(0.05)

    async def _watch_etcd(self, settings: EtcdSettings, ready: threading.Event) -> None:
        store = await EtcdStore.connect(settings)
        root = keys.ROOT + "/"
        events = store.watch_prefix(root)
        first = asyncio.ensure_future(anext(events))
        await asyncio.sleep(0.2)  # the watch is open once its first read is done
        ready.set()
        event = await first
        while True:
            self._record(root, event.key, event.value)
            event = await anext(events)

    def _record(self, root: str, key: str, value: bytes | None) -> None:
        if value is None or "/history/" not in key:
            return
        job_id, _, leaf = key[len(root) :].partition("/history/")
        with self._lock:
            times = self.jobs[job_id]
            if leaf.startswith("job-"):
                times.scheduler.append(json.loads(value))
            else:
                times.sidecar.append(StatusRecord.from_json(value))

    def _follow_engine(self) -> None:
        for event in self._events:
            labels = event.get("Actor", {}).get("Attributes", {})
            job_id, role = labels.get(JOB_LABEL), labels.get(ROLE_LABEL)
            if not job_id or not role:
                continue
            with self._lock:
                self.jobs[job_id].started[role] = int(event["timeNano"]) / 1e9
                self.jobs[job_id].containers[role] = event["id"]
            if self.sampler is not None:
                self.sampler.watch(event["id"])

    def close(self) -> None:
        self._events.close()
        self._watch.cancel()
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0), self._loop).result(5)  # the watch has seen its cancel
        self._loop.call_soon_threadsafe(self._loop.stop)


def phases(times: JobTimes, submitted: float, answered: float, command_began: float) -> dict[str, float]:
    """Seconds per phase of one job's start; each phase runs from the end of the one before, so they add up
    to submit -> command start."""
    milestones = [
        ("API", answered),
        ("admission pass", times.scheduler_at("deploying")),
        ("deploy", times.started.get("sidecar")),
        ("sidecar start", times.sidecar_at("PENDING")),
        ("data download", times.sidecar_at("PROCESSING")),
        ("start file", command_began),
    ]
    split, last = {}, submitted
    for name, at in milestones:
        if at is None:
            raise RuntimeError(f"no time recorded for the end of {name!r}")
        at = max(at, last)
        split[name] = at - last
        last = at
    return split
