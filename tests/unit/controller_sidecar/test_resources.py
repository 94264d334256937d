"""Learner CPU and memory from /proc: every process outside the sidecar's own tree."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from controller_sidecar import resources
from controller_sidecar.learnercgroup import LearnerCgroup
from controller_sidecar.resources import learner_processes, own_tree, read_process, sample_learner
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(60)

ALLOCATE = 64 << 20
# The "learner": holds 64 MiB resident and burns CPU until its stdin closes (or 30 s pass).
LEARNER = (
    "import select, sys, time\n"
    f"held = b'x' * {ALLOCATE}\n"
    "end = time.time() + 30\n"
    "while time.time() < end and not select.select([sys.stdin], [], [], 0)[0]:\n"
    "    pass\n"
)
IDLE = "import sys; sys.stdin.read()"


@pytest.fixture
def spawn() -> Iterator[Callable[[str], subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []

    def start(code: str) -> subprocess.Popen[bytes]:
        started.append(subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE))
        return started[-1]

    yield start
    for process in started:
        process.communicate(b"", timeout=10)


def test_a_sibling_is_the_learner_and_the_sidecars_own_tree_is_not(
    spawn: Callable[[str], subprocess.Popen[bytes]],
) -> None:
    # Two children of this test: a stand-in sidecar (idle) and a learner beside it, as two containers'
    # processes in one PID namespace. Seen from the sidecar, the learner is foreign; this test process,
    # the sidecar's ancestor, is not.
    sidecar, learner = spawn(IDLE), spawn(LEARNER)
    sample = wait_until(
        lambda: (s := read_process(learner.pid)) and s.rss_bytes >= ALLOCATE and s.cpu_seconds > 0.05 and s,
        timeout=20,
        message="the learner to allocate its memory and use some CPU",
    )
    assert sample.ppid == os.getpid()
    pids = {process.pid for process in learner_processes(sidecar.pid)}
    assert learner.pid in pids
    assert sidecar.pid not in pids
    assert os.getpid() not in pids
    assert learner.pid not in {process.pid for process in learner_processes(os.getpid())}  # our own child
    total = sample_learner(sidecar.pid)
    assert total.rss_bytes >= sample.rss_bytes
    assert total.cpu_seconds >= sample.cpu_seconds
    assert total.processes >= 1


def test_a_vanished_process_reads_as_none() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert read_process(child.pid) is None


def test_own_tree_is_the_tree_below_the_namespace_root() -> None:
    # 1: the namespace's init; 10 (learner init) -> 11; 20 (sidecar init) -> 21 (sidecar) -> 22 (its child)
    parents = {1: 0, 10: 0, 11: 10, 20: 0, 21: 20, 22: 21, 30: 1, 31: 30}
    assert own_tree(21, parents) == {20, 21, 22}
    assert own_tree(31, parents) == {30, 31}


def test_gpu_utilisation_is_none_without_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    resources._nvml.cache_clear()
    try:
        assert resources.gpu_utilisation() is None
    finally:
        resources._nvml.cache_clear()


def test_gpu_utilisation_through_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.SimpleNamespace(
        NVMLError=RuntimeError,
        nvmlInit=lambda: None,
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda index: index,
        nvmlDeviceGetUtilizationRates=lambda handle: types.SimpleNamespace(gpu=[30, 100][handle]),
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    resources._nvml.cache_clear()
    try:
        assert resources.gpu_utilisation() == [0.3, 1.0]
    finally:
        resources._nvml.cache_clear()


def test_a_v1_cgroup_removed_after_it_was_mounted_reads_as_a_learner_gone(tmp_path: Path) -> None:
    for controller, name, value in (("memory", "memory.usage_in_bytes", "4096"), ("pids", "pids.current", "1")):
        (tmp_path / controller).mkdir()
        (tmp_path / controller / name).write_text(value)
    cgroup = LearnerCgroup(tmp_path)
    assert cgroup.populated()
    (tmp_path / "pids" / "pids.current").write_text("0")  # the runtime removed it: files stay, processes go
    assert not cgroup.populated()


def test_an_empty_cgroup_folder_reads_as_a_learner_gone(tmp_path: Path) -> None:
    assert not LearnerCgroup(tmp_path).populated()


def test_the_sidecar_says_which_cgroup_folders_it_watches_the_learner_through(tmp_path: Path) -> None:
    assert LearnerCgroup(tmp_path).describe() == (
        f"cgroup v1 at {tmp_path}: none mounted (the learner ended before the sidecar started)"
    )
    for controller in ("pids", "memory"):
        (tmp_path / controller).mkdir()
    assert LearnerCgroup(tmp_path).describe() == f"cgroup v1 at {tmp_path}: memory, pids"
