"""The order `make test`'s workers take files in (tests/scheduling.py): the real-cluster tier's first."""

from __future__ import annotations

import pytest

from tests.scheduling import LongestFirstFileScheduling

TWO_NODES, JOBS = "tests/k8s/test_k8s_two_nodes.py", "tests/k8s/test_k8s_jobs.py"
FEW, SOME, MANY = "tests/unit/test_few.py", "tests/integration/test_some.py", "tests/unit/test_many.py"
COLLECTION = [
    *(f"{FEW}::test_{n}" for n in range(2)),
    *(f"{SOME}::test_{n}" for n in range(4)),
    f"{TWO_NODES}::test_a_lost_node",
    *(f"{JOBS}::test_{n}" for n in range(3)),
    *(f"{MANY}::test_{n}" for n in range(6)),
]


class Worker:
    """What the scheduler asks of a worker: it notes in ``handed`` each file it is first sent, and runs nothing."""

    def __init__(self, name: str, handed: list[str]) -> None:
        self.gateway = type("Gateway", (), {"id": name})()
        self.shutting_down = False
        self.pending: list[int] = []
        self.handed = handed

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.pending.extend(indexes)
        for index in indexes:
            if (file := COLLECTION[index].split("::")[0]) not in self.handed:
                self.handed.append(file)

    def shutdown(self) -> None:
        self.shutting_down = True


@pytest.mark.parametrize(
    ("reorder", "order"),
    [(True, [JOBS, TWO_NODES, MANY, SOME, FEW]), (False, [TWO_NODES, JOBS, FEW, SOME, MANY])],
    ids=["by-count", "as-collected"],
)
def test_the_real_cluster_files_go_out_first_each_part_in_xdists_order(
    pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch, reorder: bool, order: list[str]
) -> None:
    monkeypatch.setattr(pytestconfig.option, "loadscopereorder", reorder)
    monkeypatch.setattr(pytestconfig.option, "tx", ["2*popen"])  # as `-n 2` gives it
    scheduling = LongestFirstFileScheduling(pytestconfig)
    handed: list[str] = []
    workers = [Worker("gw0", handed), Worker("gw1", handed)]
    for worker in workers:
        scheduling.add_node(worker)  # type: ignore[arg-type]
        scheduling.add_node_collection(worker, COLLECTION)  # type: ignore[arg-type]
    scheduling.schedule()
    while busy := [worker for worker in workers if worker.pending]:
        for worker in busy:
            scheduling.mark_test_complete(worker, worker.pending.pop(0))  # type: ignore[arg-type]
    assert handed == order
    assert scheduling.tests_finished
