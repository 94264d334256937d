"""The sized ``/job`` volume's pieces with the tools and the engine faked: what runs, in which order, and that
nothing is left when a step fails."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from controller_sidecar.endpoints import Endpoints
from learnerkit.pair import docker as pair_docker
from learnerkit.pair import jobdisk
from learnerkit.pair.docker import DockerPlacement
from learnerkit.pair.jobdisk import (
    BACKING_FILE_LABEL,
    JobDiskError,
    JobDiskSettings,
    create_volume,
    make_backing_file,
    release_backing_file,
    remove_volume,
    sweep_leftovers,
    why_unavailable,
)
from learnerkit.pair.spec import PairSpec

SIZE = 64 << 20


class Tools:
    """The host's tools: records each argv; answers losetup and debugfs as a real host would."""

    def __init__(self, fail: str | None = None, listing: str = "") -> None:
        self.calls: list[list[str]] = []
        self.fail = fail
        self.listing = listing
        self.attached: dict[str, str] = {}

    def __call__(self, argv: Sequence[str]) -> str:
        self.calls.append(list(argv))
        if self.fail and self.fail in " ".join(argv):
            raise JobDiskError(f"{argv[0]} failed")
        if argv[:3] == ["losetup", "--find", "--show"]:
            self.attached[argv[3]] = f"/dev/loop{len(self.attached)}"
            return self.attached[argv[3]] + "\n"
        if argv[:2] == ["losetup", "--associated"]:
            device = self.attached.get(argv[2])
            return f"{device}: []: ({argv[2]})\n" if device else ""
        if argv[:2] == ["debugfs", "-R"]:
            return self.listing
        return ""

    def tools(self) -> list[str]:
        return [call[0] + (" " + call[1] if call[0] == "losetup" else "") for call in self.calls]


class Api:
    """The engine's low-level client: volumes by name, with their labels."""

    def __init__(self) -> None:
        self.volumes_by_name: dict[str, dict[str, Any]] = {}

    def create(self, name: str, driver: str, driver_opts: dict[str, str], labels: dict[str, str]) -> str:
        self.volumes_by_name[name] = {"Name": name, "Labels": labels, "Options": driver_opts}
        return name

    def inspect_volume(self, name: str) -> dict[str, Any]:
        if name not in self.volumes_by_name:
            raise docker.errors.NotFound(name)
        return self.volumes_by_name[name]

    def remove_volume(self, name: str, force: bool) -> None:
        del self.volumes_by_name[name]

    def volumes(self, filters: dict[str, str]) -> dict[str, Any]:
        return {"Volumes": list(self.volumes_by_name.values())}


class Client:
    def __init__(self, api: Api, refuse: bool = False) -> None:
        self.api = api
        self.volumes = self
        self.refuse = refuse

    def create(self, **options: Any) -> str:
        if self.refuse:
            raise docker.errors.APIError("refused")
        return self.api.create(**options)


def test_the_file_is_sparse_formatted_emptied_reserved_and_attached(tmp_path: Path) -> None:
    tools = Tools()
    path = tmp_path / "owner" / "lk-j-1-job.ext4"
    assert make_backing_file(path, SIZE, tools) == "/dev/loop0"
    assert path.stat().st_size == SIZE and path.stat().st_blocks == 0, "sparse: the host holds what is written"
    assert tools.tools() == ["mkfs.ext4", "tune2fs", "debugfs", "debugfs", "losetup --find"]
    assert ["-r", str(SIZE // 100 // 4096), "-u", "1001", "-g", "1001"] == tools.calls[1][1:7]


@pytest.mark.parametrize("step", ["mkfs.ext4", "tune2fs", "rmdir", "losetup"])
def test_a_failed_step_leaves_no_file(tmp_path: Path, step: str) -> None:
    path = tmp_path / "lk-j-1-job.ext4"
    with pytest.raises(JobDiskError, match=f"making the {SIZE}-byte /job disk"):
        make_backing_file(path, SIZE, Tools(fail=step))
    assert not path.exists()


def test_lost_and_found_still_there_is_a_failure(tmp_path: Path) -> None:
    path = tmp_path / "lk-j-1-job.ext4"
    with pytest.raises(JobDiskError, match="lost\\+found"):
        make_backing_file(path, SIZE, Tools(listing="/11/040700/0/0/lost+found//\n"))
    assert not path.exists()


def test_a_tiny_storage_is_refused_by_size(tmp_path: Path) -> None:
    with pytest.raises(JobDiskError, match="at least 1048576 bytes"):
        make_backing_file(tmp_path / "f.ext4", 4096, Tools())
    assert not (tmp_path / "f.ext4").exists()


def test_the_volume_names_its_file_and_removing_it_releases_the_disk(tmp_path: Path) -> None:
    tools, api = Tools(), Api()
    path = tmp_path / "lk-j-1-job.ext4"
    create_volume(Client(api), "lk-j-1-job", {"io.learnerkit.job-id": "j"}, SIZE, path, tools)
    volume = api.volumes_by_name["lk-j-1-job"]
    assert volume["Options"] == {"type": "ext4", "device": "/dev/loop0"}
    assert volume["Labels"] == {"io.learnerkit.job-id": "j", BACKING_FILE_LABEL: str(path)}
    remove_volume(api, "lk-j-1-job", tools)
    assert api.volumes_by_name == {} and not path.exists()
    assert tools.calls[-1] == ["losetup", "--detach", "/dev/loop0"]
    remove_volume(api, "lk-j-1-job", tools)  # gone already: nothing to do


def test_a_volume_the_engine_refuses_leaves_no_disk(tmp_path: Path) -> None:
    tools = Tools()
    path = tmp_path / "lk-j-1-job.ext4"
    with pytest.raises(docker.errors.APIError):
        create_volume(Client(Api(), refuse=True), "lk-j-1-job", {}, SIZE, path, tools)
    assert not path.exists() and tools.calls[-1] == ["losetup", "--detach", "/dev/loop0"]


def test_a_plain_volume_is_removed_without_touching_loop_devices(tmp_path: Path) -> None:
    tools, api = Tools(), Api()
    api.create("plain", "local", {}, {})
    remove_volume(api, "plain", tools)
    assert api.volumes_by_name == {} and tools.calls == []


def test_the_sweep_releases_only_the_owners_files_without_a_volume(tmp_path: Path) -> None:
    tools, api = Tools(), Api()
    settings = JobDiskSettings(state_dir=tmp_path)
    kept, lost = tmp_path / "me" / "kept.ext4", tmp_path / "me" / "lost.ext4"
    other = tmp_path / "other" / "lost.ext4"
    create_volume(Client(api), "kept", {}, SIZE, kept, tools)
    for path in (lost, other):
        make_backing_file(path, SIZE, tools)
    assert sweep_leftovers(api, settings, "me", tools) == [lost]
    assert kept.exists() and not lost.exists() and other.exists()
    assert ["losetup", "--detach", "/dev/loop1"] in tools.calls
    assert sweep_leftovers(api, settings, "nobody", tools) == []


def test_releasing_a_gone_file_does_nothing(tmp_path: Path) -> None:
    tools = Tools()
    release_backing_file(tmp_path / "gone.ext4", tools)
    assert tools.calls == []


@pytest.mark.parametrize(
    ("info", "host", "euid", "why"),
    [
        ({}, None, 0, None),
        ({}, "unix:///run/docker.sock", 0, None),
        ({}, "tcp://10.0.0.5:2376", 0, "the engine is remote"),
        ({"SecurityOptions": ["name=seccomp", "name=rootless"]}, None, 0, "rootless"),
        ({}, None, 1000, "not running as root"),
    ],
)
def test_why_unavailable(
    monkeypatch: pytest.MonkeyPatch, info: dict[str, Any], host: str | None, euid: int, why: str | None
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: euid)
    monkeypatch.setattr(shutil, "which", lambda tool: f"/usr/sbin/{tool}")
    monkeypatch.setattr(jobdisk.Path, "exists", lambda self: True)
    answer = why_unavailable(info, host)
    assert answer is None if why is None else why in (answer or "")


def test_a_missing_tool_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda tool: None if tool == "debugfs" else f"/usr/sbin/{tool}")
    assert why_unavailable({}, None) == "debugfs not installed (e2fsprogs, util-linux)"


def test_settings_from_the_environment() -> None:
    assert JobDiskSettings.from_env({}) == JobDiskSettings()
    assert JobDiskSettings.from_env(
        {"LEARNERKIT_JOB_DISK_DIR": "/srv/disks", "LEARNERKIT_JOB_DISK_UNBOUNDED": "1"}
    ) == (JobDiskSettings(Path("/srv/disks"), unbounded=True))
    with pytest.raises(JobDiskError, match="LEARNERKIT_JOB_DISK_UNBOUNDED='yes'"):
        JobDiskSettings.from_env({"LEARNERKIT_JOB_DISK_UNBOUNDED": "yes"})
    with pytest.raises(JobDiskError, match="LEARNERKIT_JOB_DISK_DIR='disks': expected an absolute folder"):
        JobDiskSettings.from_env({"LEARNERKIT_JOB_DISK_DIR": "disks"})


class Engine:
    """The engine's client as ``start_pair`` uses it for the volume: ``info`` and ``volumes.create``."""

    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []
        self.volumes = self

    def info(self) -> dict[str, Any]:
        return {"SecurityOptions": ["name=rootless"]}

    def create(self, **options: Any) -> dict[str, Any]:
        self.created.append(options)
        return options


def spec(storage: int | None) -> PairSpec:
    return PairSpec("j", 1, "learner", "sidecar", ("true",), {}, Endpoints("127.0.0.1:1"), storage_bytes=storage)


def test_where_no_disk_can_be_made_a_job_with_storage_is_refused_by_the_setting_that_allows_it() -> None:
    client = Engine()
    with pytest.raises(JobDiskError, match=r"storage 67108864 bytes, but the engine runs rootless.*UNBOUNDED=1"):
        pair_docker._job_volume(client, spec(SIZE), DockerPlacement(), {})
    assert client.created == []


def test_unbounded_runs_it_on_a_plain_volume_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    client = Engine()
    placement = DockerPlacement(disk=JobDiskSettings(unbounded=True))
    pair_docker._job_volume(client, spec(SIZE), placement, {"a": "b"})
    assert client.created == [{"name": "lk-j-1-job", "labels": {"a": "b"}}]
    assert "volume lk-j-1-job is not limited to 67108864 bytes: the engine runs rootless" in caplog.text


def test_a_job_without_storage_gets_a_plain_volume() -> None:
    client = Engine()
    pair_docker._job_volume(client, spec(None), DockerPlacement(), {})
    assert client.created == [{"name": "lk-j-1-job", "labels": {}}]
