"""Sidecar benchmark: every figure against a baseline measured in the same run.

- smoke-training step throughput with the sidecar / without it (target >= 0.98);
- sidecar RSS, peak over a whole job (target <= 60 MB);
- sidecar CPU seconds until its first status is in etcd (target <= 0.4), and what importing each client
  costs inside the image (bench/sidecar_start.py);
- halt-to-HALTED latency minus the checkpoint upload time (target <= 1 s);
- status propagation learner -> etcd -> watcher, p50 and p99 (target p99 <= 250 ms);
- log scraping lines/s with zero loss (target >= 100k), against a bare read-and-split of the same file;
- S3 download throughput / bare boto3 TransferManager on the same data (target >= 0.9).

It starts its own etcd and SeaweedFS on loopback and needs the built PyTorch and sidecar images
(`make images`). Usage: python bench/sidecar.py [--quick] [--start-only | --throughput-only] [--runs N]
[--tensorboard] [--sidecar-image IMAGE] (--start-only: just the start cost and RSS figures; --throughput-only:
just the step throughput and the sidecar's CPU while the learner trains; --tensorboard: every job has FfDL's
`evaluation_metrics: {type: tensorboard}`, so the sidecar loads and runs its event reader; --sidecar-image:
that image, not a build of this tree)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from boto3.s3.transfer import TransferConfig
from proccost import cgroup_dir, read_cgroup_cpu
from s3transfer.manager import TransferManager
from sidecar_start import CLIENTS, first_status_cpu, import_cost

from controller_sidecar import keys
from controller_sidecar.download import download_prefix
from controller_sidecar.endpoints import Endpoints
from controller_sidecar.etcdstore import EtcdStore
from controller_sidecar.logship import LogShipper
from controller_sidecar.retry import Backoff
from controller_sidecar.s3store import S3Store
from controller_sidecar.settings import S3Location
from controller_sidecar.status import Phase
from learnerkit.common import engine
from learnerkit.dev.etcd import EtcdServer
from learnerkit.dev.s3 import SeaweedServer
from learnerkit.pair.docker import PairHandle, exit_code, remove_pair, start_pair
from learnerkit.pair.etcd import job_history, learner_status, request_halt
from learnerkit.pair.spec import PairSpec
from learnerkit_build.builds.sidecarimage import build_sidecar
from learnerkit_build.imagetest.containers import LearnerRun, make_job_folder, running, wait_exit
from learnerkit_build.imagetest.smokedata import write_smoke_dataset
from learnerkit_build.recipes.render import BuildInputs

REPO = Path(__file__).resolve().parents[1]
LEARNER_IMAGE = "learnerkit/pytorch:2.13-cpu-py3.11"
SMOKE = ("python", "/opt/learner/smoke/train.py")
MB = 1 << 20


@dataclass(frozen=True)
class Figure:
    name: str
    value: float
    baseline: float | None
    unit: str
    target: str
    ok: bool

    def line(self) -> str:
        base = f"{self.baseline:>12.3f}" if self.baseline is not None else " " * 12
        ratio = f"{self.value / self.baseline:>8.3f}" if self.baseline else " " * 8
        verdict = "ok" if self.ok else "MISSED"
        return f"{self.name:<44}{self.value:>12.3f}{base}{ratio}  {self.unit:<8}{self.target:<16}{verdict}"


@contextmanager
def servers(scratch: Path) -> Iterator[tuple[EtcdServer, SeaweedServer]]:
    etcd = EtcdServer("/usr/bin/etcd", scratch / "etcd" / "data")
    s3 = SeaweedServer(scratch / "s3")
    etcd.start()
    s3.start()
    try:
        yield etcd, s3
    finally:
        etcd.stop()
        s3.stop()


def step_times(metrics_jsonl: bytes) -> list[float]:
    """When each training step ended, from the learner's own timestamps."""
    return [json.loads(line)["time"] for line in metrics_jsonl.splitlines() if line.strip()]


def steps_per_second(metrics_jsonl: bytes, skip: int = 20) -> float:
    """Training steps per second from the learner's own timestamps, past the warm-up steps."""
    times = step_times(metrics_jsonl)[skip:]
    return (len(times) - 1) / (times[-1] - times[0])


class Bench:
    def __init__(
        self, etcd: EtcdServer, s3: SeaweedServer, sidecar_image: str, scratch: Path, *, tensorboard: bool = False
    ) -> None:
        self.etcd, self.s3, self.sidecar_image, self.scratch = etcd, s3, sidecar_image, scratch
        self.evaluation_metrics = {"evaluation_metrics": {"type": "tensorboard"}} if tensorboard else {}
        self.client: Any = s3.client()
        for bucket in ("bench-data", "bench-results"):
            self.client.create_bucket(Bucket=bucket)
        self.client.upload_file(str(write_smoke_dataset(scratch / "smoke")), "bench-data", "smoke/train.csv")

    def spec(self, command: tuple[str, ...], env: dict[str, str] | None = None, data: str = "smoke/") -> PairSpec:
        job_id = f"bench-{uuid.uuid4().hex[:8]}"
        return PairSpec(
            job_id=job_id,
            learner_id=1,
            learner_image=LEARNER_IMAGE,
            sidecar_image=self.sidecar_image,
            command=command,
            sidecar_config={
                "results": {"bucket": "bench-results", "prefix": f"{job_id}/"},
                "data": {"mode": "copy", "bucket": "bench-data", "prefix": data},
                "timing": {"halt_grace_s": 20, "log_ship_interval_s": 2.0},
                "metrics_port": 0,
                **self.evaluation_metrics,
            },
            endpoints=Endpoints(
                self.etcd.endpoint,
                s3_endpoint_url=self.s3.endpoint_url,
                s3_access_key=self.s3.access_key,
                s3_secret_key=self.s3.secret_key,
            ),
            learner_env=env or {},
            halt_grace_s=20,
        )

    def wait_phase(self, job_id: str, phases: set[Phase], timeout: float = 600) -> Phase:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = learner_status(self.etcd.settings(), job_id, 1)
            if status is not None and status.phase in phases:
                return status.phase
            time.sleep(0.02)
        raise TimeoutError(f"{job_id} did not reach {phases}")

    def throughput_without_sidecar(self, steps: int) -> float:
        job = make_job_folder(Path(tempfile.mkdtemp(dir=self.scratch)))
        write_smoke_dataset(job / "data")
        (job / "control" / "start").write_text("")
        with running(LearnerRun(LEARNER_IMAGE, job, [*SMOKE, "--steps", str(steps), "--checkpoint-every", "100"])) as c:
            status = wait_exit(c, 600)
        if status != 0:
            raise RuntimeError(f"the bare learner exited {status}")
        return steps_per_second((job / "logs" / "metrics.jsonl").read_bytes())

    def throughput_with_sidecar(self, steps: int) -> tuple[float, float]:
        """Steps/s in a pair, and the sidecar container's CPU seconds per second while the learner trained (its
        cgroup, between the first and the last step). Measured as the bare run is: the engine is only waited on
        until the learner ends, and the cgroup is read from its file, so the paired run carries no load of the
        benchmark's own (polling etcd and the engine during the run cost the paired figure about 3 %)."""
        spec = self.spec((*SMOKE, "--steps", str(steps), "--checkpoint-every", "100"))
        handle = start_pair(spec)
        try:
            readings = sample_cgroup_cpu(handle.sidecar)
            engine.engine().api.wait(handle.learner, timeout=600)
            phase = self.wait_phase(spec.job_id, {Phase.COMPLETED, Phase.FAILED, Phase.HALTED})
            if phase is not Phase.COMPLETED:
                raise RuntimeError(f"the paired run ended {phase}")
            body = self.client.get_object(Bucket="bench-results", Key=f"{spec.job_id}/logs/metrics.jsonl")["Body"]
            metrics = body.read()
            return steps_per_second(metrics), cpu_rate(readings(), step_times(metrics))
        finally:
            remove_pair(handle)

    def start_cost(self, steps: int) -> tuple[float, float]:
        """The sidecar's CPU seconds until its first status is in etcd, and its peak RSS in MB over the job."""
        spec = self.spec((*SMOKE, "--steps", str(steps), "--checkpoint-every", "100"))
        first = first_status_cpu(self.etcd.settings(), spec.job_id, f"{spec.name}-sidecar")
        handle = start_pair(spec)
        try:
            peak = sample_peak_rss(handle)
            phase = self.wait_phase(spec.job_id, {Phase.COMPLETED, Phase.FAILED, Phase.HALTED})
            if phase is not Phase.COMPLETED:
                raise RuntimeError(f"the paired run ended {phase}")
            return first.result(timeout=60), peak()
        finally:
            remove_pair(handle)

    def halt_and_propagation(self, watch_steps: int, halts: int) -> tuple[list[float], list[float]]:
        """Halt-to-HALTED minus the upload time (one figure per run), and metric propagation latencies in ms.

        The first run also watches ``watch_steps`` metric updates before its halt; the others halt after
        30 steps.
        """
        latencies: list[float] = []
        halted: list[float] = []
        for run in range(halts):
            spec = self.spec(
                (*SMOKE, "--steps", "5000", "--checkpoint-every", "50"), env={"SMOKE_MIN_STEP_SECONDS": "0.1"}
            )
            handle = start_pair(spec)
            try:
                self.wait_phase(spec.job_id, {Phase.PROCESSING})
                seen = watch_metrics(self.etcd, spec.job_id, watch_steps if run == 0 else 30)
                request_halt(self.etcd.settings(), spec.job_id)
                halted_at = time.time()  # the halt key is written (etcd acknowledged the put)
                self.wait_phase(spec.job_id, {Phase.HALTED, Phase.FAILED, Phase.COMPLETED})
                history = {record.phase: record for record in job_history(self.etcd.settings(), spec.job_id)}
                # HALTED minus the upload time (STORING -> HALTED: checkpoints, the last log chunk) is the
                # moment the sidecar reported STORING; both timestamps are the sidecar's, on this host's clock.
                halted.append(history[Phase.STORING].timestamp.timestamp() - halted_at)
                if run == 0:
                    key = f"{spec.job_id}/logs/metrics.jsonl"
                    lines = self.client.get_object(Bucket="bench-results", Key=key)["Body"].read().splitlines()
                    written = {json.loads(line)["values"]["loss"]: json.loads(line)["time"] for line in lines}
                    latencies = [(at - written[loss]) * 1000 for at, loss in seen if loss in written]
            finally:
                remove_pair(handle)
        return halted, latencies

    def log_scraping(self, lines: int) -> tuple[float, float]:
        """LogShipper lines/s over a written log (zero loss checked), and a bare read+split of the same file."""
        log = self.scratch / "scrape" / "learner.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("wb") as f:
            for i in range(lines):
                f.write(b"step %d loss 0.%06d accuracy 0.9\n" % (i, i))
        data = log.read_bytes()
        started = time.perf_counter()
        count = len(data.split(b"\n")) - 1
        bare = count / (time.perf_counter() - started)

        shipped: list[bytes] = []
        seen = 0

        def on_lines(lines: list[bytes]) -> None:
            nonlocal seen
            seen += len(lines)

        async def sink(_name: str, chunk: bytes) -> None:
            shipped.append(chunk)

        async def ship() -> float:
            shipper = LogShipper(log, log.parent / "state.json", sink, interval_s=0.5, on_lines=on_lines)
            stop = asyncio.Event()
            stop.set()
            began = time.perf_counter()
            await shipper.run(stop)
            return time.perf_counter() - began

        seconds = asyncio.run(ship())
        if seen != lines or b"".join(shipped) != data:
            raise RuntimeError(f"log scraping lost data: {seen} of {lines} lines, {len(b''.join(shipped))} bytes")
        return lines / seconds, bare

    def download(self, files: int, size_mb: int) -> tuple[float, float]:
        """MB/s of download_prefix, and of boto3's TransferManager, on the same objects."""
        body = bytes(range(256)) * (size_mb * MB // 256)
        for i in range(files):
            self.client.put_object(Bucket="bench-data", Key=f"bulk/f-{i:03d}.bin", Body=body)
        total_mb = files * size_mb
        settings = self.s3.settings(max_concurrency=8, multipart_mb=64)
        store = S3Store(settings)

        def ours() -> float:
            dest = Path(tempfile.mkdtemp(dir=self.scratch))
            started = time.perf_counter()
            download_prefix(
                store,
                S3Location("bench-data", "bulk/"),
                dest / "data",
                state_file=dest / "state.json",
                concurrency=8,
                backoff=Backoff(),
            )
            return total_mb / (time.perf_counter() - started)

        def bare() -> float:
            dest = Path(tempfile.mkdtemp(dir=self.scratch))
            client = boto3.client(
                "s3",
                endpoint_url=self.s3.endpoint_url,
                aws_access_key_id=self.s3.access_key,
                aws_secret_access_key=self.s3.secret_key,
                region_name="us-east-1",
            )
            started = time.perf_counter()
            with TransferManager(client, TransferConfig(max_concurrency=8, multipart_threshold=64 * MB)) as manager:
                futures = [
                    manager.download("bench-data", f"bulk/f-{i:03d}.bin", str(dest / f"f-{i:03d}.bin"))
                    for i in range(files)
                ]
                for future in futures:
                    future.result()
            return total_mb / (time.perf_counter() - started)

        runs = [(ours(), bare()) for _ in range(2)]
        return max(r[0] for r in runs), max(r[1] for r in runs)


def sidecar_pid(handle: PairHandle) -> int | None:
    """The sidecar's Python process on this host: the child of the container's tini."""
    container = engine.engine().containers.get(handle.sidecar)
    container.reload()
    tini = int(container.attrs["State"]["Pid"])
    try:
        children = Path(f"/proc/{tini}/task/{tini}/children").read_text().split()
    except OSError:
        return None
    return int(children[0]) if children else None


def sample_peak_rss(handle: PairHandle) -> Callable[[], float]:
    """Sample the sidecar's RSS in a thread until it exits; returns a function giving the peak in MB."""
    peak = [0.0]

    def sample() -> None:
        while exit_code(handle.sidecar) is None:
            pid = sidecar_pid(handle)
            if pid is not None:
                try:
                    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                        if line.startswith("VmRSS:"):
                            peak[0] = max(peak[0], int(line.split()[1]) / 1024)
                except OSError:
                    pass
            time.sleep(0.2)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()

    def result() -> float:
        thread.join(timeout=30)
        return peak[0]

    return result


def sample_cgroup_cpu(container_id: str) -> Callable[[], list[tuple[float, float]]]:
    """(wall time, CPU-s) of a container's cgroup every 0.25 s until the cgroup is gone, in a thread: file reads
    only, no engine or etcd calls. Returns a function giving the readings once the container has ended."""
    folder = cgroup_dir("cpuacct", container_id) or cgroup_dir("cpu", container_id)
    readings: list[tuple[float, float]] = []

    def sample() -> None:
        while folder is not None and (used := read_cgroup_cpu(folder)) is not None:
            readings.append((time.time(), used))
            time.sleep(0.25)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()

    def result() -> list[tuple[float, float]]:
        thread.join(timeout=30)
        return readings

    return result


def cpu_rate(readings: list[tuple[float, float]], steps: list[float]) -> float:
    """CPU-s per second over the readings taken between the first and the last training step (0 when fewer
    than two were)."""
    inside = [(at, used) for at, used in readings if steps and steps[0] <= at <= steps[-1]]
    if len(inside) < 2:
        return 0.0
    (t0, c0), (t1, c1) = inside[0], inside[-1]
    return (c1 - c0) / (t1 - t0)


def watch_metrics(etcd: EtcdServer, job_id: str, count: int) -> list[tuple[float, float]]:
    """(time seen, loss) for the next ``count`` updates of the learner's metrics key."""
    key = keys.learner_metrics_key(job_id, 1)

    async def watch() -> list[tuple[float, float]]:
        store = await EtcdStore.connect(etcd.settings())
        seen: list[tuple[float, float]] = []
        try:
            async for event in store.watch_prefix(key):
                if event.value is not None:
                    seen.append((time.time(), json.loads(event.value)["loss"]))
                if len(seen) >= count:
                    return seen
        finally:
            await store.close()
        return seen

    return asyncio.run(watch())


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller runs (a smoke test of the benchmark)")
    parser.add_argument("--start-only", action="store_true", help="only the start cost and RSS figures")
    parser.add_argument("--throughput-only", action="store_true", help="only the step throughput figures")
    parser.add_argument("--tensorboard", action="store_true", help="jobs with evaluation_metrics type tensorboard")
    parser.add_argument("--runs", type=int, default=5, help="throughput runs, with and without the sidecar each")
    parser.add_argument("--steps", type=int, help="smoke training steps per throughput run (default 4000)")
    parser.add_argument("--sidecar-image", help="measure this sidecar image instead of building one")
    args = parser.parse_args()
    steps, watch, lines, files = (500, 40, 200_000, 8) if args.quick else (4000, 150, 1_000_000, 24)
    steps = args.steps or steps
    if engine.image_id(LEARNER_IMAGE) is None:
        sys.exit(f"{LEARNER_IMAGE} is not built: run `make images`")
    inputs = BuildInputs(ca_bundle=Path("/etc/ssl/certs/ca-certificates.crt"))
    built = None if args.sidecar_image else build_sidecar(REPO, inputs, lambda line: None)
    sidecar_image = args.sidecar_image or (built.immutable_reference or built.reference if built else "")
    figures = [] if args.throughput_only else start_figures(sidecar_image)
    with tempfile.TemporaryDirectory(prefix="lk-bench-") as tmp, servers(Path(tmp)) as (etcd, s3):
        bench = Bench(etcd, s3, sidecar_image, Path(tmp), tensorboard=args.tensorboard)
        if args.throughput_only:
            figures.extend(throughput_figures(bench, steps, args.runs))
            return report(figures)
        starts = [bench.start_cost(steps) for _ in range(3)]
        cpu = statistics.median(start[0] for start in starts)
        label = f"sidecar CPU to first status, median of {len(starts)}"
        figures.append(Figure(label, cpu, None, "CPU-s", "<= 0.4 CPU-s", cpu <= 0.4))
        if args.start_only:
            rss = max(start[1] for start in starts)
            figures.append(Figure("sidecar peak RSS over a job", rss, None, "MB", "<= 60 MB", rss <= 60))
            return report(figures)
        figures.extend(throughput_figures(bench, steps, args.runs))
        rss = max(start[1] for start in starts)
        figures.append(Figure("sidecar peak RSS over a job", rss, None, "MB", "<= 60 MB", rss <= 60))
        halts, latencies = bench.halt_and_propagation(watch, 3)
        halt = statistics.median(halts)
        label = f"halt -> HALTED minus upload, median of {len(halts)} (max {max(halts):.2f})"
        figures.append(Figure(label, halt, None, "s", "<= 1 s", halt <= 1.0))
        p50, p99 = statistics.median(latencies), percentile(latencies, 0.99)
        figures.append(Figure(f"status propagation p50 ({len(latencies)} samples)", p50, None, "ms", "", True))
        figures.append(Figure("status propagation p99", p99, None, "ms", "<= 250 ms", p99 <= 250))
        scraped, bare_split = bench.log_scraping(lines)
        figures.append(
            Figure(
                "log scraping, zero loss (vs bare split)", scraped, bare_split, "lines/s", ">= 100k", scraped >= 100_000
            )
        )
        ours, baseline = bench.download(files, 8)
        figures.append(
            Figure(
                "S3 download (vs boto3 TransferManager)", ours, baseline, "MB/s", ">= 0.9 ratio", ours / baseline >= 0.9
            )
        )
    return report(figures)


def throughput_figures(bench: Bench, steps: int, runs: int) -> list[Figure]:
    """Steps/s with and without the sidecar, alternating (each pair of runs sees the same load), and the sidecar's
    CPU per second of training; every run is printed, the figures are the medians."""
    bare, paired, cpu = [], [], []
    for run in range(runs):
        bare.append(bench.throughput_without_sidecar(steps))
        rate, sidecar_cpu = bench.throughput_with_sidecar(steps)
        paired.append(rate)
        cpu.append(sidecar_cpu)
        print(
            f"run {run + 1}: {bare[-1]:.1f} steps/s bare, {rate:.1f} with the sidecar ({rate / bare[-1]:.3f}), "
            f"sidecar {sidecar_cpu:.3f} CPU-s per training second ({sidecar_cpu / rate * 1e6:.0f} us per step), "
            f"load {os.getloadavg()[0]:.2f}",
            flush=True,
        )
    ratio = statistics.median(p / b for p, b in zip(paired, bare, strict=True))
    per_step = statistics.median(c / p * 1e6 for c, p in zip(cpu, paired, strict=True))
    return [
        Figure(f"steps/s with sidecar / without, median of {runs}", ratio, None, "ratio", ">= 0.98", ratio >= 0.98),
        Figure("sidecar CPU-s per second of training", statistics.median(cpu), None, "CPU-s/s", "", True),
        Figure("sidecar CPU per training step", per_step, None, "us", "", True),
    ]


def start_figures(image: str) -> list[Figure]:
    """What importing each client costs inside the image (no target: the totals above have them)."""
    figures = []
    for name, code in CLIENTS.items():
        cost = import_cost(image, code)
        figures.append(Figure(f"import: {name}", cost.cpu_s, None, "CPU-s", "", True))
        figures.append(Figure(f"import: {name}", cost.rss_mb, None, "MB", "", True))
    return figures


def report(figures: list[Figure]) -> int:
    print(f"{'figure':<44}{'value':>12}{'baseline':>12}{'ratio':>8}  {'unit':<8}{'target':<16}")
    for figure in figures:
        print(figure.line())
    return 0 if all(figure.ok for figure in figures) else 1


if __name__ == "__main__":
    raise SystemExit(main())
