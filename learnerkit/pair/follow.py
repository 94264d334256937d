"""Follow a running pair: stream the sidecar's output until it exits, then make sure the learner ends."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from learnerkit.pair.docker import PairHandle, container, exit_code

LEARNER_EXIT_WAIT_S = 30.0


@dataclass(frozen=True)
class PairEnd:
    sidecar_exit: int | None
    learner_exit: int | None


def stream_sidecar(handle: PairHandle, on_line: Callable[[str], None]) -> threading.Thread:
    """A daemon thread that passes each line the sidecar prints to ``on_line`` until the container ends."""

    def pump() -> None:
        found = container(handle.sidecar)
        if found is None:
            return
        pending = b""
        for chunk in found.logs(stream=True, follow=True, stdout=True, stderr=True):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                on_line(line.decode("utf-8", "replace"))
        if pending:
            on_line(pending.decode("utf-8", "replace"))

    thread = threading.Thread(target=pump, name=f"follow-{handle.name}", daemon=True)
    thread.start()
    return thread


def wait_pair(handle: PairHandle, timeout_s: float | None = None) -> PairEnd:
    """Wait for the sidecar to exit (it exits after the terminal status), then for the learner."""
    sidecar = container(handle.sidecar)
    if sidecar is not None:
        sidecar.wait(timeout=timeout_s)
    learner = container(handle.learner)
    if learner is not None and exit_code(handle.learner) is None:
        # The sidecar ended: the learner has written learner.exit or was lost; let it finish, then stop it.
        learner.stop(timeout=int(LEARNER_EXIT_WAIT_S))
    return PairEnd(exit_code(handle.sidecar), exit_code(handle.learner))
