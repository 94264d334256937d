"""The suite's files start the slowest tiers first (tests/start_order.py)."""

from __future__ import annotations

import subprocess
import sys

from tests.integration.conftest import REPO
from tests.start_order import start_rank


def test_the_real_cluster_tiers_start_before_the_server_tests_and_the_unit_tests_last() -> None:
    nodeids = [
        "tests/unit/scheduler/test_a.py::test_one",
        "tests/integration/scheduler/test_b.py::test_two",
        "tests/k8s/test_k8s_nodes.py::test_three",
        "tests/e2e/test_k8s_cluster.py::test_four",
        "tests/unit/dev/test_c.py::test_five",
        "tests/integration/console/test_d.py::test_six",
    ]
    assert sorted(nodeids, key=start_rank) == [
        "tests/k8s/test_k8s_nodes.py::test_three",
        "tests/e2e/test_k8s_cluster.py::test_four",
        "tests/integration/scheduler/test_b.py::test_two",
        "tests/integration/console/test_d.py::test_six",
        "tests/unit/scheduler/test_a.py::test_one",
        "tests/unit/dev/test_c.py::test_five",
    ]


def test_files_named_unit_tests_first_are_collected_real_cluster_first() -> None:
    named = ["tests/unit/house/test_layout.py", "tests/integration/dev", "tests/k8s/test_k8s_folders.py"]
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *named],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    nodeids = [line for line in collected if "::" in line]
    ranks = [start_rank(nodeid) for nodeid in nodeids]
    assert nodeids[0].startswith("tests/k8s/"), nodeids[0]
    assert nodeids[-1].startswith("tests/unit/"), nodeids[-1]
    assert ranks == sorted(ranks), "the collection is not ordered by tier"
