"""Start, watch and remove one learner pair on a Docker engine.

Order matters: the volume, then the learner (it waits for ``control/start``), then the sidecar with the
learner's cgroup mounted read-only. The learner runs hardened: non-root, read-only root file system, no
capabilities, no new privileges, no credentials, a pids limit, and no network unless the job has several
learners. The sidecar runs as its own user (``SIDECAR_UID``), with CPU, memory and pids limits, and gets the
host network (etcd and S3 listen on the host's loopback here) and the secrets.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

import docker.errors

from learner.paths import DIR_DEFAULTS, JOB_DIR, SHARED_DIR
from learnerkit.common.engine import EngineError, engine, gpu_request
from learnerkit.common.engineimages import engine_socket
from learnerkit.pair.cgroups import SIDECAR_MOUNT, cgroup_mounts, shares_our_pids
from learnerkit.pair.jobdisk import JobDiskSettings, backing_file, job_volume, remove_volume
from learnerkit.pair.spec import LEARNER_UID, SIDECAR_CPUS, SIDECAR_MEMORY_BYTES, SIDECAR_UID, PairSpec

PAIR_LABEL = "io.learnerkit.pair"
JOB_LABEL = "io.learnerkit.job-id"
ROLE_LABEL = "io.learnerkit.role"
RESTARTS_LABEL = "io.learnerkit.restarts"
"""On a sidecar made again (:func:`restart_sidecar`): how many times, so a restarted scheduler keeps counting."""
LEARNER_RUN_AS = f"{LEARNER_UID}:0"
SIDECAR_RUN_AS = f"{SIDECAR_UID}:0"
DATA_DIR = DIR_DEFAULTS["DATA_DIR"]
STOP_MARGIN_S = 10
"""A stop waits this much longer than the sidecar's shutdown deadline (or the learner's halt grace)."""
STATE_SETTLE_S = 5.0
"""How long a learner this host shows no process of may still read as running on an engine that numbers processes
otherwise before its cgroup is taken to be out of this host's sight (a remote engine)."""
STATE_POLL_S = 0.02


@dataclass(frozen=True)
class DockerPlacement:
    """Where a pair's learner sits on the engine: its network and names (jobs of 2+ learners), its host name, the
    job's shared volume, extra labels."""

    network: str | None = None
    """The learners' network; None gives the learner no network at all (single-learner jobs)."""
    hostname: str | None = None
    network_aliases: tuple[str, ...] = ()
    """Further names the learner answers to on ``network`` (the rendezvous names of distributed jobs)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    shared_volume: str | None = None
    """The job's volume that every learner of the job mounts read-write at ``SHARED_DIR`` (FfDL's job folder)."""
    disk: JobDiskSettings = field(default_factory=JobDiskSettings)
    """How a ``/job`` sized to the spec's ``storage`` is made (:mod:`learnerkit.pair.jobdisk`)."""
    disk_owner: str = "run-local"
    """The folder of ``disk.state_dir`` that holds the backing file: the scheduler instance's id."""


STARTED_STATES = frozenset({"running", "paused", "restarting"})
"""Engine states of a container that runs (has started and not ended)."""
NOT_ENDED_STATES = STARTED_STATES | {"created"}


@dataclass(frozen=True)
class PairHandle:
    name: str
    volume: str
    learner: str
    """Container IDs."""
    sidecar: str
    sidecar_restarts: int = 0
    """How many times the sidecar was made again (its :data:`RESTARTS_LABEL`)."""
    states: Mapping[str, str] = field(default_factory=dict)
    """Container ID -> the engine's state of it (``created``, ``running``, ``exited``...) when it was listed
    (:func:`pairs_of`); empty for a pair just started."""


def _hardened(spec: PairSpec, placement: DockerPlacement, role: str, user: str) -> dict[str, Any]:
    return {
        "read_only": True,
        "tmpfs": {"/tmp": "rw,size=512m,mode=1777"},
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "user": user,
        "detach": True,
        "labels": {**placement.labels, PAIR_LABEL: spec.name, JOB_LABEL: spec.job_id, ROLE_LABEL: role},
    }


def learner_options(spec: PairSpec, placement: DockerPlacement, volume: str) -> dict[str, Any]:
    env = {
        "JOB_ID": spec.job_id,
        "LEARNER_ID": str(spec.learner_id),
        "NUM_LEARNERS": str(spec.num_learners),
        "GPU_COUNT": str(spec.gpus),
        "LEARNER_HALT_GRACE": f"{spec.halt_grace_s:g}",
        **spec.learner_env,
    }
    command: list[str] | None = list(spec.command) if isinstance(spec.command, tuple) else None
    if isinstance(spec.command, str):
        env["LEARNER_COMMAND"] = spec.command
    options: dict[str, Any] = {
        **_hardened(spec, placement, "learner", LEARNER_RUN_AS),
        "image": spec.learner_image,
        "name": f"{spec.name}-learner",
        "command": command,
        "environment": env,
        "volumes": {
            volume: {"bind": JOB_DIR, "mode": "rw"},
            **({spec.data_mount: {"bind": DATA_DIR, "mode": "ro"}} if spec.data_mount else {}),
            **({placement.shared_volume: {"bind": SHARED_DIR, "mode": "rw"}} if placement.shared_volume else {}),
        },
        "shm_size": "1g",
        "stop_signal": "SIGTERM",
    }
    if placement.network is None:
        options["network_mode"] = "none"
        if placement.hostname:
            options["hostname"] = placement.hostname
    else:
        options["network"] = placement.network
        options["hostname"] = placement.hostname or f"{spec.name}-learner"
        aliases = [options["hostname"], *placement.network_aliases]
        options["networking_config"] = {placement.network: engine().api.create_endpoint_config(aliases=aliases)}
    options["pids_limit"] = spec.pids.learner
    if spec.memory_bytes:
        options["mem_limit"] = spec.memory_bytes
        options["memswap_limit"] = spec.memory_bytes
    if spec.cpus:
        options["nano_cpus"] = int(spec.cpus * 1e9)
    if spec.gpus:
        options["device_requests"] = [gpu_request(spec.gpus)]
    return options


def sidecar_options(
    spec: PairSpec, placement: DockerPlacement, volume: str, cgroups: Mapping[str, str] | None
) -> dict[str, Any]:
    """``cgroups``: the learner's cgroup folders, mounted read-only so the sidecar sees the learner end; empty
    where the engine's host has none to give; None when the learner has ended already: the sidecar then gets
    ``learner_cgroup_dir`` with nothing in it, which reads as a learner that is gone."""
    config = dict(spec.sidecar_config)
    if cgroups is None or cgroups:
        config["learner_cgroup_dir"] = SIDECAR_MOUNT
    return {
        **_hardened(spec, placement, "sidecar", SIDECAR_RUN_AS),
        "image": spec.sidecar_image,
        "name": f"{spec.name}-sidecar",
        "environment": {
            **spec.endpoints.env(),
            "JOB_ID": spec.job_id,
            "LEARNER_ID": str(spec.learner_id),
            "NUM_LEARNERS": str(spec.num_learners),
            "LEARNERKIT_SIDECAR_CONFIG_JSON": json.dumps(config, sort_keys=True),
        },
        "volumes": {
            volume: {"bind": JOB_DIR, "mode": "rw"},
            **{host: {"bind": inside, "mode": "ro"} for inside, host in spec.sidecar_mounts.items()},
        },
        "mounts": _cgroup_mounts(cgroups),
        "network_mode": "host",
        "stop_signal": "SIGTERM",
        "nano_cpus": int(SIDECAR_CPUS * 1e9),
        "mem_limit": SIDECAR_MEMORY_BYTES,
        "memswap_limit": SIDECAR_MEMORY_BYTES,
        "pids_limit": spec.pids.sidecar,
    }


def start_pair(spec: PairSpec, placement: DockerPlacement | None = None) -> PairHandle:
    """Create the volume and both containers; on any failure remove what was made, then raise."""
    placement = placement or DockerPlacement()
    client = engine()
    made: list[Any] = []
    try:
        # The placement's labels too: a scheduler that dies before the containers exist finds the volume again.
        labels = {**placement.labels, PAIR_LABEL: spec.name, JOB_LABEL: spec.job_id}
        volume = _job_volume(client, spec, placement, labels)
        made.append(volume)
        learner = client.containers.run(**learner_options(spec, placement, volume.name))
        made.append(learner)
        sidecar = _run_sidecar(spec, placement, volume.name, learner)
        made.append(sidecar)
    except docker.errors.APIError as e:
        for obj in reversed(made[1:]):
            with suppress(docker.errors.NotFound, docker.errors.APIError):
                obj.remove(force=True)
        if made:
            with suppress(docker.errors.APIError):
                remove_volume(client.api, made[0].name)
        raise EngineError(f"starting learner pair {spec.name}: {e.explanation}") from e
    return PairHandle(name=spec.name, volume=volume.name, learner=learner.id, sidecar=sidecar.id)


def _job_volume(client: Any, spec: PairSpec, placement: DockerPlacement, labels: Mapping[str, str]) -> Any:
    """The pair's ``/job`` volume, sized to the spec's ``storage`` when it has one."""
    name = f"{spec.name}-job"
    path = backing_file(placement.disk, placement.disk_owner, name)
    return job_volume(client, name, labels, spec.job_id, spec.storage_bytes, placement.disk, path)


def _learner_cgroups(learner: Any) -> dict[str, str] | None:
    """The running learner's cgroup folders (empty when this host has none of its); None once it has ended.

    The engine records a container's end a moment after its process is gone. Where the engine numbers processes
    as this host does, a learner whose process is gone has ended, whatever the engine says. Elsewhere it is asked
    again until it says which (within ``STATE_SETTLE_S``); only a process this host never shows (a remote engine's)
    gives nothing to mount: the sidecar is then started without the cgroup, and a learner that had just ended would
    leave it waiting.
    """
    deadline = time.monotonic() + STATE_SETTLE_S
    local: bool | None = None  # asked once, and only of a learner this host shows no process of
    while True:
        learner.reload()
        state = learner.attrs["State"]
        if not state.get("Running"):
            return None
        mounts = cgroup_mounts(int(state["Pid"]))
        if mounts is None:
            return None  # ending: some of its folders are gone already
        if mounts:
            return mounts
        if local is None:
            local = shares_our_pids(engine_socket())
        if local:
            return None
        if time.monotonic() > deadline:
            return mounts
        time.sleep(STATE_POLL_S)


def _run_sidecar(spec: PairSpec, placement: DockerPlacement, volume: str, learner: Any) -> Any:
    """The sidecar, watching the learner's cgroup; a learner that ends before (an image without learner-run
    runs its command at once) leaves the sidecar an empty cgroup folder, so it ends the job FAILED."""
    return _run_watching(
        learner, f"{spec.name}-sidecar", lambda cgroups: sidecar_options(spec, placement, volume, cgroups)
    )


def _run_watching(learner: Any, name: str, options: Callable[[Mapping[str, str] | None], dict[str, Any]]) -> Any:
    """Run the sidecar ``name`` with ``options`` for the learner's cgroup folders (None once it has ended)."""
    client = engine()
    cgroups = _learner_cgroups(learner)
    try:
        return client.containers.run(**options(cgroups))
    except docker.errors.APIError:
        # The learner ended between the read of its cgroup and the mount: its folders are gone.
        if not cgroups or _learner_cgroups(learner) is not None:
            raise
    with suppress(docker.errors.NotFound):
        client.containers.get(name).remove(force=True)
    return client.containers.run(**options(None))


def _cgroup_mounts(cgroups: Mapping[str, str] | None) -> list[Any]:
    # Mounts, not binds: a folder that vanished fails the start instead of being created again.
    return [
        docker.types.Mount(target=inside, source=host, type="bind", read_only=True)
        for host, inside in (cgroups or {}).items()
    ]


def restart_sidecar(handle: PairHandle) -> str:
    """Make the pair's ended sidecar again as it was made (image, environment, user, labels, limits) on the kept
    ``/job`` volume, whose ``control/`` holds its progress: the new one goes on from there (one killed while
    storing stores again). The learner's cgroup is mounted again while the learner runs. The new container's id.
    """
    client = engine()
    try:
        old = client.containers.get(handle.sidecar)
        learner = client.containers.get(handle.learner)
        config, host = old.attrs["Config"], old.attrs["HostConfig"]
        made = {
            "image": config["Image"],
            "name": old.name,
            "environment": config["Env"],
            "labels": {**config["Labels"], RESTARTS_LABEL: str(handle.sidecar_restarts + 1)},
            "user": config["User"],
            "stop_signal": config.get("StopSignal") or "SIGTERM",
            "read_only": host["ReadonlyRootfs"],
            "tmpfs": host["Tmpfs"],
            "cap_drop": host["CapDrop"],
            "security_opt": host["SecurityOpt"],
            "network_mode": host["NetworkMode"],
            "nano_cpus": host["NanoCpus"],
            "mem_limit": host["Memory"],
            "memswap_limit": host["MemorySwap"],
            "pids_limit": host["PidsLimit"],
            "volumes": {handle.volume: {"bind": JOB_DIR, "mode": "rw"}},
            "detach": True,
        }
        old.remove(force=True)
        return str(_run_watching(learner, old.name, lambda cgroups: {**made, "mounts": _cgroup_mounts(cgroups)}).id)
    except docker.errors.APIError as e:
        raise EngineError(f"starting the sidecar of {handle.name} again: {e.explanation}") from e


def container(container_id: str) -> Any | None:
    try:
        return engine().containers.get(container_id)
    except docker.errors.NotFound:
        return None


LOG_TAIL_LINES = 20


def log_tail(container_id: str) -> str:
    """The container's last log lines (stdout and stderr), empty when it is gone."""
    try:
        tail: bytes = engine().api.logs(container_id, stdout=True, stderr=True, tail=LOG_TAIL_LINES)
    except docker.errors.NotFound:
        return ""
    return tail.decode(errors="replace")


def container_state(container_id: str) -> dict[str, Any] | None:
    """The container's ``State`` as the engine inspects it; None when it is gone."""
    try:
        return dict(engine().api.inspect_container(container_id)["State"])
    except docker.errors.NotFound:
        return None


def exit_code(container_id: str, listed_state: str | None = None) -> int | None:
    """The container's exit status, or None while it runs (or when it is gone). ``listed_state``, the state a
    listing showed, spares the engine an inspect while the container has not ended."""
    state = ended_state(container_id, listed_state)
    return None if state is None else int(state["ExitCode"])


def ended_state(container_id: str, listed_state: str | None = None) -> dict[str, Any] | None:
    """The engine's ``State`` of a container that has ended (``ExitCode``, ``OOMKilled``...), or None while it
    runs (or when it is gone); ``listed_state`` as for :func:`exit_code`."""
    if listed_state in NOT_ENDED_STATES:
        return None
    state = container_state(container_id)
    if state is None or state.get("Running") or state.get("Status") == "created":
        return None
    return state


def has_started(container_id: str, listed_state: str | None = None) -> bool:
    """Whether the container has started (it may have ended since); ``listed_state`` as for :func:`exit_code`."""
    if listed_state in STARTED_STATES:
        return True
    if listed_state == "created":
        return False
    state = container_state(container_id)
    return state is not None and bool(state.get("StartedAt", "").replace("0001-01-01T00:00:00Z", ""))


def remove_pair(handle: PairHandle) -> None:
    """Remove both containers and the volume; nothing of the pair is left behind."""
    api = engine().api
    for container_id in (handle.sidecar, handle.learner):
        if container_id:  # a half-made pair has no sidecar yet
            with suppress(docker.errors.NotFound):
                api.remove_container(container_id, force=True)
    remove_volume(api, handle.volume)


def pairs_of(job_id: str) -> list[PairHandle]:
    """Every pair of a job that exists on the engine, with its containers' states: one listing, no inspect."""
    found: dict[str, dict[str, str]] = {}
    states: dict[str, dict[str, str]] = {}
    restarts: dict[str, int] = {}
    for item in engine().api.containers(all=True, filters={"label": f"{JOB_LABEL}={job_id}"}):
        labels = item.get("Labels") or {}
        pair = labels.get(PAIR_LABEL, "")
        found.setdefault(pair, {})[labels.get(ROLE_LABEL, "")] = item["Id"]
        states.setdefault(pair, {})[item["Id"]] = str(item.get("State", ""))
        if labels.get(ROLE_LABEL) == "sidecar" and labels.get(RESTARTS_LABEL, "").isdigit():
            restarts[pair] = int(labels[RESTARTS_LABEL])
    return [
        PairHandle(
            name=pair,
            volume=f"{pair}-job",
            learner=roles.get("learner", ""),
            sidecar=roles.get("sidecar", ""),
            sidecar_restarts=restarts.get(pair, 0),
            states=states[pair],
        )
        for pair, roles in sorted(found.items())
    ]
