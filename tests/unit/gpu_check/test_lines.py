"""What `make gpu-check` computes and prints from its runs: step times, checkpoint write times, the overhead
ratios of alternated runs, and the lines a reader compares with docs/gpu.md."""

import json

import pytest

from tests.unit.gpu_check.scripts import gpu_measure

measure = gpu_measure()


def h200_run(write_s: list[float]) -> object:
    summary = measure.Summary(device="cuda:0", start_step=1511, final_step=3000, loss=1.7e-05, accuracy=1.0)
    return measure.HaltResume(
        halt_after=1500,
        halted_in_s=0.19,
        halted_at=1510,
        checkpoint_bytes=7367,
        checkpoint_files=1,
        checkpoint_write_s=write_s,
        summary=summary,
    )


def test_step_times_keep_the_last_line_of_a_step_and_name_a_bad_line() -> None:
    lines = [json.dumps({"step": 1, "time": 10.0, "values": {}}), "", json.dumps({"step": 1, "time": 12.5})]
    assert measure.step_times(lines) == {1: 12.5}
    with pytest.raises(ValueError, match=r"metrics.jsonl line 2: not a metrics record"):
        measure.step_times([lines[0], '{"step": 2}'])


def test_checkpoint_write_time_is_its_step_gap_less_a_plain_step() -> None:
    times, now = {}, 100.0
    for step in range(1, 11):
        times[step] = now
        now += 0.010 + (0.004 if step == 3 else 0.0) + (0.006 if step == 6 else 0.0)
    # step 10 has no next line and step 12 no line at all: left out, not guessed
    assert measure.checkpoint_write_times(times, [3, 6, 10, 12]) == pytest.approx([0.004, 0.006])
    assert measure.checkpoint_write_times(times, [10]) == []


def test_runs_alternate_and_each_mode_is_its_best_over_the_direct_best() -> None:
    planned = {
        measure.DIRECT: [10.0, 8.0, 9.0],
        measure.LEARNER_RUN: [7.8, 9.0, 9.5],
        measure.WITH_SAMPLER: [9.0, 8.2, 8.8],
    }
    calls: list[str] = []

    def run(mode: str) -> float:
        calls.append(mode)
        return planned[mode][sum(1 for c in calls if c == mode) - 1]

    times = measure.alternate(3, run)
    assert calls == list(measure.MODES) * 3
    assert times == planned
    assert measure.best_ratios(times) == pytest.approx(
        {measure.LEARNER_RUN: 7.8 / 8.0, measure.WITH_SAMPLER: 8.2 / 8.0}
    )
    with pytest.raises(ValueError, match=r"direct runs took 0\.0 s"):
        measure.best_ratios({**times, measure.DIRECT: [0.0]})


def test_lines_carry_the_figures_docs_gpu_md_records() -> None:
    run = h200_run([0.004, 0.0062, 0.005])
    assert measure.halt_line("pytorch", 3000, run) == (
        "job-sized pytorch: 3000 steps, halt asked once a checkpoint >= 1500 existed; "
        "exited halted in 0.19 s at checkpoint 1510, resumed at 1511, finished 3000 on cuda:0"
    )
    assert measure.checkpoint_line("pytorch", run) == (
        "checkpoint pytorch: 7367 bytes in 1 file; "
        "written in 5.0 ms (median of 3, from the step times in metrics.jsonl)"
    )
    assert measure.checkpoint_line("pytorch", h200_run([])).endswith(
        "write time not measured: no checkpoint between two logged steps of the resumed run"
    )
    times = {measure.DIRECT: [16.08, 14.95], measure.LEARNER_RUN: [15.72, 14.47], measure.WITH_SAMPLER: [17.75, 15.05]}
    assert measure.overhead_line("pytorch", 3000, times) == (
        "overhead pytorch: learner-run 0.97, learner-run+nvml 1.01 of direct "
        "(best of 2 alternated rounds of 3000 steps; direct best 14.95 s)"
    )
