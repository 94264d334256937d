"""The sidecar's TensorBoard reader on event files written by TensorFlow's and PyTorch's own writers, run
inside the learner images: both scalar encodings, files that grow and appear, and damaged records."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from controller_sidecar.evalmetrics import MetricUpdate
from controller_sidecar.status import Phase
from controller_sidecar.tensorboard import EventFolder
from controller_sidecar.tfevents import HEADER_BYTES
from learnerkit.pair.etcd import request_halt
from learnerkit_build.recipes.render import BuildInputs
from tests.integration.controller_sidecar.conftest import DATA_BUCKET, Pairs
from tests.integration.tbwriters import HERE, PYTORCH, TENSORFLOW, learner_image, write_events
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

STEPS = 5


def values(updates: list[MetricUpdate]) -> dict[str, list[tuple[int | None, float]]]:
    found: dict[str, list[tuple[int | None, float]]] = {}
    for update in updates:
        found.setdefault(update.name, []).append((update.step, round(update.value, 6)))
    return found


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory, build_inputs: BuildInputs) -> Path:
    """``tf/{train,test}`` and ``torch/train``, each with STEPS steps."""
    root = tmp_path_factory.mktemp("tfevents")
    for spec, script, folder in ((TENSORFLOW, "tf_scalars.py", "tf"), (PYTORCH, "torch_scalars.py", "torch")):
        printed = write_events(learner_image(spec, build_inputs), script, root / folder, STEPS)
        assert f"wrote {STEPS} steps" in printed, printed
    return root


def test_tensorflow_scalars_in_both_encodings(written: Path) -> None:
    folder = EventFolder(written / "tf")
    found = values(folder.poll())
    assert found == {
        "train/loss": [(step, round(1.0 / (step + 1), 6)) for step in range(STEPS)],  # TF2 tensor-encoded
        "test/accuracy": [(step, round(step / 10.0, 6)) for step in range(STEPS)],  # TF1 simple_value
    }, "the non-scalar tensor (plugin 'other') is skipped"
    assert folder.skipped_records == 0
    assert folder.poll() == [], "nothing is read twice"


def test_pytorch_summary_writer_scalars(written: Path) -> None:
    found = values(EventFolder(written / "torch").poll())
    assert found == {
        "train/loss": [(step, round(1.0 / (step + 1), 6)) for step in range(STEPS)],  # add_scalar: simple_value
        "train/lr": [(step, round(0.5**step, 6)) for step in range(STEPS)],  # new_style=True: a tensor
    }, "the histogram is skipped"


def test_a_growing_file_and_a_new_file_are_followed_without_repeats(written: Path, tmp_path: Path) -> None:
    whole = values(EventFolder(written / "torch").poll())
    source = next((written / "torch" / "train").iterdir()).read_bytes()
    target = tmp_path / "train" / "events.out.tfevents.1.host"
    target.parent.mkdir()
    folder = EventFolder(tmp_path)
    seen: list[MetricUpdate] = []
    for end in range(0, len(source) + 7, 7):  # the writer's bytes arriving 7 at a time
        target.write_bytes(source[:end])
        seen += folder.poll()
    assert values(seen) == whole
    (tmp_path / "eval").mkdir()
    shutil.copy(next((written / "tf" / "test").iterdir()), tmp_path / "eval" / "events.out.tfevents.2.host")
    assert [u.name for u in folder.poll()] == ["eval/accuracy"] * STEPS


def test_a_damaged_record_is_skipped_and_a_damaged_length_ends_the_file(written: Path, tmp_path: Path) -> None:
    source = bytearray(next((written / "torch" / "train").iterdir()).read_bytes())
    first_length = int.from_bytes(source[:8], "little")
    second = HEADER_BYTES + first_length + 4  # the file version event comes first, then the scalars
    data = bytearray(source)
    data[second + HEADER_BYTES + 2] ^= 0xFF  # inside the second record's data: its checksum fails
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "events.out.tfevents.1.host").write_bytes(bytes(data))
    folder = EventFolder(tmp_path / "a")
    damaged = values(folder.poll())
    assert folder.skipped_records == 1
    assert damaged["loss"] == [(step, round(1.0 / (step + 1), 6)) for step in range(1, STEPS)]
    assert (0, 1.0) not in damaged["loss"], "step 0's loss was in the damaged record"

    data = bytearray(source)
    data[second + 1] ^= 0xFF  # the second record's length: the framing is lost
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "events.out.tfevents.1.host").write_bytes(bytes(data))
    assert EventFolder(tmp_path / "b").poll() == []


def test_a_running_pair_publishes_and_stores_the_scalars_of_a_summary_writer(
    pairs: Pairs, build_inputs: BuildInputs
) -> None:
    """The sidecar follows a real SummaryWriter in a real pair: the latest values reach etcd, and the history
    is stored while the learner still runs (then once more when it has ended)."""
    pairs.s3_client.upload_file(str(HERE / "torch_scalars.py"), DATA_BUCKET, "tbw/torch_scalars.py")
    timing = {"halt_grace_s": 20.0, "log_ship_interval_s": 1.0, "poll_interval_s": 0.05, "metrics_ship_interval_s": 0.5}
    spec = pairs.spec(
        f"python3 /job/data/torch_scalars.py /job/logs/tb {STEPS} && exec sleep 600",
        data_prefix="tbw/",
        config={"evaluation_metrics": {"type": "tensorboard", "in": "$LOG_DIR/tb"}, "timing": timing},
    )
    spec = replace(spec, learner_image=learner_image(PYTORCH, build_inputs))
    handle = pairs.start(spec)
    key = f"{spec.job_id}/learner-1/logs/metrics.jsonl"

    def stored_history() -> list[dict[str, object]] | None:
        found = pairs.objects(key).get(key)
        lines = [json.loads(line) for line in found.splitlines()] if found else []
        return lines if len(lines) == 2 * STEPS else None  # SummaryWriter: one event (one line) per scalar

    history = wait_until(stored_history, timeout=240, interval=0.2, message=lambda: pairs.describe(handle, spec.job_id))
    running = pairs.status(spec.job_id)
    assert running is not None and running.phase is Phase.PROCESSING, "stored while the learner runs"
    assert {line["source"] for line in history} == {"tensorboard"}
    values = {name: [] for name in ("train/loss", "train/lr")}
    for line in history:
        for name, value in line["values"].items():  # type: ignore[attr-defined]
            values[name].append((line["step"], round(value, 6)))
    assert values == {
        "train/loss": [(step, round(1.0 / (step + 1), 6)) for step in range(STEPS)],
        "train/lr": [(step, round(0.5**step, 6)) for step in range(STEPS)],
    }
    assert pairs.metrics(spec.job_id)["train/loss"] == pytest.approx(1.0 / STEPS)

    request_halt(pairs.etcd_settings, spec.job_id)
    final = pairs.wait_terminal(handle, spec.job_id)
    assert final.phase is Phase.HALTED, pairs.describe(handle, spec.job_id)
    assert stored_history() == history
