"""The sidecar's start cost, measured inside its image: CPU seconds until its first status is in etcd, and
what importing each client costs (CPU seconds and resident memory), each in a fresh interpreter.

Used by bench/sidecar.py; run alone to print the figures for one image:
python bench/sidecar_start.py IMAGE
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import docker.errors

from controller_sidecar import keys
from controller_sidecar.etcdstore import EtcdStore
from controller_sidecar.settings import EtcdSettings
from learnerkit.common import engine

PYTHON = "/opt/sidecar/venv/bin/python"
_PROBE = """
import json, resource, sys
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
def rss():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS:")) / 1024
before = (cpu(), rss())
exec(sys.argv[1])
print(json.dumps({"cpu_s": cpu() - before[0], "rss_mb": rss() - before[1], "base_cpu_s": before[0],
                  "base_rss_mb": before[1]}))
"""
CLIENTS = {
    "etcd client (etcdstore + urllib3)": "import controller_sidecar.etcdstore",
    "S3 client (boto3, client made)": (
        "from controller_sidecar.s3store import S3Store; from controller_sidecar.settings import S3Settings; "
        "S3Store(S3Settings(endpoint_url='http://127.0.0.1:1', access_key='a', secret_key='b'))"
    ),
    "sidecar imports before its first status": "import controller_sidecar.cli",
    # Minus the line above: what a job with `evaluation_metrics: {type: tensorboard}` adds (others never load it).
    "the same + the TensorBoard reader": "import controller_sidecar.cli, controller_sidecar.tensorboard",
}
"""What each probe runs, in a fresh interpreter of the sidecar image."""


@dataclass(frozen=True)
class ImportCost:
    cpu_s: float
    rss_mb: float
    interpreter_cpu_s: float
    interpreter_rss_mb: float


def import_cost(image: str, code: str, runs: int = 3) -> ImportCost:
    """Median over ``runs`` fresh containers of the CPU seconds and RSS that ``code`` adds to the interpreter."""
    samples = []
    for _ in range(runs):
        out = subprocess.run(
            ["docker", "run", "--rm", "--network=none", "--entrypoint", PYTHON, image, "-c", _PROBE, code],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        samples.append(json.loads(out.strip().splitlines()[-1]))
    return ImportCost(
        *(statistics.median(s[field] for s in samples) for field in ("cpu_s", "rss_mb", "base_cpu_s", "base_rss_mb"))
    )


def cgroup_cpu_seconds(pid: int) -> float:
    """CPU seconds of the cgroup ``pid`` is in (cgroup v1 ``cpuacct.usage``, or v2 ``cpu.stat``)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpuacct" in controllers.split(","):
            usage = Path("/sys/fs/cgroup") / controllers / path.lstrip("/") / "cpuacct.usage"
            return int(usage.read_text()) / 1e9
        if controllers == "":
            stat = (Path("/sys/fs/cgroup") / path.lstrip("/") / "cpu.stat").read_text()
            usec = next(int(line.split()[1]) for line in stat.splitlines() if line.startswith("usage_usec"))
            return usec / 1e6
    raise RuntimeError(f"no CPU accounting cgroup for pid {pid}")


def first_status_cpu(settings: EtcdSettings, job_id: str, sidecar_name: str) -> Future[float]:
    """Start watching for the learner's first status (call it before the pair starts); the future gives the
    sidecar container's CPU seconds read the moment that status is in etcd."""
    pool = ThreadPoolExecutor(max_workers=1)
    future = pool.submit(asyncio.run, _first_status_cpu(settings, job_id, sidecar_name))
    pool.shutdown(wait=False)
    return future


async def _first_status_cpu(settings: EtcdSettings, job_id: str, sidecar_name: str) -> float:
    store = await EtcdStore.connect(settings)
    try:
        status = asyncio.create_task(store.wait_for_key(keys.learner_status_key(job_id, 1, settings.root)))
        pid = await asyncio.to_thread(_container_pid, sidecar_name)
        await status
        return cgroup_cpu_seconds(pid)
    finally:
        await store.close()


def _container_pid(name: str, timeout: float = 120) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(docker.errors.NotFound):
            pid = int(engine.engine().containers.get(name).attrs["State"]["Pid"])
            if pid:
                return pid
        time.sleep(0.01)
    raise TimeoutError(f"no running container {name}")


def main() -> int:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    for name, code in CLIENTS.items():
        cost = import_cost(sys.argv[1], code)
        print(f"{name:<44}{cost.cpu_s:>8.3f} CPU-s {cost.rss_mb:>8.1f} MB")
    print(f"{'interpreter':<44}{cost.interpreter_cpu_s:>8.3f} CPU-s {cost.interpreter_rss_mb:>8.1f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
