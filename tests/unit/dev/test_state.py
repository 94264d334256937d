"""The dev services' state file, credentials, port choice and stale-pid logic (no etcd or S3 needed)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from learnerkit.common.errors import ConfigError
from learnerkit.dev.credentials import ACCESS_KEY_VAR, SECRET_KEY_VAR, ensure_credentials
from learnerkit.dev.detached import running
from learnerkit.dev.environment import DevServices
from learnerkit.dev.ports import LOOPBACK, choose_ports
from learnerkit.dev.process import is_alive, proc_stat, start_ticks
from learnerkit.dev.service import Launch, Service
from learnerkit.dev.state import DevState, ServiceRecord, load_state, save_state
from tests.waiting import wait_until


def record(name: str = "etcd", pid: int = 4242, target: str | None = "127.0.0.1:2379/metrics") -> ServiceRecord:
    return ServiceRecord(name, pid, 17, {"client": 2379}, "http://127.0.0.1:2379", f"/x/{name}.log", target)


def test_state_round_trips_and_lists_scrape_targets(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    state = DevState().with_record(record()).with_record(record("s3", 4343, None))
    save_state(path, state)
    loaded = load_state(path)
    assert loaded == state
    assert loaded.scrape_targets == ("127.0.0.1:2379/metrics",)
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # no temp file left behind


def test_an_empty_state_removes_the_file(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    save_state(path, DevState().with_record(record()))
    save_state(path, load_state(path).without("etcd"))
    assert not path.exists()
    assert load_state(path) == DevState()


@pytest.mark.parametrize(
    "text", ["{not json", '{"version": 99, "services": {}}', '{"version": 1, "services": {"x": {}}}']
)
def test_a_bad_state_file_is_a_config_error_naming_it(tmp_path: Path, text: str) -> None:
    path = tmp_path / "state.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=str(path)):
        load_state(path)


def test_credentials_are_generated_once_and_private(tmp_path: Path) -> None:
    path = tmp_path / "credentials.env"
    first = ensure_credentials(path)
    assert set(first) == {ACCESS_KEY_VAR, SECRET_KEY_VAR}
    assert path.stat().st_mode & 0o777 == 0o600
    assert ensure_credentials(path) == first


def test_a_taken_preferred_port_is_replaced_by_a_free_one() -> None:
    with socket.socket() as busy:
        busy.bind((LOOPBACK, 0))
        busy.listen()
        taken = busy.getsockname()[1]
        chosen = choose_ports({"a": taken, "b": taken})
    assert taken not in chosen.values()
    assert len(set(chosen.values())) == 2


def test_our_own_process_is_alive_only_with_its_start_time() -> None:
    ticks = start_ticks(os.getpid())
    assert ticks is not None
    assert is_alive(os.getpid(), ticks)
    assert is_alive(os.getpid(), None)
    assert not is_alive(os.getpid(), ticks + 1)  # the pid was reused by another process


def test_an_exited_process_and_a_zombie_are_not_alive() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    ticks = start_ticks(child.pid)
    wait_until(lambda: (stat := proc_stat(child.pid)) is not None and stat.state == "Z", message="a zombie")
    assert not is_alive(child.pid, ticks)
    child.wait()
    assert not is_alive(child.pid, ticks)


def test_proc_stat_reads_a_command_name_with_spaces_and_parentheses(tmp_path: Path) -> None:
    (tmp_path / "77").mkdir()
    fields = ["S", *(["0"] * 18), "12345", "0"]
    (tmp_path / "77" / "stat").write_text(f"77 (we ird) name) {' '.join(fields)}\n")
    stat = proc_stat(77, tmp_path)
    assert stat is not None
    assert (stat.state, stat.start_ticks) == ("S", 12345)


def _http_ready(launch: Launch) -> bool:
    try:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{launch.ports['http']}/", timeout=1) as response:
            return int(response.status) == 200
    except OSError:
        return False


HTTP_SERVICE = Service(
    name="http",
    ports={"http": 0},
    main_port="http",
    argv=lambda launch: [sys.executable, "-m", "http.server", "--bind", LOOPBACK, str(launch.ports["http"])],
    probe=_http_ready,
    start_timeout_s=20.0,
)
"""A third service, as the scheduler will be: the manager runs it without knowing what it is."""


@pytest.fixture
def http_services(tmp_path: Path) -> Iterator[DevServices]:
    services = DevServices(tmp_path / "services", (HTTP_SERVICE,))
    try:
        yield services
    finally:
        services.down()


def test_up_restarts_a_service_whose_pid_is_stale(http_services: DevServices) -> None:
    [started] = http_services.up(any_port=True)
    assert started.action == "started"
    [again] = http_services.up(any_port=True)
    assert (again.action, again.pid) == ("already running", started.pid)

    # Pretend the recorded process is another one (the pid reused after a reboot): it must not be trusted.
    state = load_state(http_services.state_path)
    old = state.services["http"]
    forged = ServiceRecord(old.name, old.pid, (old.start_ticks or 0) + 1, old.ports, old.endpoint, old.log)
    save_state(http_services.state_path, state.with_record(forged))
    [status] = http_services.status()
    assert (status.state, status.healthy) == ("stale", False)

    os.kill(old.pid, 9)
    wait_until(lambda: not running(old), message="the old server to die")
    [restarted] = http_services.up(any_port=True)
    assert restarted.action is not None and restarted.action.startswith("restarted")
    assert restarted.pid != old.pid
    [status] = http_services.status()
    assert (status.state, status.healthy) == ("running", True)


def test_a_restarted_service_keeps_its_recorded_ports_with_any_port(http_services: DevServices) -> None:
    http_services.up(any_port=True)
    old = load_state(http_services.state_path).services["http"]
    os.kill(old.pid, 9)
    wait_until(lambda: not running(old), message="the old server to die")
    [restarted] = http_services.up(any_port=True)
    assert restarted.action is not None and restarted.action.startswith("restarted")
    assert load_state(http_services.state_path).services["http"].ports == old.ports


def test_down_stops_and_removes_the_state(http_services: DevServices) -> None:
    [started] = http_services.up(any_port=True)
    record_ = load_state(http_services.state_path).services["http"]
    [stopped] = http_services.down()
    assert (stopped.name, stopped.action) == ("http", "stopped")
    assert not running(record_)
    assert not http_services.state_path.exists()
    assert started.pid == record_.pid


def test_two_ups_at_once_start_the_service_once_and_down_stops_it(http_services: DevServices) -> None:
    """up and down change the state under a lock: no second process starts unlisted, none is left running."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = [statuses for statuses in pool.map(lambda _: http_services.up(any_port=True), range(2))]
    assert sorted(str(status.action) for [status] in results) == ["already running", "started"]
    assert len({status.pid for [status] in results}) == 1
    recorded = load_state(http_services.state_path).services["http"]
    http_services.down()
    assert not running(recorded)
