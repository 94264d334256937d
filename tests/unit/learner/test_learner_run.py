"""learner-run as a real subprocess on the host: start/halt control files, tee, signals, exit file, env."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from learner.run import supervise
from learner.run.errors import ConfigError
from learner.run.exitfile import Reason
from learner.run.scrub import scrub_env
from learner.run.settings import SHELL, RunSettings, parse_signal, settings_from
from tests.waiting import stays_true, wait_until

pytestmark = pytest.mark.timeout(30)

REPO = Path(__file__).resolve().parents[3]
LEARNER_RUN = REPO / "learner_base" / "bin" / "learner-run"
PY = sys.executable

READY_THEN_WAIT = """
import signal, sys, time
{setup}
print("ready", flush=True)
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    time.sleep(0.01)
sys.exit(99)
"""


def script(setup: str = "") -> list[str]:
    """A Python command that installs ``setup``, prints ``ready`` and then waits (at most 20 s)."""
    return [PY, "-c", READY_THEN_WAIT.format(setup=textwrap.dedent(setup))]


@dataclass
class Job:
    root: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def state(self) -> Path:
        return self.root / "control"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def log(self) -> Path:
        return self.logs / "learner.log"

    @property
    def stdout(self) -> Path:
        return self.root / "stdout.bin"

    @property
    def stderr(self) -> Path:
        return self.root / "stderr.txt"

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": str(REPO / "learner_base"),
            "JOB_STATE_DIR": str(self.state),
            "LOG_DIR": str(self.logs),
            "DATA_DIR": str(self.root / "data"),
            "LEARNER_POLL_INTERVAL": "0.02",
        }
        env.update(extra or {})
        return env

    def start_file(self) -> None:
        self.state.mkdir(parents=True, exist_ok=True)
        (self.state / "start").touch()

    def halt_file(self) -> None:
        self.state.mkdir(parents=True, exist_ok=True)
        (self.state / "halt").touch()

    def spawn(
        self, args: list[str], env: Mapping[str, str] | None = None, *, start: bool = True
    ) -> subprocess.Popen[bytes]:
        if start:
            self.start_file()
        with self.stdout.open("wb") as out, self.stderr.open("wb") as err:
            proc = subprocess.Popen([PY, str(LEARNER_RUN), *args], stdout=out, stderr=err, env=self.env(env))
        self.procs.append(proc)
        return proc

    def run(self, args: list[str], env: Mapping[str, str] | None = None, *, start: bool = True) -> int:
        return self.spawn(args, env, start=start).wait(timeout=20)

    def wait_for_log(self, needle: bytes) -> None:
        wait_until(lambda: self.log.exists() and needle in self.log.read_bytes(), message=f"{needle!r} in log")

    def exit_record(self) -> dict[str, Any]:
        record: dict[str, Any] = json.loads((self.state / "learner.exit").read_text())
        return record

    def stderr_text(self) -> str:
        return self.stderr.read_text()


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Job]:
    j = Job(tmp_path)
    yield j
    for proc in j.procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)


def assert_exit(job: Job, rc: int, reason: str, exit_code: int, sig: str | None = None) -> dict[str, Any]:
    record = job.exit_record()
    assert (record["reason"], record["exit_code"], record["signal"]) == (reason, exit_code, sig), record
    assert rc == exit_code, "learner-run's own exit status is the command's exit_code"
    assert record["finished_at"].endswith("Z")
    assert "Traceback" not in job.stderr_text()
    return record


def process_gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


# --- start ---------------------------------------------------------------------------------------------


def test_waits_for_start_file(job: Job) -> None:
    marker = job.root / "ran"
    proc = job.spawn([PY, "-c", f"open({str(marker)!r}, 'w').close()"], start=False)
    stays_true(lambda: proc.poll() is None and not marker.exists(), 0.3, message="waiting without running")
    job.start_file()
    rc = proc.wait(timeout=10)
    assert marker.exists()
    record = assert_exit(job, rc, "completed", 0)
    assert record["started_at"] <= record["finished_at"]


def test_start_timeout(job: Job) -> None:
    rc = job.run([PY, "-c", "raise SystemExit(5)"], {"LEARNER_START_TIMEOUT": "0.2"}, start=False)
    record = assert_exit(job, rc, "start_timeout", 124)
    assert record["started_at"] is None
    assert not job.log.exists() or job.log.read_bytes() == b""
    assert "LEARNER_START_TIMEOUT" in job.stderr_text()


def test_halt_before_start_does_not_run_the_command(job: Job) -> None:
    marker = job.root / "ran"
    proc = job.spawn([PY, "-c", f"open({str(marker)!r}, 'w').close()"], start=False)
    wait_until(lambda: job.state.is_dir(), message="learner-run to create the control dir")
    job.halt_file()
    rc = proc.wait(timeout=10)
    record = assert_exit(job, rc, "halted_before_start", 0)
    assert record["halt_requested"] is True
    assert not marker.exists()


# --- command modes and output -------------------------------------------------------------------------


def test_argv_mode_runs_without_a_shell(job: Job) -> None:
    rc = job.run(["--", PY, "-c", "import sys; print(sys.argv[1:])", "$HOME", "a b", ";"])
    assert_exit(job, rc, "completed", 0)
    assert job.log.read_bytes() == b"['$HOME', 'a b', ';']\n"
    assert job.stdout.read_bytes() == job.log.read_bytes()


def test_learner_command_mode_uses_bash(job: Job) -> None:
    rc = job.run([], {"LEARNER_COMMAND": 'echo "job=$JOB_ID" && [[ -n $BASH_VERSION ]] && exit 3', "JOB_ID": "j1"})
    assert_exit(job, rc, "failed", 3)
    assert job.log.read_bytes() == b"job=j1\n"


def test_command_runs_in_model_dir_placed_after_learner_run_started(job: Job) -> None:
    """FfDL ran ``cd $MODEL_DIR`` before the command: relative paths and the model's own modules work, also
    when the sidecar put the folder there (by renaming) after learner-run started."""
    model = job.root / "model"
    proc = job.spawn([], {"LEARNER_COMMAND": f"{PY} train.py --arg x", "MODEL_DIR": str(model)}, start=False)
    staged = job.root / ".model-staged"
    staged.mkdir()
    (staged / "helper.py").write_text("WORD = 'from-helper'\n")
    (staged / "train.py").write_text("import os, sys, helper\nprint(helper.WORD, sys.argv[1:], os.getcwd())\n")
    staged.rename(model)
    job.start_file()
    assert_exit(job, proc.wait(timeout=20), "completed", 0)
    assert job.log.read_text() == f"from-helper ['--arg', 'x'] {model}\n"


def test_without_a_model_dir_the_command_runs_where_learner_run_does(job: Job) -> None:
    rc = job.run(["--", PY, "-c", "import os; print(os.getcwd())"], {"MODEL_DIR": str(job.root / "absent")})
    assert_exit(job, rc, "completed", 0)
    assert job.log.read_text() == f"{Path.cwd()}\n"


def test_no_command_is_a_clear_error(job: Job) -> None:
    rc = job.run([])
    assert rc == 2
    err = job.stderr_text()
    assert err.startswith("learner-run: no command") and err.count("\n") == 1
    record = job.exit_record()
    assert (record["reason"], record["exit_code"]) == ("failed", 2)


@pytest.mark.parametrize(
    ("variable", "value"),
    [("LEARNER_HALT_GRACE", "soon"), ("LEARNER_HALT_SIGNAL", "SIGFOO"), ("LEARNER_START_TIMEOUT", "-1")],
)
def test_bad_setting_names_the_variable(job: Job, variable: str, value: str) -> None:
    rc = job.run([PY, "-c", "pass"], {variable: value})
    assert rc == 2
    err = job.stderr_text()
    assert err.startswith(f"learner-run: {variable} ") and value in err and "Traceback" not in err


def test_unwritable_log_dir_is_a_clear_error(job: Job) -> None:
    rc = job.run([PY, "-c", "pass"], {"LOG_DIR": "/proc/learnerkit-no-such-dir"})
    assert rc == 2
    err = job.stderr_text()
    assert err.startswith("learner-run: cannot create /proc/learnerkit-no-such-dir")
    assert "Traceback" not in err


def test_missing_executable_exits_127(job: Job) -> None:
    rc = job.run(["learnerkit-no-such-program"])
    record = assert_exit(job, rc, "failed", 127)
    assert "learnerkit-no-such-program" in record["error"]
    assert b"learnerkit-no-such-program" in job.log.read_bytes()


def test_tee_is_byte_exact_with_binary_and_a_5mb_line(job: Job) -> None:
    code = textwrap.dedent(
        """
        import os
        def out(fd, data):
            while data:
                data = data[os.write(fd, data):]
        out(1, b"\\xff\\xfe\\x00 not utf-8 \\xc3\\x28\\r\\n")
        out(2, b"to stderr\\n")
        out(1, b"x" * (5 * 1024 * 1024) + b"\\n")
        out(1, b"".join(b"line %d\\n" % i for i in range(20000)))
        out(1, b"no newline at the end")
        """
    )
    expected = (
        b"\xff\xfe\x00 not utf-8 \xc3\x28\r\n"
        + b"to stderr\n"
        + b"x" * (5 * 1024 * 1024)
        + b"\n"
        + b"".join(b"line %d\n" % i for i in range(20000))
        + b"no newline at the end"
    )
    rc = job.run([PY, "-c", code])
    assert_exit(job, rc, "completed", 0)
    assert job.log.read_bytes() == expected
    assert job.stdout.read_bytes() == expected


def test_log_is_appended_not_truncated(job: Job) -> None:
    job.logs.mkdir(parents=True)
    job.log.write_bytes(b"earlier run\n")
    job.run([PY, "-c", "print('again')"])
    assert job.log.read_bytes() == b"earlier run\nagain\n"


# --- ends ---------------------------------------------------------------------------------------------


def test_completed_exit_file_is_atomic_and_replaces_a_stale_one(job: Job) -> None:
    job.state.mkdir(parents=True)
    (job.state / "learner.exit").write_text('{"reason": "stale"}')
    rc = job.run([PY, "-c", "pass"])
    record = assert_exit(job, rc, "completed", 0)
    assert record["halt_requested"] is False and record["error"] is None
    assert sorted(p.name for p in job.state.iterdir()) == ["learner.exit", "start"]


def test_failed(job: Job) -> None:
    rc = job.run([PY, "-c", "raise SystemExit(7)"])
    assert_exit(job, rc, "failed", 7)


def test_killed_by_sigkill_not_sent_by_learner_run(job: Job) -> None:
    rc = job.run([PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    assert_exit(job, rc, "killed", 137, "SIGKILL")


def test_halted_command_exits_within_grace(job: Job) -> None:
    proc = job.spawn(script('signal.signal(signal.SIGTERM, lambda *_: (print("saving", flush=True), sys.exit(0)))'))
    job.wait_for_log(b"ready")
    job.halt_file()
    rc = proc.wait(timeout=10)
    record = assert_exit(job, rc, "halted", 0)
    assert record["halt_requested"] is True
    assert job.log.read_bytes() == b"ready\nsaving\n"


def test_halt_with_default_sigterm_disposition(job: Job) -> None:
    proc = job.spawn(script())
    job.wait_for_log(b"ready")
    job.halt_file()
    assert_exit(job, proc.wait(timeout=10), "halted", 143, "SIGTERM")


def test_halt_signals_the_whole_process_group(job: Job) -> None:
    pid_file = job.root / "bg.pid"
    child = "import time; print('ready', flush=True); time.sleep(20)"
    command = f'sleep 60 & echo $! > {pid_file}; exec {PY} -c "{child}"'
    proc = job.spawn([], {"LEARNER_COMMAND": command})
    job.wait_for_log(b"ready")
    background = int(pid_file.read_text())
    job.halt_file()
    assert_exit(job, proc.wait(timeout=10), "halted", 143, "SIGTERM")
    wait_until(lambda: process_gone(background), message="the background sleep to end")


def test_halt_timeout_kills_after_grace(job: Job) -> None:
    proc = job.spawn(script("signal.signal(signal.SIGTERM, signal.SIG_IGN)"), {"LEARNER_HALT_GRACE": "0.5"})
    job.wait_for_log(b"ready")
    job.halt_file()
    rc = proc.wait(timeout=10)
    assert_exit(job, rc, "halt_timeout", 137, "SIGKILL")


def test_custom_halt_signal(job: Job) -> None:
    setup = """
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(9))
        signal.signal(signal.SIGINT, lambda *_: (print("got SIGINT", flush=True), sys.exit(0)))
    """
    proc = job.spawn(script(setup), {"LEARNER_HALT_SIGNAL": "INT"})
    job.wait_for_log(b"ready")
    job.halt_file()
    assert_exit(job, proc.wait(timeout=10), "halted", 0)
    assert b"got SIGINT" in job.log.read_bytes()


def test_sigterm_to_learner_run_is_forwarded(job: Job) -> None:
    proc = job.spawn(script())
    job.wait_for_log(b"ready")
    proc.send_signal(signal.SIGTERM)
    record = assert_exit(job, proc.wait(timeout=10), "terminated", 143, "SIGTERM")
    assert record["halt_requested"] is False


def test_second_sigint_kills_at_once(job: Job) -> None:
    proc = job.spawn(script("signal.signal(signal.SIGTERM, signal.SIG_IGN)"), {"LEARNER_HALT_GRACE": "60"})
    job.wait_for_log(b"ready")
    proc.send_signal(signal.SIGINT)
    stays_true(lambda: proc.poll() is None, 0.2, message="the command surviving the ignored SIGTERM")
    proc.send_signal(signal.SIGINT)
    assert_exit(job, proc.wait(timeout=10), "terminated", 137, "SIGKILL")


def test_sigterm_before_start(job: Job) -> None:
    proc = job.spawn([PY, "-c", "pass"], start=False)
    wait_until(lambda: job.state.is_dir(), message="learner-run to create the control dir")
    proc.send_signal(signal.SIGTERM)
    record = assert_exit(job, proc.wait(timeout=10), "terminated", 143)
    assert record["started_at"] is None


# --- environment --------------------------------------------------------------------------------------


def test_platform_variables_are_scrubbed(job: Job) -> None:
    dump = job.root / "env.json"
    extra = {
        "AWS_SECRET_ACCESS_KEY": "x",
        "ETCD_PASSWORD": "x",
        "LEARNERKIT_S3_TOKEN": "x",
        "S3_ENDPOINT": "x",
        "DB_PASSWORD": "x",
        "MY_EXTRA": "x",
        "OTHER_THING": "x",
        "LEARNER_SCRUB": "MY_EXTRA, other_*",
        "JOB_ID": "job-1",
        "LEARNER_ID": "2",
        "MASTER_ADDR": "learner-1",
        "DMLC_ROLE": "worker",
        "TOKENIZERS_PARALLELISM": "false",
    }
    rc = job.run([PY, "-c", f"import json, os; json.dump(dict(os.environ), open({str(dump)!r}, 'w'))"], extra)
    assert_exit(job, rc, "completed", 0)
    env = json.loads(dump.read_text())
    gone = {"AWS_SECRET_ACCESS_KEY", "ETCD_PASSWORD", "LEARNERKIT_S3_TOKEN", "S3_ENDPOINT", "DB_PASSWORD"}
    gone |= {"MY_EXTRA", "OTHER_THING", "LEARNER_SCRUB"}
    assert gone.isdisjoint(env)
    kept = {"JOB_ID", "LEARNER_ID", "DATA_DIR", "MASTER_ADDR", "DMLC_ROLE", "TOKENIZERS_PARALLELISM", "PATH"}
    assert kept <= set(env)


def test_scrub_env_patterns() -> None:
    environ = {
        "aws_region": "1",
        "HF_TOKEN": "1",
        "X_CREDENTIALS_FILE": "1",
        "MYACCESS_KEY_ID": "1",
        "RANK": "0",
    }
    assert scrub_env(environ) == {"RANK": "0"}
    assert scrub_env({"A": "1", "B": "2"}, ["a"]) == {"B": "2"}


# --- settings and health ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "want"),
    [(None, signal.SIGTERM), ("SIGINT", signal.SIGINT), ("term", signal.SIGTERM), ("10", signal.SIGUSR1)],
)
def test_parse_signal(raw: str | None, want: signal.Signals) -> None:
    assert parse_signal("LEARNER_HALT_SIGNAL", raw) is want


def test_settings_from_environment() -> None:
    settings = settings_from([], {"LEARNER_COMMAND": "python t.py", "LEARNER_HALT_GRACE": "1.5"})
    assert settings.command == (SHELL, "-c", "python t.py")
    assert settings.halt_grace_s == 1.5 and settings.start_timeout_s is None
    assert settings.state_dir == Path("/job/control")
    assert settings_from(["python", "t.py"], {"LEARNER_COMMAND": "ignored"}).command == ("python", "t.py")
    with pytest.raises(ConfigError, match="LEARNER_POLL_INTERVAL"):
        settings_from(["x"], {"LEARNER_POLL_INTERVAL": "0"})


def test_health(job: Job) -> None:
    env = job.env()
    check = [PY, str(LEARNER_RUN), "--health"]
    failed = subprocess.run(check, env=env, capture_output=True, text=True, timeout=10)
    assert failed.returncode == 1 and failed.stderr.startswith("learner-run: unhealthy: JOB_STATE_DIR")
    job.state.mkdir()
    job.logs.mkdir()
    ok = subprocess.run(check, env=env, capture_output=True, text=True, timeout=10)
    assert ok.returncode == 0, ok.stderr


def test_background_processes_left_behind_do_not_hang_learner_run(job: Job) -> None:
    pid_file = job.root / "bg.pid"
    rc = job.run([], {"LEARNER_COMMAND": f"sleep 60 & echo $! > {pid_file}; echo done"})
    assert_exit(job, rc, "completed", 0)
    assert job.log.read_bytes() == b"done\n"
    wait_until(lambda: process_gone(int(pid_file.read_text())), message="the background sleep to be killed")


# --- a sweep trial's parameters ------------------------------------------------------------------------


def test_a_trial_s_parameters_are_written_to_a_json_file_before_the_command_starts(job: Job) -> None:
    show = "import json, os; print(json.load(open(os.environ['JOB_STATE_DIR'] + '/parameters.json')))"
    rc = job.run(["--", PY, "-c", show], {"LEARNER_PARAMETERS": '{"lr": 0.01, "width": 32}'})
    assert_exit(job, rc, "completed", 0)
    assert job.log.read_text() == "{'lr': 0.01, 'width': 32}\n"
    assert sorted(p.name for p in job.state.iterdir()) == ["learner.exit", "parameters.json", "start"]


def test_no_parameters_file_outside_a_sweep_and_a_bad_one_names_the_variable(job: Job) -> None:
    rc = job.run(["--", PY, "-c", "pass"])
    assert_exit(job, rc, "completed", 0)
    assert not (job.state / "parameters.json").exists()
    rc = job.run(["--", PY, "-c", "pass"], {"LEARNER_PARAMETERS": "[1, 2]"})
    assert rc == 2
    assert job.stderr_text().startswith("learner-run: LEARNER_PARAMETERS must be a JSON object, got list")


# --- a halt at the rung's budget, and a halt that comes as the command ends -------------------------------

AT_BUDGET = """
import sys
import learner
learner.install_halt_handler()
step = 0
while not learner.halt_requested():
    step += 1
    learner.log_metrics(step, loss=1.0)
print("stopped at", step, flush=True)
sys.exit(int(sys.argv[1]))
"""


@pytest.mark.parametrize(("code", "reason"), [(0, "completed"), (3, "failed")])
def test_a_command_halted_at_its_budget_by_the_helper_ends_as_it_exits(job: Job, code: int, reason: str) -> None:
    """No halt was asked of the platform: a HALTED job nobody halted would be resumed at once as stopped
    from outside. Exit 0 ends the job COMPLETED, which a sweep takes as its rung's result."""
    rc = job.run(["--", PY, "-c", AT_BUDGET, str(code)], {"LEARNER_BUDGET": "4"})
    assert assert_exit(job, rc, reason, code)["halt_requested"] is False
    assert job.log.read_bytes() == b"stopped at 4\n"
    assert json.loads((job.state / "budget.reached").read_text()) == {"budget": 4, "step": 4}


def test_a_stale_budget_file_is_removed_before_the_command_starts(job: Job) -> None:
    job.state.mkdir(parents=True)
    (job.state / "budget.reached").write_text("{}")
    rc = job.run(["--", PY, "-c", "import learner; print(learner.halt_requested())"])
    assert assert_exit(job, rc, "completed", 0)["halt_requested"] is False
    assert job.log.read_bytes() == b"False\n"


def test_a_halt_that_came_within_the_last_poll_before_the_exit_is_recorded(
    job: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command exits between learner-run's last look at `halt` and its next look at the command: the
    fake sleep writes `halt`, lets the command (blocked on a FIFO) exit, and waits for that exit, unreaped."""
    fifo = job.root / "release"
    os.mkfifo(fifo)
    job.state.mkdir(parents=True)
    started: list[subprocess.Popen[bytes]] = []

    class Recorded(subprocess.Popen[bytes]):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            started.append(self)

    def racing_sleep(_seconds: float) -> None:
        if (job.state / "halt").exists():
            return
        (job.state / "halt").touch()
        with fifo.open("wb"):  # the command's `cat` reads end of file and exits 0
            pass
        os.waitid(os.P_PID, started[0].pid, os.WEXITED | os.WNOWAIT)

    monkeypatch.setattr(supervise.subprocess, "Popen", Recorded)
    monkeypatch.setattr(supervise, "time", SimpleNamespace(sleep=racing_sleep, monotonic=time.monotonic))
    settings = RunSettings(command=("cat", str(fifo)), state_dir=job.state, log_dir=job.logs, halt_grace_s=5)
    supervise.prepare_dirs(settings)
    record = supervise.run_command(settings, supervise.StopSignals())
    assert (record.reason, record.exit_code, record.halt_requested) == (Reason.HALTED, 0, True)
