"""The learner's cgroup folders handed to its sidecar: all of them or none. A partial set (the runtime removes
a stopped container's folders one controller after the other) would leave the sidecar unable to tell that
the learner is gone, and the job waiting for ever."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from learnerkit.pair import docker as docker_pair
from learnerkit.pair.cgroups import SIDECAR_MOUNT, cgroup_mounts, shares_our_pids
from learnerkit.pair.docker import _learner_cgroups

PID = 4242
V1 = "12:pids:/docker/abc\n8:memory:/docker/abc\n5:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n"


def host(tmp_path: Path, cgroup_file: str, folders: list[str]) -> tuple[Path, Path]:
    proc, root = tmp_path / "proc", tmp_path / "cgroup"
    (proc / str(PID)).mkdir(parents=True)
    (proc / str(PID) / "cgroup").write_text(cgroup_file)
    for folder in folders:
        (root / folder).mkdir(parents=True)
    return root, proc


def test_every_controller_folder_of_a_running_learner_is_mounted(tmp_path: Path) -> None:
    root, proc = host(tmp_path, V1, ["pids/docker/abc", "memory/docker/abc", "cpu,cpuacct/docker/abc"])
    assert cgroup_mounts(PID, root, proc) == {
        str(root / "pids/docker/abc"): f"{SIDECAR_MOUNT}/pids",
        str(root / "memory/docker/abc"): f"{SIDECAR_MOUNT}/memory",
        str(root / "cpu,cpuacct/docker/abc"): f"{SIDECAR_MOUNT}/cpuacct",
    }


def test_a_learner_whose_folders_are_partly_removed_is_ending(tmp_path: Path) -> None:
    root, proc = host(tmp_path, V1, ["memory/docker/abc", "cpu,cpuacct/docker/abc"])  # pids removed already
    assert cgroup_mounts(PID, root, proc) is None


def test_cgroup_v2_mounts_the_unified_folder(tmp_path: Path) -> None:
    root, proc = host(tmp_path, "0::/system.slice/docker-abc.scope\n", ["system.slice/docker-abc.scope"])
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    assert cgroup_mounts(PID, root, proc) == {str(root / "system.slice/docker-abc.scope"): f"{SIDECAR_MOUNT}/unified"}


def test_a_process_this_host_does_not_show_gives_nothing_to_mount(tmp_path: Path) -> None:
    assert cgroup_mounts(PID, tmp_path / "cgroup", tmp_path / "proc") == {}


class EndingLearner:
    """A learner container whose process is gone while the engine still reads it as running for a few reloads."""

    def __init__(self, running_reloads: int) -> None:
        self.reloads = 0
        self.running_reloads = running_reloads
        self.attrs: dict[str, Any] = {}

    def reload(self) -> None:
        self.reloads += 1
        running = self.reloads <= self.running_reloads
        self.attrs = {"State": {"Running": running, "Pid": GONE_PID if running else 0}}


GONE_PID = 2**22 + 1  # above pid_max's ceiling: no process has it


@pytest.fixture
def engine_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine that numbers processes otherwise than this host (a remote one, or Docker in Docker)."""
    monkeypatch.setattr(docker_pair, "shares_our_pids", lambda socket: False)


def test_a_learner_whose_process_is_gone_has_ended_where_the_engine_shares_our_pids(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The race behind the flaky test_pair_learner_lost: on a busy machine the engine records the end seconds after
    the process is gone; waiting for it (up to ``STATE_SETTLE_S``) and then reading "this host shows no cgroup"
    started the sidecar without one, waiting for ever."""
    monkeypatch.setattr(docker_pair, "shares_our_pids", lambda socket: True)
    learner = EndingLearner(running_reloads=1000)
    assert _learner_cgroups(learner) is None
    assert learner.reloads == 1


@pytest.mark.usefixtures("engine_elsewhere")
def test_an_engine_elsewhere_is_asked_until_it_records_the_end() -> None:
    learner = EndingLearner(running_reloads=3)
    assert _learner_cgroups(learner) is None
    assert learner.reloads == 4


@pytest.mark.usefixtures("engine_elsewhere")
def test_a_process_an_engine_elsewhere_runs_gives_nothing_to_mount_once_settled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(docker_pair, "STATE_SETTLE_S", 0.1)
    learner = EndingLearner(running_reloads=10**9)
    assert _learner_cgroups(learner) == {}
    assert learner.reloads > 1


def serve(path: Path, argv_prefix: tuple[str, ...] = ()) -> subprocess.Popen[bytes]:
    """A process listening on the Unix socket ``path`` (behind ``argv_prefix``, e.g. a new PID namespace)."""
    code = (
        "import socket,sys\n"
        "s=socket.socket(socket.AF_UNIX);s.bind(sys.argv[1]);s.listen(4);print('up',flush=True)\n"
        "while True: s.accept()[0].close()\n"
    )
    server = subprocess.Popen([*argv_prefix, sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE)
    assert server.stdout is not None and server.stdout.readline() == b"up\n"
    return server


def test_an_engine_in_our_pid_namespace_shares_our_pids(tmp_path: Path) -> None:
    server = serve(tmp_path / "engine.sock")
    try:
        assert shares_our_pids(str(tmp_path / "engine.sock"))
    finally:
        server.kill()
        server.wait()


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="a PID namespace needs root")
def test_an_engine_in_a_pid_namespace_of_its_own_does_not(tmp_path: Path) -> None:
    """Docker in Docker: its socket's peer is visible here, but it numbers its containers' processes otherwise."""
    server = serve(tmp_path / "engine.sock", ("unshare", "--pid", "--fork", "--kill-child"))
    try:
        assert not shares_our_pids(str(tmp_path / "engine.sock"))
    finally:
        server.kill()
        server.wait()


def test_no_socket_or_a_socket_nobody_listens_on_shares_nothing(tmp_path: Path) -> None:
    assert not shares_our_pids(None)
    assert not shares_our_pids(str(tmp_path / "nobody.sock"))
