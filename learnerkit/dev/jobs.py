"""Jobs still running on the dev services when ``learnerkit dev down`` stops them.

A pair (learner and sidecar on the local engine) whose sidecar talks to the dev etcd or S3 would be left
retrying a store that is gone. So ``down`` first finds every such pair (its sidecar's ``ETCD_ENDPOINTS`` or
``S3_ENDPOINT_URL`` is one of the services'), asks its job to halt (the job's ``halt`` key: the learner
checkpoints, the sidecar stores what there is), waits up to :data:`HALT_WAIT_S` for the sidecars to end, and
then removes every such pair, containers and volume, ended or not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import docker.errors

from controller_sidecar.endpoints import ETCD_ENDPOINTS, S3_ENDPOINT_URL
from learnerkit.common.engine import engine
from learnerkit.common.errors import LearnerkitError
from learnerkit.dev.polling import poll_until
from learnerkit.pair.docker import (
    JOB_LABEL,
    NOT_ENDED_STATES,
    PAIR_LABEL,
    ROLE_LABEL,
    PairHandle,
    pairs_of,
    remove_pair,
)
from learnerkit.pair.etcd import etcd_settings, halt_jobs

HALT_WAIT_S = 60.0
"""How long the halted sidecars get to store and end; what still runs then is removed."""


@dataclass(frozen=True)
class EndedJob:
    job_id: str
    pairs: int
    how: str
    """``halted`` (every sidecar ended after the halt), or why the pairs were torn down running."""


def jobs_on(variables: Mapping[str, str]) -> dict[str, list[PairHandle]]:
    """The pairs on the engine whose sidecar talks to the services in ``variables`` (``learnerkit dev env``),
    by job id."""
    wanted = _addresses(variables.get(ETCD_ENDPOINTS, "")) | _addresses(variables.get(S3_ENDPOINT_URL, ""))
    api = engine().api
    found: dict[str, set[str]] = {}
    for item in api.containers(all=True, filters={"label": f"{ROLE_LABEL}=sidecar"}):
        try:
            env = api.inspect_container(item["Id"])["Config"]["Env"] or []
        except docker.errors.NotFound:
            continue
        values = dict(entry.split("=", 1) for entry in env if "=" in entry)
        used = _addresses(values.get(ETCD_ENDPOINTS, "")) | _addresses(values.get(S3_ENDPOINT_URL, ""))
        if wanted & used:
            labels = item.get("Labels") or {}
            found.setdefault(labels.get(JOB_LABEL, ""), set()).add(labels.get(PAIR_LABEL, ""))
    return {job: [h for h in pairs_of(job) if h.name in names] for job, names in sorted(found.items()) if job}


def halt_and_remove(variables: Mapping[str, str], wait_s: float = HALT_WAIT_S) -> list[EndedJob]:
    """Halt the jobs still running on the services, wait for their sidecars, remove their pairs; what was done."""
    jobs = jobs_on(variables)
    running = {job for job, handles in jobs.items() if any(_running(handle) for handle in handles)}
    why_not: str | None = None
    if running:
        try:
            halt_jobs(etcd_settings(variables[ETCD_ENDPOINTS]), running)
        except (LearnerkitError, KeyError) as e:
            why_not = f"torn down running: the halt could not be asked ({e})"
    sidecars = [handle.sidecar for job in running for handle in jobs[job] if handle.sidecar]
    ended = why_not is None and poll_until(lambda: not any(_sidecar_runs(s) for s in sidecars), wait_s, 0.5)
    report = []
    for job, handles in jobs.items():
        for handle in handles:
            remove_pair(handle)
        if job not in running:
            how = "had ended"
        elif ended:
            how = "halted"
        else:
            how = why_not or f"torn down running: its sidecars had not ended {wait_s:.0f} s after the halt"
        report.append(EndedJob(job, len(handles), how))
    return report


def _running(handle: PairHandle) -> bool:
    return any(state in NOT_ENDED_STATES for state in handle.states.values())


def _sidecar_runs(container_id: str) -> bool:
    try:
        state = engine().api.inspect_container(container_id)["State"]
    except docker.errors.NotFound:
        return False
    return bool(state.get("Running")) or state.get("Status") == "created"


def _addresses(text: str) -> set[str]:
    """``host:port`` of each comma-separated endpoint (with or without a scheme)."""
    found = set()
    for part in text.split(","):
        part = part.strip()
        if part:
            found.add(urlsplit(part if "://" in part else f"//{part}").netloc)
    return found
