"""Fair share and victim choice benchmark, on simulated time (the admission and preemption rooms are pure).

1. Fair share: two tenants of weights 1 and 3 keep 4 nodes of 8 CPUs saturated (each with 20 jobs queued at all
   times, 1-4 CPUs, 10-90 s each) for 10 minutes of simulated time; their CPU-seconds, over several seeds, against
   the target 1:3 within 10 %. Baseline in the same run: the same workload with equal weights (target 1:1).
2. Victims: 1,000 seeded random small cases (1-3 nodes of 8 GPUs, up to 7 running jobs, some over two nodes, a
   preemptor of 1-2 learners); the choice against brute force over every subset of the eligible jobs (fewest
   victims, then least work lost): how many are the exact minimum (target 1,000). Baseline in the same run: the
   greedy search alone (``EXACT_FITS`` set to 0), and the time per choice of each.

Usage: python bench/fair_share.py [--seeds N] [--cases N]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from itertools import combinations

from learnerkit.scheduler.admission.admit import AdmissionPolicy
from learnerkit.scheduler.admission.capacity import GIB, Cluster, LearnerRequest, Node
from learnerkit.scheduler.admission.fairshare import Weights
from learnerkit.scheduler.admission.placement import Placed, place_gang
from learnerkit.scheduler.admission.queue import Job
from learnerkit.scheduler.admission.simulate import Workload, cpu_seconds
from learnerkit.scheduler.preemption import victims
from learnerkit.scheduler.preemption.victims import Holder, choose_victims, eligible, work_lost_s

MIN_RUN_S = 60.0
TOLERANCE = 0.10


def share_ratio(weights: Weights, seed: int) -> tuple[float, float]:
    used = cpu_seconds(
        [Node(f"n{i}", 8, 128 * GIB) for i in range(4)],
        AdmissionPolicy(weights=weights),
        [Workload("light"), Workload("heavy")],
        duration_s=600.0,
        seed=seed,
    )
    return used["light"], used["heavy"]


def fair_share(seeds: int) -> bool:
    print("fair share: 2 tenants saturating 32 CPUs for 600 s of simulated time, CPU-seconds per tenant")
    print(f"{'weights':<9} {'seed':>4} {'light':>9} {'heavy':>9} {'ratio':>6}  target")
    met = True
    for label, weights, target in (
        ("1:3", Weights({"light": 1.0, "heavy": 3.0}), 3.0),
        ("1:1", Weights(), 1.0),
    ):
        for seed in range(seeds):
            light, heavy = share_ratio(weights, seed)
            ratio = heavy / light
            ok = abs(ratio / target - 1) <= TOLERANCE
            met &= ok
            print(
                f"{label:<9} {seed:>4} {light:>9.0f} {heavy:>9.0f} {ratio:>6.3f}  "
                f"{target:g} +/- 10 %: {'met' if ok else 'MISSED'}"
            )
    return met


def case(rng: random.Random) -> tuple[list[Node], list[Holder], Job]:
    nodes = [Node(f"n{i}", 64, 512 * GIB, 8, "a100") for i in range(rng.randint(1, 3))]
    free = {node.name: 8 for node in nodes}
    holders = []
    for index in range(rng.randint(1, 7)):
        placed = rng.sample([n.name for n in nodes], rng.randint(1, min(2, len(nodes))))
        gpus = rng.randint(1, 4)
        if any(free[name] < gpus for name in placed):
            continue
        for name in placed:
            free[name] -= gpus
        request = LearnerRequest(1, 4 * GIB, gpus, "a100")
        holders.append(
            Holder(
                Job(f"job-{index}", "t", rng.randint(-3, 2), 0.0, (request,) * len(placed)),
                tuple(placed),
                preemptible=rng.random() < 0.8,
                running_for_s=rng.choice([None, 30.0, 600.0, 7200.0]),
                since_checkpoint_s=None if rng.random() < 0.3 else rng.uniform(0, 3600),
                preemptions=rng.randint(0, 1),
            )
        )
    learners = (LearnerRequest(1, 4 * GIB, rng.randint(1, 8), "a100"),) * rng.randint(1, 2)
    return nodes, holders, Job("job-urgent", "t", 3, 0.0, learners)


def brute_force(nodes: list[Node], holders: list[Holder], preemptor: Job) -> tuple[int, float] | None:
    pool = [h for h in holders if eligible(h, preemptor, MIN_RUN_S)]
    best: tuple[int, float] | None = None
    for size in range(1, len(pool) + 1):
        for subset in combinations(pool, size):
            gone = {h.job.job_id for h in subset}
            cluster = Cluster(nodes)
            for holder in holders:
                if holder.job.job_id not in gone:
                    for request, node in zip(holder.job.learners, holder.nodes, strict=True):
                        cluster.reserve(node, request)
            if isinstance(place_gang(cluster, preemptor.learners), Placed):
                cost = (size, sum(work_lost_s(h) for h in subset))
                best = cost if best is None or cost < best else best
    return best


def victim_choice(cases: int) -> bool:
    rng = random.Random(44)
    drawn = [case(rng) for _ in range(cases)]
    answers = [brute_force(*c) for c in drawn]
    print(f"\nvictims: {cases} random small cases against brute force over every subset")
    print(f"{'search':<8} {'exact minimum':>14} {'more victims than needed':>24} {'us per choice':>14}  target")
    met = True
    exact_fits = victims.EXACT_FITS
    for label, budget in (("exact", exact_fits), ("greedy", 0)):
        victims.EXACT_FITS = budget
        hits = more_victims = 0
        times = []
        for (nodes, holders, preemptor), best in zip(drawn, answers, strict=True):
            started = time.perf_counter()
            choice = choose_victims(nodes, holders, preemptor, min_run_s=MIN_RUN_S)
            times.append(time.perf_counter() - started)
            got = None
            if choice is not None:
                chosen = [h for h in holders if h.job.job_id in choice.victims]
                got = (len(chosen), sum(work_lost_s(h) for h in chosen))
            same = got is not None and best is not None and got[0] == best[0] and abs(got[1] - best[1]) < 1e-6
            hits += same or got == best
            more_victims += got is not None and best is not None and got[0] > best[0]
        victims.EXACT_FITS = exact_fits
        target = f"{cases} exact" if label == "exact" else "baseline"
        print(f"{label:<8} {hits:>14} {more_victims:>24} {statistics.median(times) * 1e6:>14.0f}  {target}")
        if label == "exact":
            met &= hits == cases
    return met


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--cases", type=int, default=1000)
    args = parser.parse_args()
    shares = fair_share(args.seeds)
    choices = victim_choice(args.cases)
    print(f"\nfair share target: {'met' if shares else 'MISSED'}; victims target: {'met' if choices else 'MISSED'}")


if __name__ == "__main__":
    main()
