"""Scheduler admission benchmark: one full scheduling pass over 10,000 queued jobs and 1,000 GPU nodes.

The scenario (seeded): 1,000 nodes of 3 GPU types, 10,000 jobs from 8 tenants with GPU quotas, 4
priorities, 75% single-learner and 25% 2-4 learner jobs, 0-8 GPUs per learner. Figures, as the median of
a few passes, each on a freshly built state:
- the first pass on an empty cluster (fills it, then every remaining job gets its reason) (target <= 1 s);
- the next pass on the now full cluster (what every later pass costs while nothing ends);
and two baselines measured in the same run: a naive first-fit pass (linear scan of the nodes per learner,
no index, no head-of-line blocking) and merely sorting the queue.

Usage: python bench/scheduler_admission.py [--passes N] [--seed S]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from typing import TypeVar

from learnerkit.scheduler.admission.admit import AdmissionPolicy, AdmissionState, PassResult, Quota
from learnerkit.scheduler.admission.capacity import GIB, LearnerRequest, Node
from learnerkit.scheduler.admission.queue import Job

GPU_TYPES = (("nvidia-a100", 8), ("nvidia-v100", 8), ("nvidia-t4", 4))
TENANTS = 8
TARGET_S = 1.0
T = TypeVar("T")


def scenario(seed: int) -> tuple[list[Node], list[Job], AdmissionPolicy]:
    rng = random.Random(seed)
    nodes = []
    for i in range(1000):
        gpu_type, gpus = GPU_TYPES[i % len(GPU_TYPES)]
        nodes.append(Node(f"node-{i}", rng.choice((48, 64, 96)), rng.choice((256, 512, 768)) * GIB, gpus, gpu_type))
    quotas = {f"tenant-{t}": Quota(gpus=rng.choice((200, 400, 800, 1600))) for t in range(TENANTS)}
    jobs = []
    for j in range(10_000):
        gpu_type, max_gpus = rng.choice(GPU_TYPES)
        count = 1 if rng.random() < 0.75 else rng.randint(2, 4)
        gpus = min(max_gpus, rng.choice((0, 1, 1, 2, 2, 4, 4, 8)))
        learner = LearnerRequest(rng.choice((1, 2, 4, 8)), rng.choice((8, 16, 32, 64)) * GIB, gpus, gpu_type)
        jobs.append(Job(f"job-{j}", f"tenant-{rng.randrange(TENANTS)}", rng.randrange(4), float(j), (learner,) * count))
    return nodes, jobs, AdmissionPolicy(quotas=quotas)


def naive_pass(nodes: list[Node], jobs: list[Job], policy: AdmissionPolicy) -> int:
    """First fit, scanning every node for every learner: what the index and the blocking avoid."""
    free = {n.name: [n.millicpus, n.memory_bytes, n.gpus] for n in nodes}
    types = {n.name: n.gpu_type for n in nodes}
    in_use: dict[str, int] = {}
    admitted = 0
    for job in sorted(jobs, key=lambda j: j.queue_key):
        quota = policy.quota(job.tenant).gpus
        if quota is not None and in_use.get(job.tenant, 0) + job.gpus > quota:
            continue
        taken: list[tuple[str, LearnerRequest]] = []
        for learner in job.learners:
            for name, f in free.items():
                if (
                    (not learner.gpus or types[name] == learner.gpu_type)
                    and f[0] >= learner.millicpus
                    and f[1] >= learner.memory_bytes
                    and f[2] >= learner.gpus
                ):
                    f[0] -= learner.millicpus
                    f[1] -= learner.memory_bytes
                    f[2] -= learner.gpus
                    taken.append((name, learner))
                    break
            else:
                for name, done in taken:
                    free[name][0] += done.millicpus
                    free[name][1] += done.memory_bytes
                    free[name][2] += done.gpus
                taken = []
                break
        if taken:
            in_use[job.tenant] = in_use.get(job.tenant, 0) + job.gpus
            admitted += 1
    return admitted


def median_s(passes: int, prepare: Callable[[], Callable[[], T]]) -> tuple[float, T]:
    """The median seconds of ``passes`` runs, each prepared untimed, and the last run's result."""
    times = []
    for _ in range(passes):
        run = prepare()
        started = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--seed", type=int, default=4)
    args = parser.parse_args()
    nodes, jobs, policy = scenario(args.seed)

    def fresh_state() -> AdmissionState:
        state = AdmissionState(nodes, policy)
        for job in jobs:
            state.submit(job)
        return state

    def first_pass() -> Callable[[], PassResult]:
        state = fresh_state()
        return lambda: state.schedule(1e6)

    def next_pass() -> Callable[[], PassResult]:
        state = fresh_state()
        state.schedule(1e6)
        return lambda: state.schedule(1e6 + 1)

    first_s, result = median_s(args.passes, first_pass)
    next_s, _ = median_s(args.passes, next_pass)
    naive_s, naive_admitted = median_s(max(1, args.passes // 2), lambda: lambda: naive_pass(nodes, jobs, policy))
    sort_s, _ = median_s(args.passes, lambda: lambda: sorted(jobs, key=lambda j: j.queue_key))

    print(f"scenario: {len(nodes)} nodes ({', '.join(t for t, _ in GPU_TYPES)}), {len(jobs)} queued jobs")
    counts = f"admitted {len(result.admitted)}, rejected {len(result.rejected)}"
    print(f"first pass:  {first_s:.3f} s  ({counts}, target <= {TARGET_S:.1f} s)")
    print(f"next pass:   {next_s:.3f} s  (cluster full)")
    print(f"naive first-fit pass (no index, no blocking): {naive_s:.3f} s (admitted {naive_admitted})")
    print(f"sorting the queue only: {sort_s:.4f} s")
    print(f"ratio first pass / naive: {first_s / naive_s:.2f}; first pass / sort: {first_s / sort_s:.1f}")
    print("PASS" if first_s <= TARGET_S else "FAIL", f"first pass {first_s:.3f} s vs target {TARGET_S:.1f} s")


if __name__ == "__main__":
    main()
