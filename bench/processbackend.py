"""A scheduler backend that runs each learner pair as two processes of this host: the real sidecar
(``python -m controller_sidecar``, this checkout's) and ``learner-run`` with this checkout's ``learner`` helper,
sharing a ``/job`` folder under ``base``. For tests and benchmarks of this tree's sidecar and helper without
images; it isolates nothing (no users, limits or network namespace) and is not a product backend.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from controller_sidecar.jobdirs import JobDirs
from learnerkit.scheduler.admission.capacity import Node
from learnerkit.scheduler.backends.deployment import JobDeployment
from learnerkit.scheduler.backends.protocol import LearnerEnd, NodeHealth, SidecarStates

REPO = Path(__file__).resolve().parents[1]
LEARNER_RUN = REPO / "learner_base" / "bin" / "learner-run"
NODE = "local"
STOP_S = 30.0
CPU_RECORDS = "sidecar-cpu.jsonl"
"""Under ``base``: one line per sidecar that ended, ``{"job": ..., "cpu_s": ...}``, its own CPU from getrusage."""
SIDECAR_MAIN = """
import json, os, resource, sys
from controller_sidecar.cli import main
try:
    code = main()
finally:
    used = resource.getrusage(resource.RUSAGE_SELF)
    line = json.dumps({"job": os.environ["JOB_ID"], "cpu_s": used.ru_utime + used.ru_stime}) + "\\n"
    with open(sys.argv[1], "a") as out:
        out.write(line)
sys.exit(code)
"""


@dataclass
class ProcessPair:
    folder: Path
    sidecar: subprocess.Popen[bytes]
    learner: subprocess.Popen[bytes]


class ProcessBackend:
    deploys_held = False

    def __init__(self, base: Path, cpus: float = 8.0) -> None:
        self.base = base
        self.cpus = cpus
        self.pairs: dict[str, dict[int, ProcessPair]] = {}
        self.learner_starts: dict[str, int] = {}
        """Learner processes started per job (every attempt's): a promotion in place starts none."""
        self._lock = threading.Lock()

    def nodes(self) -> list[Node]:
        return [Node(NODE, self.cpus, 64 << 30)]

    def node_health(self) -> dict[str, NodeHealth]:
        return {NODE: NodeHealth()}

    def deploy(self, job: JobDeployment) -> None:
        with self._lock:
            pairs = self.pairs.setdefault(job.job_id, {})
            for spec in job.learners:
                if spec.learner_id in pairs:
                    continue
                folder = self.base / job.job_id / f"learner-{spec.learner_id}"
                shutil.rmtree(folder, ignore_errors=True)
                dirs = JobDirs(folder / "job")
                config = {**spec.sidecar_config, "job_dir": str(dirs.root)}
                for path in dirs.learner_variables().values():
                    path.mkdir(parents=True, exist_ok=True)
                ids = {
                    "JOB_ID": spec.job_id,
                    "LEARNER_ID": str(spec.learner_id),
                    "NUM_LEARNERS": str(spec.num_learners),
                }
                sidecar_env = {
                    "PATH": os.environ["PATH"],
                    **spec.endpoints.env(),
                    **ids,
                    "LEARNERKIT_SIDECAR_CONFIG_JSON": json.dumps(config, sort_keys=True),
                }
                learner_env = {
                    "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
                    "PYTHONPATH": str(REPO / "learner_base"),
                    **ids,
                    "LEARNER_HALT_GRACE": f"{spec.halt_grace_s:g}",
                    "JOB_SHARED_DIR": str(dirs.shared),
                    **{name: str(path) for name, path in dirs.learner_variables().items()},
                    **{k: v for k, v in spec.learner_env.items() if k != "JOB_SHARED_DIR"},
                }
                argv = [sys.executable, str(LEARNER_RUN)]
                if isinstance(spec.command, str):
                    learner_env["LEARNER_COMMAND"] = spec.command
                else:
                    argv += list(spec.command)
                log = (folder / "learner.out").open("ab")
                learner = subprocess.Popen(
                    argv, env=learner_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
                log = (folder / "sidecar.out").open("ab")
                sidecar = subprocess.Popen(
                    [sys.executable, "-c", SIDECAR_MAIN, str(self.base / CPU_RECORDS)],
                    env=sidecar_env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                pairs[spec.learner_id] = ProcessPair(folder, sidecar, learner)
                self.learner_starts[job.job_id] = self.learner_starts.get(job.job_id, 0) + 1

    def started(self, job_id: str, learners: int) -> bool:
        return len(self.pairs.get(job_id, {})) == learners

    def sidecars(self, job_id: str) -> SidecarStates:
        exited: dict[int, int] = {}
        running: set[int] = set()
        for n, pair in self.pairs.get(job_id, {}).items():
            code = pair.sidecar.poll()
            if code is None:
                running.add(n)
            else:
                exited[n] = code
        return SidecarStates(exited, frozenset(running))

    def learners_ended(self, job_id: str) -> dict[int, LearnerEnd]:
        found = {n: pair.learner.poll() for n, pair in self.pairs.get(job_id, {}).items()}
        return {n: LearnerEnd(code) for n, code in found.items() if code is not None}

    def learners_running(self, job_id: str) -> set[int]:
        return {n for n, pair in self.pairs.get(job_id, {}).items() if pair.learner.poll() is None}

    def restart_sidecar(self, job_id: str, learner_id: int) -> bool:
        return False

    def teardown(self, job_id: str) -> None:
        with self._lock:
            pairs = self.pairs.pop(job_id, {})
        for pair in pairs.values():
            for process in (pair.learner, pair.sidecar):
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGTERM)
            for process in (pair.learner, pair.sidecar):
                try:
                    process.wait(STOP_S)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()

    def job_ids(self, instance: str) -> set[str]:
        return set(self.pairs)

    def sidecar_cpu_s(self) -> float:
        """The CPU of every sidecar that has ended, together."""
        path = self.base / CPU_RECORDS
        lines = path.read_text().splitlines() if path.exists() else []
        return sum(float(json.loads(line)["cpu_s"]) for line in lines)

    def close(self) -> None:
        for job_id in list(self.pairs):
            self.teardown(job_id)
