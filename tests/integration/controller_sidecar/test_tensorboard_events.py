"""The sidecar's TensorBoard reader on event files written by TensorFlow's and PyTorch's own writers, run
inside the learner images: both scalar encodings, files that grow and appear, and damaged records."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from controller_sidecar.evalmetrics import MetricUpdate
from controller_sidecar.tensorboard import EventFolder
from controller_sidecar.tfevents import HEADER_BYTES
from learnerkit_build.render import BuildInputs
from tests.integration.tbwriters import PYTORCH, TENSORFLOW, learner_image, write_events

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
