"""What a waiting job waits on and what would free it, read off a real admission pass's reasons."""

from __future__ import annotations

from learnerkit.scheduler.admission.admit import AdmissionPolicy, AdmissionState, Quota
from learnerkit.scheduler.admission.capacity import GIB, LearnerRequest, Node
from learnerkit.scheduler.admission.freeing import kind_of, what_frees
from learnerkit.scheduler.admission.queue import Job
from learnerkit.scheduler.admission.reasons import BackingOff, OverQuota, WaitingForGpus


def job(job_id: str, tenant: str, cpus: float, *, priority: int = 0, at: float = 0.0) -> Job:
    return Job(job_id, tenant, priority, at, (LearnerRequest(cpus, GIB),))


def test_each_waiting_job_says_what_it_waits_on_and_what_frees_it() -> None:
    policy = AdmissionPolicy(quotas={"team-a": Quota(jobs=1)})
    state = AdmissionState([Node("n1", 4.0, 16 * GIB)], policy)
    for queued in (
        job("a1", "team-a", 1.0, priority=5),
        job("a2", "team-a", 1.0, priority=5, at=1),
        job("b1", "team-b", 3.5, priority=1, at=2),
        job("b2", "team-b", 1.0, priority=0, at=3),
    ):
        assert state.submit(queued) is None
    result = state.schedule(now=10.0)
    assert [a.job_id for a in result.admitted] == ["a1"]
    said = {e.job.job_id: (kind_of(e.reason), what_frees(e.reason, state.cluster)) for e in state.queued()}
    assert said == {
        "a2": ("quota", "quota: 1 running job of yours must end"),
        "b1": ("node fit", "0.5 CPUs more free on a node"),
        "b2": ("priority", "the 1 job ahead waiting for CPU-only room must start first"),
    }
    assert [e.job.job_id for e in state.queued()] == ["a2", "b1", "b2"], "the next pass's order"
    assert state.in_use()["team-a"].jobs == 1 and "team-b" not in state.in_use()


def test_quota_and_gpu_sentences() -> None:
    state = AdmissionState([Node("g1", 8.0, 64 * GIB, 4, "a100")])
    cpu = OverQuota("team-a", 4000, 3000, 0, 2000, "CPU")
    assert what_frees(cpu, state.cluster) == "quota: your running jobs must free 1 CPU"
    held = OverQuota("team-a", 2, 1, 1, 1, "running-jobs")
    assert what_frees(held, state.cluster) == "quota: 1 job of yours ahead in the queue must start and end"
    gpus = WaitingForGpus("a100", 3, 1, 1, "g1", 1)
    assert (kind_of(gpus), what_frees(gpus, state.cluster)) == ("node fit", "2 a100 GPUs more free on one node")
    gang = WaitingForGpus("a100", 6, 2, 2, "g1", 3)
    assert kind_of(gang) == "gang"
    assert what_frees(gang, state.cluster) == "3 a100 GPUs more free in all, each learner's share on one node"
    backoff = BackingOff(1, 20.0)
    assert (kind_of(backoff), what_frees(backoff, state.cluster)) == ("backoff", "its retry in 20 s")
    assert kind_of("waiting for 1 GPU(s): 0 free") == "waiting"
