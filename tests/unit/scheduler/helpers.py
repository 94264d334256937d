"""Small constructors for scheduler tests."""

from __future__ import annotations

from learnerkit.scheduler.admission.capacity import GIB, LearnerRequest, Node
from learnerkit.scheduler.admission.queue import Job

A100 = "nvidia-a100"
V100 = "nvidia-v100"


def gpu_node(name: str, gpus: int = 8, gpu_type: str = A100, cpus: float = 64, memory_gib: int = 512) -> Node:
    return Node(name, cpus, memory_gib * GIB, gpus, gpu_type)


def cpu_node(name: str, cpus: float = 32, memory_gib: int = 128) -> Node:
    return Node(name, cpus, memory_gib * GIB)


def learner(gpus: int = 0, gpu_type: str | None = A100, cpus: float = 1, memory_gib: int = 4) -> LearnerRequest:
    return LearnerRequest(cpus, memory_gib * GIB, gpus, gpu_type if gpus else None)


def job(
    job_id: str,
    *learners: LearnerRequest,
    tenant: str = "team-a",
    priority: int = 0,
    submitted_at: float = 0.0,
) -> Job:
    return Job(job_id, tenant, priority, submitted_at, learners or (learner(1),))
