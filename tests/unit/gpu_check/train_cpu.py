"""A stand-in for a framework's smoke script, standard library only: counts steps on "cpu" under the learner
contract (metrics, a checkpoint every K steps and on halt, resume from the latest, summary.json), so that
scripts/gpu_measure.py's runs can be tested on a machine without a GPU or a framework. With STANDIN_HOLD_AT=N
it waits at step N, after its checkpoint, for learner-run's halt signal: the halt lands there whatever the
machine's load. It waits for the signal, not the halt file: a command that sees the file and exits before
learner-run's next poll (50 ms) is recorded in learner.exit as `completed`, not `halted`."""

import argparse
import json
import os
import signal
import time

import learner


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--checkpoint-every", type=int, required=True)
    args = parser.parse_args()
    pace_s = float(os.environ.get("SMOKE_MIN_STEP_SECONDS", "0"))
    hold_at = int(os.environ.get("STANDIN_HOLD_AT", "0"))
    learner.install_halt_handler()
    latest = learner.latest_checkpoint()
    start_step = 1 if latest is None else int((latest.path / "step").read_text()) + 1
    step = start_step - 1
    for step in range(start_step, args.steps + 1):
        began = time.monotonic()
        learner.log_metrics(step, loss=1.0 / step)
        time.sleep(max(0.0, pace_s - (time.monotonic() - began)))
        holding = step == hold_at
        if holding:  # from here learner-run's halt signal waits for sigwait, never lost
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        halted = learner.halt_requested()
        if halted or step % args.checkpoint_every == 0:
            with learner.new_checkpoint(step) as folder:
                (folder / "step").write_text(str(step))
        if holding and not halted:
            signal.sigwait({signal.SIGTERM})  # bounded by learner-run's halt grace and the test's timeout
            halted = True
        if halted:
            return
    summary = {"device": "cpu", "start_step": start_step, "final_step": step, "loss": 1.0 / step, "accuracy": 1.0}
    (learner.result_dir() / "summary.json").write_text(json.dumps(summary))


if __name__ == "__main__":
    main()
