"""The learner's cgroup folders handed to its sidecar: all of them or none. A partial set (the runtime removes
a stopped container's folders one controller after the other) would leave the sidecar unable to tell that
the learner is gone, and the job waiting for ever."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from learnerkit.pair.cgroups import SIDECAR_MOUNT, cgroup_mounts
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


def test_a_learner_that_ended_while_the_engine_still_says_running_is_ended_not_unmountable() -> None:
    """The race behind the flaky test_pair_learner_lost: the engine records the end a moment after the process is
    gone; reading it as "this host shows no cgroup" started the sidecar without one, waiting for ever."""
    learner = EndingLearner(running_reloads=3)
    assert _learner_cgroups(learner) is None
    assert learner.reloads == 4
