"""`scheduler nodes`: each node's state (as the scheduler publishes it, the drain marks read live) and the jobs
holding room there; the table at 80 columns never cuts a node name or a job id."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from learnerkit.cli import cli
from learnerkit.scheduler import cli_scheduler
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.backends.protocol import NodeHealth
from learnerkit.scheduler.core.nodeloss import node_states
from learnerkit.scheduler.jobs.state import JobState, JobStatus
from learnerkit.scheduler.nodes.listing import NodeJob, NodeRow, NodeState, node_rows

NOW = 1_000_000.0
GRACE = 60.0


def job(job_id: str, stage: Stage, nodes: tuple[str, ...], status: JobStatus = JobStatus.PROCESSING) -> JobState:
    return replace(
        JobState(job_id=job_id, name="j", tenant="team-a", submitted_at=NOW), stage=stage, nodes=nodes, status=status
    )


def test_node_states_from_the_clusters_health() -> None:
    health = {
        "n1": NodeHealth(),
        "n2": NodeHealth(cordoned=True),
        "n3": NodeHealth(not_ready_since=NOW - 10),
        "n4": NodeHealth(not_ready_since=NOW - GRACE),
    }
    states = node_states(health, {"n1", "n5"}, NOW, GRACE)
    assert states == {"n1": "ready", "n2": "cordoned", "n3": "not-ready", "n4": "lost", "n5": "lost"}


def test_rows_name_each_node_its_state_and_the_jobs_holding_room_there() -> None:
    published = {"n1": "ready", "n2": "ready", "n3": "lost", "n4": "cordoned"}
    jobs = [
        job("job-b", Stage.RUNNING, ("n1", "n1", "n2")),  # two learners on n1: listed once there
        job("job-a", Stage.DEPLOYED, ("n1",), JobStatus.PENDING),
        job("job-q", Stage.QUEUED, ()),
        job("job-d", Stage.DONE, ("n4",), JobStatus.COMPLETED),  # ended: holds nothing
        job("job-x", Stage.RUNNING, ("gone",)),
    ]
    rows = node_rows(published, {"n2", "n3"}, jobs)
    assert rows == [
        NodeRow("gone", NodeState.UNKNOWN, (NodeJob("job-x", "team-a", "PROCESSING"),)),
        NodeRow(
            "n1",
            NodeState.READY,
            (NodeJob("job-a", "team-a", "PENDING"), NodeJob("job-b", "team-a", "PROCESSING")),
        ),
        NodeRow("n2", NodeState.DRAINED, (NodeJob("job-b", "team-a", "PROCESSING"),)),
        NodeRow("n3", NodeState.LOST),  # lost wins over drained: its jobs resume elsewhere whatever the mark
        NodeRow("n4", NodeState.CORDONED),
    ]


def test_the_command_prints_json_and_a_table_that_cuts_no_name_at_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    node = "ip-10-0-12-34.eu-west-1.compute.internal"
    rows = [
        NodeRow(node, NodeState.READY, (NodeJob("job-dfd2a7c1e9b0", "team-a", "PROCESSING"),)),
        NodeRow("local", NodeState.DRAINED),
    ]

    async def listed(settings: object) -> list[NodeRow]:
        return rows

    monkeypatch.setattr(cli_scheduler, "list_nodes", listed)
    runner = CliRunner()
    answer = runner.invoke(cli, ["scheduler", "nodes", "--output", "json"], env={"ETCD_ENDPOINTS": "127.0.0.1:1"})
    assert answer.exit_code == 0, answer.output
    assert json.loads(answer.output) == [
        {
            "node": node,
            "state": "ready",
            "jobs": [{"job_id": "job-dfd2a7c1e9b0", "tenant": "team-a", "status": "PROCESSING"}],
        },
        {"node": "local", "state": "drained", "jobs": []},
    ]
    # The width as a terminal gives it (COLUMNS): setting the console's width would outlive the test (monkeypatch
    # puts back a fixed width where the console had none) and narrow every later table of this process.
    table = runner.invoke(cli, ["scheduler", "nodes"], env={"ETCD_ENDPOINTS": "127.0.0.1:1", "COLUMNS": "80"})
    assert table.exit_code == 0, table.output
    assert node in table.output and "job-dfd2a7c1e9b0" in table.output and "…" not in table.output
    assert max(len(line) for line in table.output.splitlines()) <= 80, table.output
