"""`make gpu-check`'s runs on the CPU, with a stand-in training script under the real `learner-run` and
`learner` helper: the halt in the middle and the resume, a timed run, and the GPU requirement that fails here."""

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.unit.gpu_check.scripts import TRAIN_CPU, gpu_measure

measure = gpu_measure()
STEPS, EVERY, HALT_AFTER = 40, 5, 20


def training() -> object:
    return measure.Training(sys.executable, TRAIN_CPU, STEPS, EVERY, timeout_s=120.0)


def test_halted_in_the_middle_it_resumes_after_its_latest_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_HOLD_AT", str(HALT_AFTER))
    run = measure.halt_and_resume(training(), tmp_path, HALT_AFTER, pace_s=0.01)
    assert run.halted_at == HALT_AFTER
    assert max(measure.checkpoint_steps(tmp_path / "checkpoints")) == STEPS
    assert (run.summary.start_step, run.summary.final_step, run.summary.device) == (run.halted_at + 1, STEPS, "cpu")
    assert (run.checkpoint_files, run.checkpoint_bytes) == (1, len(str(run.halted_at)))
    assert run.halted_in_s > 0
    assert len(run.checkpoint_write_s) == len([25, 30, 35])  # 40, the last, has no step after it
    measure.require_resumed(run, STEPS)
    with pytest.raises(RuntimeError, match=r"resumed at \d+ \(want \d+\), ended at 40 \(want 41\)"):
        measure.require_resumed(run, STEPS + 1)


def test_a_halt_that_never_came_in_time_is_an_error_with_the_evidence(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"halt after checkpoint >= 41: .*'reason': 'completed'"):
        measure.halt_and_resume(training(), tmp_path, STEPS + 1, pace_s=0.0)


def test_every_timed_run_trains_from_scratch_and_must_be_on_a_gpu() -> None:
    opened: list[str] = []

    @contextmanager
    def sampler() -> Iterator[None]:
        opened.append("open")
        yield
        opened.append("closed")

    for mode in (measure.DIRECT, measure.LEARNER_RUN):
        with pytest.raises(RuntimeError, match="trained on cpu, not a GPU"):
            measure.timed_run(training(), mode, sampler)
    assert opened == []
    with pytest.raises(RuntimeError, match="trained on cpu, not a GPU"):
        measure.timed_run(training(), measure.WITH_SAMPLER, sampler)
    assert opened == ["open", "closed"]


def test_the_gpu_requirement_names_the_device() -> None:
    measure.require_gpu("cuda:0")
    measure.require_gpu("gpu:0")
    with pytest.raises(RuntimeError, match="trained on an unnamed device, not a GPU"):
        measure.require_gpu("")
