"""`learnerkit dev ...` with real etcd and SeaweedFS processes, run as a user runs it (a subprocess per command).

Every test uses a temporary state folder ($LEARNERKIT_SERVICES_DIR) and free ports (``--any-port``), never
the developer's `.learnerkit/services` or the default ports.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from controller_sidecar.etcdstore import EtcdStore
from controller_sidecar.settings import EtcdSettings
from learnerkit.dev.process import is_alive
from tests.waiting import wait_until

pytestmark = [pytest.mark.services, pytest.mark.timeout(240)]


def dev(state_dir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LEARNERKIT_SERVICES_DIR": str(state_dir)}
    argv = [sys.executable, "-m", "learnerkit", "dev", *args]
    result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=180)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def dev_json(state_dir: Path, *args: str) -> Any:
    return json.loads(dev(state_dir, *args, "--output", "json").stdout)


def pids(state_dir: Path) -> dict[str, int]:
    state = json.loads((state_dir / "state.json").read_text())
    return {name: int(record["pid"]) for name, record in state["services"].items()}


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("dev-services")
    try:
        yield folder
    finally:
        dev(folder, "down", check=False)


@pytest.fixture(scope="module")
def started(state_dir: Path) -> dict[str, int]:
    rows = dev_json(state_dir, "up", "--any-port")
    assert [(row["name"], row["action"]) for row in rows] == [
        ("etcd", "started"),
        ("s3", "started"),
        ("registry", "started"),
    ]
    return pids(state_dir)


@pytest.fixture(scope="module")
def shell_env(state_dir: Path, started: dict[str, int]) -> dict[str, str]:
    """The variables of `learnerkit dev env`, read as a shell would (shlex)."""
    words = shlex.split(dev(state_dir, "env").stdout)
    assert words[0] == "export"
    return dict(word.split("=", 1) for word in words[1:])


def s3(env: dict[str, str]) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=env["S3_ENDPOINT_URL"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name="us-east-1",
    )


def test_up_again_leaves_the_running_services_alone(state_dir: Path, started: dict[str, int]) -> None:
    rows = dev_json(state_dir, "up", "--any-port")
    assert [(row["name"], row["action"]) for row in rows] == [
        ("etcd", "already running"),
        ("s3", "already running"),
        ("registry", "already running"),
    ]
    assert pids(state_dir) == started
    assert (state_dir / "credentials.env").stat().st_mode & 0o777 == 0o600


def test_the_services_outlive_the_command_in_their_own_session(started: dict[str, int]) -> None:
    for pid in started.values():
        assert is_alive(pid, None)
        assert os.getsid(pid) == pid


def test_status_reports_every_service_healthy(state_dir: Path, started: dict[str, int]) -> None:
    rows = dev_json(state_dir, "status")
    assert {row["name"]: (row["state"], row["healthy"], row["pid"]) for row in rows} == {
        "etcd": ("running", True, started["etcd"]),
        "s3": ("running", True, started["s3"]),
        "registry": ("running", True, started["registry"]),
    }


def test_env_names_the_catalogs_registry_which_answers_the_v2_api(shell_env: dict[str, str]) -> None:
    host = shell_env["LEARNERKIT_CATALOG_REGISTRY"]
    assert host.startswith("127.0.0.1:")
    with urllib.request.urlopen(f"http://{host}/v2/_catalog", timeout=10) as response:
        assert json.loads(response.read()) == {"repositories": []}


def test_env_reaches_s3_with_boto3_and_its_buckets_exist(shell_env: dict[str, str]) -> None:
    client = s3(shell_env)
    names = {bucket["Name"] for bucket in client.list_buckets()["Buckets"]}
    assert {"training-data", "training-results"} <= names
    client.put_object(Bucket="training-results", Key="hello", Body=b"world")
    assert client.get_object(Bucket="training-results", Key="hello")["Body"].read() == b"world"


def test_the_dev_buckets_abort_multipart_uploads_left_open_for_a_day(shell_env: dict[str, str]) -> None:
    client = s3(shell_env)
    for bucket in ("training-data", "training-results"):
        rules = client.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
        assert [(r["Status"], r["AbortIncompleteMultipartUpload"]) for r in rules] == [
            ("Enabled", {"DaysAfterInitiation": 1})
        ], bucket


def test_env_reaches_etcd_with_the_sidecars_client(shell_env: dict[str, str]) -> None:
    settings = EtcdSettings(endpoints=tuple(shell_env["ETCD_ENDPOINTS"].split(",")))

    async def round_trip() -> bytes | None:
        store = await EtcdStore.connect(settings)
        try:
            await store.put("/learnerkit/dev-test", "ok")
            found = await store.get("/learnerkit/dev-test")
            return None if found is None else found[0]
        finally:
            await store.close()

    assert asyncio.run(round_trip()) == b"ok"


def test_upload_round_trip(state_dir: Path, shell_env: dict[str, str], tmp_path: Path) -> None:
    local = tmp_path / "dataset"
    (local / "train").mkdir(parents=True)
    files = {"train/a.bin": os.urandom(300_000), "train/b.txt": b"b\n", "labels.csv": b"x,y\n1,2\n"}
    for name, data in files.items():
        (local / name).write_bytes(data)

    result = dev_json(state_dir, "upload", str(local), "s3://training-data/sample")

    assert sorted(obj["key"] for obj in result["objects"]) == sorted(f"sample/{name}" for name in files)
    assert result["total_bytes"] == sum(len(data) for data in files.values())
    client = s3(shell_env)
    for name, data in files.items():
        assert client.get_object(Bucket="training-data", Key=f"sample/{name}")["Body"].read() == data


def test_a_killed_service_is_seen_as_stale_and_restarted(state_dir: Path, started: dict[str, int]) -> None:
    etcd_pid = pids(state_dir)["etcd"]
    os.kill(etcd_pid, signal.SIGKILL)
    wait_until(lambda: not is_alive(etcd_pid, None), message="etcd to die")
    rows = {row["name"]: row for row in dev_json(state_dir, "status")}
    assert (rows["etcd"]["state"], rows["etcd"]["healthy"]) == ("stale", False)

    rows = {row["name"]: row for row in dev_json(state_dir, "up", "--any-port")}
    assert rows["etcd"]["action"] == f"restarted (pid {etcd_pid} was stale)"
    assert rows["s3"]["action"] == "already running"
    assert all(row["healthy"] for row in dev_json(state_dir, "status"))


def test_down_leaves_nothing_running_and_no_state(state_dir: Path, started: dict[str, int]) -> None:
    running = pids(state_dir)
    rows = dev_json(state_dir, "down")
    assert sorted((row["name"], row["action"]) for row in rows) == [
        ("etcd", "stopped"),
        ("registry", "stopped"),
        ("s3", "stopped"),
    ]
    assert not any(is_alive(pid, None) for pid in running.values())
    assert not (state_dir / "state.json").exists()
    assert dev(state_dir, "env", check=False).returncode == 1
    assert [row["state"] for row in dev_json(state_dir, "status")] == ["stopped", "stopped", "stopped"]


@pytest.mark.skipif(
    shutil.which("prometheus") is None,
    reason="prometheus is not installed (Debian package prometheus): the optional Prometheus service was not tested",
)
def test_prometheus_starts_answers_ready_and_scrapes_etcd(tmp_path: Path) -> None:
    folder = tmp_path / "services"
    try:
        rows = {row["name"]: row for row in dev_json(folder, "up", "--any-port", "--with-prometheus")}
        assert rows["prometheus"]["action"] == "started"
        url = rows["prometheus"]["endpoint"]
        with urllib.request.urlopen(f"{url}/-/ready", timeout=5) as response:
            assert response.status == 200
        etcd_metrics = f"{rows['etcd']['endpoint']}/metrics"

        def etcd_scraped() -> bool:
            with urllib.request.urlopen(f"{url}/api/v1/targets", timeout=5) as response:
                targets = json.load(response)["data"]["activeTargets"]
            return any(t["scrapeUrl"] == etcd_metrics and t["health"] == "up" for t in targets)

        wait_until(etcd_scraped, timeout=60, interval=0.5, message=f"Prometheus to scrape {etcd_metrics}")
        again = {row["name"]: row["action"] for row in dev_json(folder, "up", "--any-port")}
        assert again["prometheus"] == "already running"  # kept without --with-prometheus once started
    finally:
        dev(folder, "down", check=False)
    assert not (folder / "state.json").exists()
