"""Where ``evaluation_metrics.in`` points, how the history of TensorBoard scalars is kept and stored, and that
jobs without TensorBoard metrics never import the reader. (The reader itself is tested on files written by
TensorFlow's and PyTorch's own writers: tests/integration/controller_sidecar/test_tensorboard_events.py.)"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import IO

import pytest

from controller_sidecar.errors import SidecarConfigError, TransientError
from controller_sidecar.evalmetrics import MetricUpdate, parse_evaluation_metrics
from controller_sidecar.jobdirs import JobDirs
from controller_sidecar.processing import MetricsHistory, ship_metrics, stored_metrics, tensorboard_events
from controller_sidecar.settings import load_settings
from controller_sidecar.tensorboard import event_folder
from controller_sidecar.tfevents import masked_crc32c

DIRS = JobDirs(Path("/srv/job-7"))


@pytest.mark.parametrize(
    ("location", "folder"),
    [
        (None, "/srv/job-7/logs"),
        ("$JOB_STATE_DIR/logs/tb", "/srv/job-7/control/logs/tb"),
        ("${LOG_DIR}/tb", "/srv/job-7/logs/tb"),
        ("$RESULT_DIR", "/srv/job-7/results"),
        ("/job/logs/tb/", "/srv/job-7/logs/tb"),
        ("/job", "/srv/job-7"),
        ("tb/train", "/srv/job-7/logs/tb/train"),
    ],
)
def test_in_is_read_as_the_learner_spells_its_folders(location: str | None, folder: str) -> None:
    assert event_folder(location, DIRS) == Path(folder)


@pytest.mark.parametrize(
    ("location", "message"),
    [
        ("$HOME/tb", "unknown variable $HOME"),
        ("/etc/tb", "outside the job folder /job"),
        ("/jobs/tb", "outside the job folder /job"),
        ("../../etc", "'..' segment"),
        ("$LOG_DIR/../../etc", "'..' segment"),
    ],
)
def test_an_in_outside_the_job_folder_is_refused_by_field(location: str, message: str) -> None:
    with pytest.raises(SidecarConfigError, match=r"^evaluation_metrics\.in: .*") as refused:
        event_folder(location, DIRS)
    assert message in str(refused.value)


def test_only_a_tensorboard_section_makes_an_event_folder() -> None:
    tensorboard = parse_evaluation_metrics({"type": "tensorboard", "in": "$LOG_DIR/tb"})
    made = tensorboard_events(tensorboard, DIRS)
    assert made is not None and made.root == Path("/srv/job-7/logs/tb")
    regex = parse_evaluation_metrics(
        {"type": "regex_extractor", "groups": {"g": {"regex": "l=(?P<l>.*)", "scalars": {"l": "$l"}}}}
    )
    assert tensorboard_events(regex, DIRS) is None
    assert tensorboard_events(None, DIRS) is None


def test_a_sidecar_without_tensorboard_metrics_never_imports_the_reader() -> None:
    code = (
        "import sys; from controller_sidecar import runtime; "
        "print(sorted(m for m in ('controller_sidecar.tensorboard', 'controller_sidecar.tfevents', 'google_crc32c') "
        "if m in sys.modules))"
    )
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == "[]"


def test_the_masked_crc_is_tensorflows() -> None:
    # TensorFlow's crc32c_test: the CRC32C of 32 zero bytes is 0x8a9136aa; masked as TFRecord does.
    crc = 0x8A9136AA
    assert masked_crc32c(bytes(32)) == ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def test_the_history_groups_one_steps_scalars_and_is_stored_after_the_learners_own_lines(tmp_path: Path) -> None:
    dirs = JobDirs(tmp_path)
    dirs.logs.mkdir()
    dirs.control.mkdir()
    (dirs.logs / "metrics.jsonl").write_text('{"step": 1, "time": 5.0, "values": {"acc": 0.5}}')  # no newline
    history = MetricsHistory(dirs.control, "tensorboard")
    history.add(
        [
            MetricUpdate("train/loss", 0.5, 1, 10.0),
            MetricUpdate("train/lr", 0.1, 1, 10.0),
            MetricUpdate("train/loss", 0.25, 2, 11.0),
        ]
    )
    assert list(dirs.control.iterdir()) == [], "the history has no name the learner could replace"
    stored = stored_metrics(dirs, history)
    assert stored is not None
    lines = [json.loads(line) for line in stored.read().splitlines()]
    assert lines == [
        {"step": 1, "time": 5.0, "values": {"acc": 0.5}},
        {"step": 1, "time": 10.0, "values": {"train/loss": 0.5, "train/lr": 0.1}, "source": "tensorboard"},
        {"step": 2, "time": 11.0, "values": {"train/loss": 0.25}, "source": "tensorboard"},
    ]
    history.add([MetricUpdate("train/loss", 0.125, 3, 12.0)])
    again = stored_metrics(dirs, history)
    assert again is not None and len(again.read().splitlines()) == 4, "the history goes on after a store"


def test_nothing_is_stored_without_metrics(tmp_path: Path) -> None:
    dirs = JobDirs(tmp_path)
    dirs.logs.mkdir()
    dirs.control.mkdir()
    assert stored_metrics(dirs, None) is None
    assert stored_metrics(dirs, MetricsHistory(dirs.control, "tensorboard")) is None


def test_the_history_is_stored_while_it_grows_and_a_failed_store_is_tried_again(tmp_path: Path) -> None:
    doc = {"job_id": "job-1", "learner_id": 1, "results": {"bucket": "results"}, "data": {"mode": "mount"}}
    doc |= {"job_dir": str(tmp_path), "timing": {"metrics_ship_interval_s": 0.01}}
    env = {"ETCD_ENDPOINTS": "127.0.0.1:2379", "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
    settings = load_settings({**env, "LEARNERKIT_SIDECAR_CONFIG_JSON": json.dumps(doc)})
    settings.dirs.logs.mkdir()
    settings.dirs.control.mkdir()
    history = MetricsHistory(settings.dirs.control, "tensorboard")
    stored: list[bytes] = []
    failures = [TransientError("the store is away")]

    async def upload(handle: IO[bytes]) -> None:
        if failures:
            raise failures.pop()
        stored.append(handle.read())

    async def scenario() -> None:
        stop = asyncio.Event()
        shipping = asyncio.create_task(ship_metrics(settings, history, upload, stop))
        history.add([MetricUpdate("loss", 0.5, 1, 10.0)])
        while not stored:
            await asyncio.sleep(0.01)
        history.add([MetricUpdate("loss", 0.25, 2, 11.0)])
        while len(stored) < 2:
            await asyncio.sleep(0.01)
        stop.set()
        await shipping

    asyncio.run(asyncio.wait_for(scenario(), timeout=30))
    assert failures == [], "the first store failed"
    assert [len(data.splitlines()) for data in stored] == [1, 2]
