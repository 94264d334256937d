"""The Docker backend, the embedded default: every learner a sidecar + learner pair on the local engine.

Single-learner jobs run the learner with no network at all. Jobs of several learners get one internal network
(no route out) on which each learner answers to its host name ``lk-<job>-<n>`` and to the rendezvous names the
Kubernetes backend's headless Service gives (``lk-<job>-<n>.lk-<job>``), so the variables are the same on both
backends. A job of several learners has one volume they all mount at ``/job/shared`` (FfDL's job folder);
teardown removes it with the rest. A single learner's job folder is a folder of its own pair volume, made by
its sidecar: no volume, and no container to make one writable, for a learner with nobody to share with.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace

import docker.errors
import requests

from learnerkit.common.engine import EngineError, engine
from learnerkit.pair.docker import (
    JOB_LABEL,
    NOT_ENDED_STATES,
    DockerPlacement,
    ended_state,
    exit_code,
    has_started,
    log_tail,
    pairs_of,
    remove_pair,
    restart_sidecar,
    start_pair,
)
from learnerkit.pair.jobdisk import (
    JobDiskError,
    JobDiskSettings,
    backing_file,
    job_volume,
    remove_volume,
    sweep_leftovers,
)
from learnerkit.pair.spec import PairSpec
from learnerkit.scheduler.admission.capacity import Node
from learnerkit.scheduler.backends.deployment import JobDeployment, distributed_env
from learnerkit.scheduler.backends.protocol import LearnerEnd, NodeHealth, SidecarStates
from learnerkit.scheduler.errors import BackendError

NODE_NAME = "local"
MANAGED_LABEL = "io.learnerkit.managed-by"
MANAGER = "learnerkit-scheduler"
"""What the scheduler deploys carries this label; pairs run by hand (``sidecar run-local``) do not."""
INSTANCE_LABEL = "io.learnerkit.scheduler-instance"
"""Which scheduler instance deployed the pair: a restarted scheduler removes as orphans only its own."""


def network_name(job_id: str) -> str:
    return f"lk-{job_id}-net"


def placement(job: JobDeployment, learner: PairSpec, disk: JobDiskSettings | None = None) -> DockerPlacement:
    """Learners of one job, when there are several, share its volume and its internal network under their names."""
    labels = {MANAGED_LABEL: MANAGER, INSTANCE_LABEL: job.instance}
    disk = disk or JobDiskSettings()
    if not job.networked:
        return DockerPlacement(labels=labels, hostname=learner.name, disk=disk, disk_owner=job.instance)
    return DockerPlacement(
        network=network_name(job.job_id),
        hostname=learner.name,
        network_aliases=(f"{learner.name}.{job.name}",),
        labels=labels,
        shared_volume=job.shared_name,
        disk=disk,
        disk_owner=job.instance,
    )


def local_gpus() -> tuple[int, str | None]:
    """The NVIDIA GPUs of this host (count and product name), from ``nvidia-smi``; none without it."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return 0, None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return 0, None
    names = [line.strip() for line in out.splitlines() if line.strip()]
    return len(names), (names[0].replace(" ", "-") if names else None)


class DockerBackend:
    deploys_held = True
    """The engine reserves nothing: a held pair's idle learner and downloading sidecar take no room from the
    victims but what they use (see :mod:`learnerkit.scheduler.core.holding`)."""

    def __init__(self, disk: JobDiskSettings | None = None) -> None:
        self.disk = disk or JobDiskSettings()
        """Where ``/job`` volumes sized to ``storage`` keep their backing files (:mod:`learnerkit.pair.jobdisk`)."""

    def nodes(self) -> list[Node]:
        """The engine's host as one node: its CPUs, memory and GPUs."""
        with _engine_errors("reading the engine's capacity"):
            info = engine().info()
        gpus, gpu_type = local_gpus()
        return [Node(NODE_NAME, float(info["NCPU"]), int(info["MemTotal"]), gpus, gpu_type)]

    def node_health(self) -> dict[str, NodeHealth]:
        """The engine's host, always there and ready: a scheduler that reaches the engine runs beside it."""
        return {NODE_NAME: NodeHealth()}

    def deploy(self, job: JobDeployment) -> None:
        """Start every learner pair not running yet (a redeploy after a scheduler restart adds nothing)."""
        existing = {handle.name for handle in pairs_of(job.job_id)}
        try:
            if job.networked:
                self._ensure_network(job)
                self._ensure_shared_volume(job)
            for learner in job.learners:
                if learner.name not in existing:
                    spec = replace(learner, learner_env={**learner.learner_env, **distributed_env(job, learner)})
                    start_pair(spec, placement(job, learner, self.disk))
        except (EngineError, docker.errors.DockerException) as e:
            # DockerException: also the shared volume's helper container failing (ContainerError, ImageNotFound).
            self.teardown(job.job_id)
            raise BackendError(f"deploying job {job.job_id}: {e}") from e

    def started(self, job_id: str, learners: int) -> bool:
        """Whether every learner pair of the job exists and both its containers have started."""
        with _engine_errors(f"inspecting job {job_id}"):
            handles = pairs_of(job_id)
            return len(handles) == learners and all(
                bool(h.learner and h.sidecar)
                and has_started(h.learner, h.states.get(h.learner))
                and has_started(h.sidecar, h.states.get(h.sidecar))
                for h in handles
            )

    def sidecars(self, job_id: str) -> SidecarStates:
        """Which sidecar containers ended (with their status) and which still run, from one listing."""
        exited: dict[int, int] = {}
        running: set[int] = set()
        log_tails: dict[int, str] = {}
        restarts: dict[int, int] = {}
        with _engine_errors(f"inspecting job {job_id}"):
            for handle in pairs_of(job_id):
                if not handle.sidecar:
                    continue
                code = exit_code(handle.sidecar, handle.states.get(handle.sidecar))
                learner_id = int(handle.name.rsplit("-", 1)[1])
                if handle.sidecar_restarts:
                    restarts[learner_id] = handle.sidecar_restarts
                if code is None:
                    running.add(learner_id)
                    continue
                exited[learner_id] = code
                if code != 0:
                    log_tails[learner_id] = log_tail(handle.sidecar)
        return SidecarStates(exited, frozenset(running), log_tails=log_tails, restarts=restarts)

    def learners_ended(self, job_id: str) -> dict[int, LearnerEnd]:
        """How each learner container that has ended ended (the sidecar itself also notices it, from the learner's
        cgroup). One listing; only the containers it shows ended are inspected."""
        ended: dict[int, LearnerEnd] = {}
        with _engine_errors(f"inspecting job {job_id}"):
            for handle in pairs_of(job_id):
                state = ended_state(handle.learner, handle.states.get(handle.learner)) if handle.learner else None
                if state is not None:
                    end = LearnerEnd(int(state["ExitCode"]), bool(state.get("OOMKilled")))
                    ended[int(handle.name.rsplit("-", 1)[1])] = end
        return ended

    def learners_running(self, job_id: str) -> set[int]:
        """Learners whose learner container has not ended (created, running, paused, restarting): one listing."""
        with _engine_errors(f"inspecting job {job_id}"):
            return {
                int(handle.name.rsplit("-", 1)[1])
                for handle in pairs_of(job_id)
                if handle.learner and handle.states.get(handle.learner) in NOT_ENDED_STATES
            }

    def restart_sidecar(self, job_id: str, learner_id: int) -> bool:
        """Make the learner's ended sidecar again on the pair's kept volume (:func:`restart_sidecar`)."""
        with _engine_errors(f"restarting the sidecar of job {job_id} learner {learner_id}"):
            for handle in pairs_of(job_id):
                if handle.name == f"lk-{job_id}-{learner_id}" and handle.sidecar and handle.learner:
                    restart_sidecar(handle)
                    return True
        return False

    def teardown(self, job_id: str) -> None:
        """Remove every container, volume and network of the job."""
        with _engine_errors(f"tearing down job {job_id}"):
            for handle in pairs_of(job_id):
                remove_pair(handle)
            client = engine()
            for volume in client.volumes.list(filters={"label": f"{JOB_LABEL}={job_id}"}):
                remove_volume(client.api, volume.name)
            for network in client.networks.list(names=[network_name(job_id)]):
                with suppress(docker.errors.NotFound):
                    network.remove()

    def job_ids(self, instance: str) -> set[str]:
        """Jobs this scheduler instance deployed that have anything on the engine (orphans after a restart): a
        container, or a shared volume or network alone (a crash between making them and starting the pairs).

        Called once at the scheduler's start, before it deploys anything: it also releases the instance's ``/job``
        backing files whose volume is gone (a crash between making the file and the volume, or removing them)."""
        mine = {"label": [f"{MANAGED_LABEL}={MANAGER}", f"{INSTANCE_LABEL}={instance}"]}
        with _engine_errors("listing the scheduler's containers, volumes and networks"):
            client = engine()
            sweep_leftovers(client.api, self.disk, instance)
            found = [c.labels for c in client.containers.list(all=True, filters=mine)]
            found += [v.attrs.get("Labels") or {} for v in client.volumes.list(filters=mine)]
            found += [n.attrs.get("Labels") or {} for n in client.networks.list(filters=mine)]
        return {
            labels[JOB_LABEL]
            for labels in found
            if labels.get(INSTANCE_LABEL) == instance and labels.get(MANAGED_LABEL) == MANAGER and labels.get(JOB_LABEL)
        }

    def _ensure_shared_volume(self, job: JobDeployment) -> None:
        """The job's shared volume, made group-writable for the learners (user 1000, group 0) by a short root
        container of the sidecar image that can do nothing else: no network, no capabilities, nothing but chmod.
        Sized like each learner's ``/job`` to the manifest's ``storage`` (it is on the host's disk too)."""
        client = engine()
        found = client.volumes.list(filters={"name": job.shared_name, "label": f"{JOB_LABEL}={job.job_id}"})
        if any(volume.name == job.shared_name for volume in found):
            return
        path = backing_file(self.disk, job.instance, job.shared_name)
        storage = job.learners[0].storage_bytes
        job_volume(client, job.shared_name, _owned_by(job), job.job_id, storage, self.disk, path)
        client.containers.run(
            image=job.learners[0].sidecar_image,
            entrypoint=["chmod", "2775", "/shared"],
            user="0:0",
            network_mode="none",
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            read_only=True,
            volumes={job.shared_name: {"bind": "/shared", "mode": "rw"}},
            labels={MANAGED_LABEL: MANAGER},
            remove=True,
        )

    def _ensure_network(self, job: JobDeployment) -> None:
        client = engine()
        if not client.networks.list(names=[network_name(job.job_id)]):
            client.networks.create(
                network_name(job.job_id), driver="bridge", internal=True, labels=_owned_by(job), check_duplicate=True
            )


def _owned_by(job: JobDeployment) -> dict[str, str]:
    """The labels of the job's shared volume and network: the orphan sweep finds them without any container."""
    return {JOB_LABEL: job.job_id, MANAGED_LABEL: MANAGER, INSTANCE_LABEL: job.instance}


@contextmanager
def _engine_errors(action: str) -> Iterator[None]:
    """The engine's errors as BackendError: the scheduler retries them on its next step."""
    try:
        yield
    except (docker.errors.DockerException, requests.exceptions.RequestException, JobDiskError) as e:
        raise BackendError(f"{action}: {e}") from e
