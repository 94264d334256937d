"""learner.exit counts only once the learner's processes are gone (issue 27 D12), and a SIGKILL says whether
the OOM killer sent it (D13), where the sidecar sees the learner's cgroup."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from controller_sidecar.control import EXIT_FILE, LearnerExit
from controller_sidecar.learnercgroup import LearnerCgroup
from controller_sidecar.outcome import outcome_of
from controller_sidecar.resources import learner_alive
from controller_sidecar.runtime import Sidecar
from controller_sidecar.settings import load_settings

pytestmark = pytest.mark.timeout(20)
ENV = {"ETCD_ENDPOINTS": "127.0.0.1:2379", "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}


def v2_cgroup(root: Path, *, populated: bool, oom_kills: int = 0) -> Path:
    unified = root / "unified"
    unified.mkdir(parents=True, exist_ok=True)
    (unified / "cgroup.events").write_text(f"populated {int(populated)}\nfrozen 0\n")
    (unified / "memory.events").write_text(f"low 0\nhigh 0\nmax 3\noom 1\noom_kill {oom_kills}\n")
    return root


def sidecar(tmp_path: Path, cgroup: Path) -> Sidecar:
    doc = {
        "job_id": "job-1",
        "learner_id": 1,
        "results": {"bucket": "results"},
        "data": {"mode": "mount"},
        "job_dir": str(tmp_path / "job"),
        "learner_cgroup_dir": str(cgroup),
        "timing": {"poll_interval_s": 0.01},
    }
    (tmp_path / "job" / "control").mkdir(parents=True)
    return Sidecar(load_settings({**ENV, "LEARNERKIT_SIDECAR_CONFIG_JSON": json.dumps(doc)}), asyncio.Event())


def write_exit(control: Path, code: int, reason: str) -> None:
    (control / EXIT_FILE).write_text(json.dumps({"exit_code": code, "reason": reason}))


class Seen(logging.Handler):
    """Sets ``event`` when a record containing ``text`` is logged (from any thread)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
        self.event = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.event.set()


def forged_then_real(side: Sidecar, learner_ends: Callable[[], object]) -> tuple[LearnerExit, bool]:
    """The command writes a ``completed`` record while the learner runs; the sidecar must not take it. Then
    learner-run's own record (exit 3) and ``learner_ends``: what the sidecar takes then."""
    control = side.settings.dirs.control
    write_exit(control, 0, "completed")  # the command's forgery; learner-run has not ended
    seen = Seen("appeared while the learner still runs")
    logging.getLogger("controller_sidecar.runtime").addHandler(seen)

    async def scenario() -> tuple[LearnerExit, bool]:
        waiting = asyncio.create_task(side._await_exit())
        noticed = asyncio.create_task(asyncio.to_thread(seen.event.wait, 10))
        await asyncio.wait({waiting, noticed}, return_when=asyncio.FIRST_COMPLETED)
        assert not waiting.done(), f"acted on learner.exit while the learner still runs: {waiting.result()}"
        assert await noticed, "the sidecar never noticed the early record"
        write_exit(control, 3, "failed")  # learner-run's own record, then its processes end
        learner_ends()
        return await asyncio.wait_for(waiting, 10)

    try:
        return asyncio.run(scenario())
    finally:
        logging.getLogger("controller_sidecar.runtime").removeHandler(seen)


def test_a_learner_exit_written_while_the_learner_runs_waits_for_its_processes(tmp_path: Path) -> None:
    cgroup = v2_cgroup(tmp_path / "cgroup", populated=True)
    record, halted = forged_then_real(sidecar(tmp_path, cgroup), lambda: v2_cgroup(cgroup, populated=False))
    assert (record.exit_code, record.reason, halted) == (3, "failed", False)


def test_a_learner_exit_after_the_processes_ended_is_taken_at_once(tmp_path: Path) -> None:
    side = sidecar(tmp_path, v2_cgroup(tmp_path / "cgroup", populated=False))
    write_exit(side.settings.dirs.control, 0, "completed")
    record, _ = asyncio.run(asyncio.wait_for(side._await_exit(), 10))
    assert record.reason == "completed"


@pytest.mark.parametrize(
    ("oom_kills", "says"),
    [
        (2, "out of memory (the kernel's OOM killer"),
        (0, "not by the OOM killer"),
        (None, "most likely out of memory"),
    ],
)
def test_a_sigkill_says_whether_the_oom_killer_sent_it(tmp_path: Path, oom_kills: int | None, says: str) -> None:
    if oom_kills is not None:
        assert LearnerCgroup(v2_cgroup(tmp_path, populated=False, oom_kills=oom_kills)).oom_kills() == oom_kills
    outcome = outcome_of(LearnerExit(137, "killed", signal="SIGKILL"), halt_requested=False, oom_kills=oom_kills)
    assert says in outcome.message and "exit code 137" in outcome.message


def test_a_v1_cgroup_counts_oom_kills_in_oom_control(tmp_path: Path) -> None:
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    assert LearnerCgroup(tmp_path).oom_kills() == 1
    assert LearnerCgroup(tmp_path / "nothing").oom_kills() is None


def test_a_failure_at_the_pids_limit_says_so(tmp_path: Path) -> None:
    (tmp_path / "unified").mkdir()
    (tmp_path / "unified" / "pids.events").write_text("max 37\n")
    refused = LearnerCgroup(tmp_path).forks_refused()
    assert refused == 37
    outcome = outcome_of(LearnerExit(1, "failed"), halt_requested=False, forks_refused=refused)
    assert "exit code 1; the learner reached its pids limit (37 new processes or threads refused" in outcome.message
    plain = outcome_of(LearnerExit(1, "failed"), halt_requested=False, forks_refused=0)
    assert "pids limit" not in plain.message
    assert LearnerCgroup(tmp_path / "nothing").forks_refused() is None


def test_the_forks_refused_are_remembered_once_the_cgroup_is_gone(tmp_path: Path) -> None:
    """The runtime removes a stopped learner's cgroup files, the count with them: each look at the cgroup
    while the learner runs keeps the count seen."""
    v2_cgroup(tmp_path, populated=True)
    events = tmp_path / "unified" / "pids.events"
    events.write_text("max 5\n")
    cgroup = LearnerCgroup(tmp_path)
    assert cgroup.populated()
    events.unlink()
    assert cgroup.forks_refused() == 5


def fake_proc(root: Path, parents: dict[int, int]) -> Path:
    """A ``/proc`` holding ``stat`` and ``statm`` for each PID, with its parent."""
    for pid, ppid in parents.items():
        folder = root / str(pid)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "stat").write_text(f"{pid} (p {pid}) S {ppid} " + " ".join(["0"] * 20) + "\n")
        (folder / "statm").write_text("100 10 0 0 0 0 0\n")
    return root


def test_a_learner_is_alive_while_a_process_outside_the_sidecars_tree_runs_other_than_pause(tmp_path: Path) -> None:
    # 1: the pod's pause process; 10 (the learner's tini) -> 11 (learner-run); 20 (sidecar's init) -> 21 (sidecar)
    proc = fake_proc(tmp_path / "proc", {1: 0, 10: 0, 11: 10, 20: 0, 21: 20})
    assert learner_alive(21, proc)
    for pid in ("11", "10"):
        for name in ("stat", "statm"):
            (proc / pid / name).unlink()
        (proc / pid).rmdir()
    assert not learner_alive(21, proc), "the pause process alone is no learner"


def test_with_a_shared_pid_namespace_a_forged_learner_exit_waits_for_the_learners_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kubernetes: no cgroup mounted, the learner's processes seen in /proc (issue 27 D12 there)."""
    doc = {
        "job_id": "job-1",
        "learner_id": 1,
        "results": {"bucket": "results"},
        "data": {"mode": "mount"},
        "job_dir": str(tmp_path / "job"),
        "shares_learner_pid_namespace": True,
        "timing": {"poll_interval_s": 0.01},
    }
    (tmp_path / "job" / "control").mkdir(parents=True)
    side = Sidecar(load_settings({**ENV, "LEARNERKIT_SIDECAR_CONFIG_JSON": json.dumps(doc)}), asyncio.Event())
    alive = threading.Event()
    alive.set()
    monkeypatch.setattr("controller_sidecar.runtime.learner_alive", lambda _own_pid: alive.is_set())
    record, halted = forged_then_real(side, alive.clear)
    assert (record.exit_code, record.reason, halted) == (3, "failed", False)
