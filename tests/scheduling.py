"""The order in which `make test`'s workers take test files: the real-cluster tier's files first.

`--dist loadfile` hands each worker whole files, and pytest-xdist queues them by how many tests each holds, the
most first. The real-cluster tier's files (tests/k8s) hold one to nine tests that run minutes each, so they came
last and ran alone at the end while the other workers had nothing left (docs/testing.md, "The order of the
files"). Only the queue's order changes; what a worker runs, and how, is pytest-xdist's own.
"""

from __future__ import annotations

from xdist.scheduler import LoadFileScheduling
from xdist.workermanage import WorkerController

LONG_FILES = "tests/k8s/"
"""Files whose few tests each run minutes: handed out before any other."""


class LongestFirstFileScheduling(LoadFileScheduling):
    """pytest-xdist's ``loadfile`` with the files under `LONG_FILES` handed out first, each part in its order."""

    def _assign_work_unit(self, node: WorkerController) -> None:
        long_file = next((scope for scope in self.workqueue if scope.startswith(LONG_FILES)), None)
        if long_file is not None:
            self.workqueue.move_to_end(long_file, last=False)
        super()._assign_work_unit(node)
