"""Sweeps benchmark: ASHA with promotion on checkpoints against the alternatives, and the decision core's speed.

Part of the benchmark the issue (22) describes, on simulated trials (the decision core driven by
`learnerkit.scheduler.sweeps.simulate`, no containers): a deterministic synthetic learner whose objective
at a budget follows from its sampled parameters, with the same sampled configurations for every algorithm:
- ASHA's best against the best of random search with full training, and the learner-units each spends;
- ASHA against successive halving that restarts promoted configurations from scratch (Katib's Hyperband):
  the same decisions, the units each costs;
- the arrival-order case: the best configuration enters its first rung behind two better-looking ones;
  this ASHA finds it, the stop-only rule loses it;
- the decision core: 10,000 simulated trials, the time of every decision (report + fill), against 1 ms;
- the samplers (bench/sweepsamplers.py): TPE against random search over 10 seeds, PBT against the best
  fixed-parameter trial on an objective whose best learning rate changes during training.

With --real (bench/sweeprun.py): ASHA and random search with full training on the same synthetic learner in
learner containers with the real sidecar, under `learnerkit scheduler serve`: best results, steps trained
and recomputed (from the metric histories), wall time, and the platform's CPU-seconds (sidecars, scheduler,
engine) per trial start or promotion. Needs etcd and the PyTorch and sidecar images (built if missing).

With --arrival (bench/sweeparrival.py): the arrival-order case with ASHA in containers, the stop-only rule on the
first-rung durations measured there.

With --digits (bench/sweepdigits.py): a real training problem, a small PyTorch network on scikit-learn's digits
(written to CSV in the robustness image and uploaded to the dev object store), ASHA against successive halving
from scratch and random search with full training, in the same learner containers under the same scheduler; ASHA's
learner promotes in place (`learner.next_budget`) where the scheduler promotes it at its rung's end.

With --scale and --scale-local (bench/sweepscale.py): a sweep of 200 trials at concurrency 200, on a simulated
backend over a real etcd against concurrency 1 (every decision stored, the heap flat over 100 steps), and under
`learnerkit scheduler serve` on the container engine (listed within 2 minutes, most trials queued); --scale-only
runs them alone. A missed target is printed as MISSED and the exit status is 1.

With --in-place (bench/sweepinplace.py; --in-place-only runs it alone): the platform's CPU-seconds (sidecars and
scheduler) per promotion in place against a promotion by a new deploy, in the same run, with the scheduler in this
process and each learner pair this checkout's sidecar and learner-run as host processes (no images, no Docker).

Usage: python bench/sweeps.py [--trials N] [--seed S] [--speed-trials N] [--real [--real-trials N]]
       [--arrival] [--digits [--digits-trials N] [--digits-rungs MIN,MAX] [--digits-widths W,W,W]
       [--digits-passes N]]
       [--scale] [--scale-local [--sidecar-image REF]] [--scale-only] [--in-place [--in-place-runs N]] [--in-place-only]
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import time

from sweepcurves import synthetic_loss
from sweepsamplers import pbt_against_fixed, tpe_against_random

from learnerkit.scheduler.sweeps.decisions import Action
from learnerkit.scheduler.sweeps.rungbook import Plan, RungBook
from learnerkit.scheduler.sweeps.sampling import trial_configs
from learnerkit.scheduler.sweeps.simulate import simulate
from learnerkit.scheduler.sweeps.space import Parameter, ParamType, SearchSpace
from learnerkit.scheduler.sweeps.spec import AlgorithmName, Goal, Objective

SPACE = SearchSpace(
    (
        Parameter("lr", ParamType.LOG_UNIFORM, low=1e-4, high=0.1),
        Parameter("width", ParamType.CHOICE, values=(16, 32, 64)),
        Parameter("dropout", ParamType.UNIFORM, low=0.0, high=0.5),
        Parameter("layers", ParamType.INTEGER, low=1, high=4),
    )
)
LOSS = Objective("val_loss", Goal.MINIMIZE)
RUNGS = (10, 30, 90, 270)
ETA = 3
DECISION_LIMIT_S = 0.001


def reachable_rungs(trials: int) -> tuple[int, ...]:
    """The last of `RUNGS` that ASHA's top 1/eta lets some trial reach with `trials` trials: rung k (from 0) is
    reached by floor(trials / eta^k) of them, so 9 trials at eta 3 get rungs 30, 90, 270 (with all four, the
    last rung would hold no result and there would be no best to compare). The full budget stays the same."""
    count = 1
    while count < len(RUNGS) and ETA**count <= trials:
        count += 1
    return RUNGS[-count:]


def comparison(trials: int, seed: int, concurrency: int) -> None:
    if trials < 1:
        raise SystemExit(f"--trials: at least 1; got {trials}")
    configs = trial_configs(SPACE, seed=seed, trials=trials, grid=False)

    def curve(trial: int, budget: int) -> float:
        return synthetic_loss(configs[trial], budget)

    rungs = reachable_rungs(trials)
    asha = simulate(Plan(AlgorithmName.ASHA, LOSS, rungs, trials, concurrency, eta=ETA), curve)
    full = simulate(Plan(AlgorithmName.RANDOM, LOSS, rungs[-1:], trials, concurrency), curve)
    best_asha = min(asha.book.ranked[-1])[0]
    best_full = min(full.book.ranked[-1])[0]
    units_asha, units_full = sum(asha.trained.values()), sum(full.trained.values())
    print(f"synthetic learner, {trials} trials, rungs {rungs}, eta {ETA}, concurrency {concurrency}, seed {seed}")
    print(f"  best val_loss: ASHA {best_asha:.5f}, random with full training {best_full:.5f}")
    print(f"  ASHA's best / random's best:                      {best_asha / best_full:.4f}  (target <= 1.01)")
    print(f"  ASHA's learner-units / random's:                  {units_asha / units_full:.3f}   (target <= 0.35)")
    scratch = units_asha / asha.units_from_scratch
    print(f"  ASHA's units / the same decisions from scratch:   {scratch:.3f}   (target <= 0.8)")
    promotions = sum(1 for d in asha.decisions if d.action is Action.PROMOTE)
    print(f"  promotions: {promotions}, each resumed from its trial's own checkpoint")


def arrival_order() -> None:
    """Trial 2 is the best at the full budget but arrives at rung 1 third, behind two better-looking trials."""
    first_rung = [0.10, 0.20, 0.30, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9]
    final = [0.5, 0.6, 0.01, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9]

    def curve(trial: int, budget: int) -> float:
        return first_rung[trial] if budget == 1 else final[trial]

    print("arrival order: the best configuration enters rung 1 behind two better-looking ones")
    for label, stop_only in (("ASHA, promotion on checkpoints", False), ("stop-only rule", True)):
        plan = Plan(AlgorithmName.ASHA, LOSS, (1, 3), 9, 3, eta=3, stop_only=stop_only)
        sim = simulate(plan, curve, seconds_per_unit=lambda trial: 1.5 if trial == 2 else 1.0)
        best = min(sim.book.ranked[-1])
        verdict = "found" if best[1] == 2 else "lost"
        print(f"  {label:32s} best trial {best[1]} ({best[0]:.2f}): the late bloomer is {verdict}")


def decision_speed(trials: int, seed: int) -> None:
    """Every decision's CPU time (the thread's clock: this shared machine preempts the process for whole
    milliseconds, which the wall clock would charge to the decision) and its wall time."""
    configs = trial_configs(SPACE, seed=seed, trials=trials, grid=False)
    plan = Plan(AlgorithmName.ASHA, LOSS, (1, 3, 9, 27, 81, 243), trials, 100, eta=ETA)
    book = RungBook(plan)
    cpu: list[float] = []
    wall: list[float] = []
    running: list[tuple[int, int]] = []
    decisions = book.fill()
    while True:
        running += [(d.trial, d.budget) for d in decisions if d.action in (Action.START, Action.PROMOTE)]
        if not running:
            break
        trial, budget = running.pop(0)
        value = synthetic_loss(configs[trial], budget)
        started_cpu, started_wall = time.thread_time(), time.perf_counter()
        decisions = book.report(trial, value) + book.fill()
        cpu.append(time.thread_time() - started_cpu)
        wall.append(time.perf_counter() - started_wall)
    print(f"decision core: {trials} trials, {len(cpu)} decisions (a rung result reported, then free slots filled)")
    for label, times in (("CPU", sorted(cpu)), ("wall", sorted(wall))):
        median, p99 = statistics.median(times), times[int(len(times) * 0.99)]
        print(
            f"  {label:4s} median {median * 1e6:7.1f} us, p99 {p99 * 1e6:7.1f} us, max {times[-1] * 1e6:8.1f} us;"
            f" max / 1 ms: {times[-1] / DECISION_LIMIT_S:.3f} (target < 1)"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=81)
    parser.add_argument("--concurrency", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--speed-trials", type=int, default=10_000)
    parser.add_argument("--real", action="store_true", help="also run real learners (bench/sweeprun.py)")
    parser.add_argument("--real-trials", type=int, default=9)
    parser.add_argument("--real-rungs", default="1,9", help="the real runs' budget min,max in steps")
    parser.add_argument("--real-step-s", type=float, default=0.05, help="the real learner's seconds per step")
    parser.add_argument("--arrival", action="store_true", help="the arrival-order case in containers")
    parser.add_argument("--digits", action="store_true", help="also the digits network (bench/sweepdigits.py)")
    parser.add_argument("--digits-trials", type=int, default=9)
    parser.add_argument("--digits-rungs", default="3,27", help="the digits runs' budget min,max in epochs")
    parser.add_argument("--digits-widths", default="16,32,64", help="the digits network's hidden widths to choose from")
    parser.add_argument(
        "--digits-passes", type=int, default=1, help="passes over the digits training set in one epoch (heavier epochs)"
    )
    parser.add_argument("--scale", action="store_true", help="200 trials at concurrency 200, simulated (etcd)")
    parser.add_argument("--scale-local", action="store_true", help="200 trials at concurrency 200, scheduler serve")
    parser.add_argument("--scale-only", action="store_true", help="the --scale cases alone, not the others")
    parser.add_argument("--sidecar-image", default="learnerkit/sidecar:0.1.0", help="--scale-local's sidecar")
    parser.add_argument("--sampler-trials", type=int, default=40, help="TPE and random search's trials per seed")
    parser.add_argument("--sampler-seeds", type=int, default=10)
    parser.add_argument("--population", type=int, default=8, help="PBT's population")
    parser.add_argument("--in-place", action="store_true", help="CPU per promotion in place (bench/sweepinplace.py)")
    parser.add_argument("--in-place-runs", type=int, default=1, help="--in-place: rounds of its three sweeps")
    parser.add_argument("--in-place-only", action="store_true", help="--in-place alone, not the others")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a killed run still stops its servers and containers
    missed: list[str] = []
    if args.scale or args.scale_local:
        from sweepscale import local_default_scale, local_report, simulated_report, simulated_scale  # etcd, engine

        if args.scale:
            missed += simulated_report(simulated_scale())
        if args.scale_local:
            missed += local_report(local_default_scale(args.sidecar_image))
    if args.in_place or args.in_place_only:
        from sweepinplace import in_place_figures  # etcd, SeaweedFS, host processes

        if not in_place_figures(args.in_place_runs):
            missed.append("the platform's CPU per promotion in place")
    if not args.scale_only and not args.in_place_only:
        comparison(args.trials, args.seed, args.concurrency)
        arrival_order()
        decision_speed(args.speed_trials, args.seed)
        tpe_against_random(args.sampler_trials, args.sampler_seeds)
        pbt_against_fixed(args.population, 5)
    if args.real:
        from sweeprun import real_comparison, report  # imported only here: the engine, etcd, the images

        low, high = (int(n) for n in args.real_rungs.split(","))
        runs = real_comparison(args.real_trials, args.concurrency, args.seed, (low, high), args.real_step_s)
        report(runs, args.real_step_s)

    if args.arrival:
        from sweeparrival import arrival_in_containers  # the engine, etcd, the images

        arrival_in_containers()
    if args.digits:
        from sweepdigits import digits_comparison, digits_report  # the engine, etcd, the images

        low, high = (int(n) for n in args.digits_rungs.split(","))
        widths = tuple(int(n) for n in args.digits_widths.split(","))
        if args.digits_passes < 1:
            parser.error(f"--digits-passes: at least 1; got {args.digits_passes}")
        digits = digits_comparison(
            args.digits_trials, args.concurrency, args.seed, (low, high), widths, args.digits_passes
        )
        missed += digits_report(digits)
    for miss in missed:
        print(f"MISSED: {miss}", file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
