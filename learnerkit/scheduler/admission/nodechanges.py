"""The nodes admission works with while the cluster changes under a running scheduler (pure).

Nodes the backend lists are used as listed, so a node added is used at once. A node no longer listed (cordoned,
not ready, deleted) that still holds admitted or running learners stays, shrunk to exactly what they hold: they
keep their reservation, and no new learner fits there. Once they are gone, the node goes too. A restarted
scheduler builds its admission state the same way, so it never requeues (and runs twice) a job still running on
a node it does not list.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from learnerkit.scheduler.admission.admit import JobRecord
from learnerkit.scheduler.admission.capacity import Node
from learnerkit.scheduler.admission.stage import Stage

UNLISTED_GPU_TYPE = "unlisted"
"""The GPU type of a node known only from what runs on it (a restart while it is cordoned), where its learners
asked for any type: they re-reserve there; no new learner is placed on such a node anyway."""


def working_nodes(listed: Sequence[Node], known: Mapping[str, Node], records: Iterable[JobRecord]) -> list[Node]:
    """``listed``, plus each node not listed that holds learners of ``records``, shrunk to them (its GPU type from
    ``known``, else from their requests: after a restart, a cordoned node is known only from its jobs)."""
    names = {node.name for node in listed}
    held: dict[str, tuple[int, int, int]] = {}
    types: dict[str, str] = {name: node.gpu_type for name, node in known.items() if node.gpu_type is not None}
    for record in records:
        if record.stage not in (Stage.DEPLOYED, Stage.RUNNING):
            continue
        for request, name in zip(record.job.learners, record.nodes, strict=True):
            if name in names:
                continue
            millicpus, memory, gpus = held.get(name, (0, 0, 0))
            held[name] = (millicpus + request.millicpus, memory + request.memory_bytes, gpus + request.gpus)
            if request.gpus and name not in types:
                types[name] = request.gpu_type or UNLISTED_GPU_TYPE
    shrunk = [
        Node(name, millicpus / 1000, memory, gpus, types.get(name, UNLISTED_GPU_TYPE) if gpus else None)
        for name, (millicpus, memory, gpus) in sorted(held.items())
    ]
    return [*listed, *shrunk]


def changed(nodes: Iterable[Node], current: Iterable[Node]) -> bool:
    return sorted(nodes, key=lambda n: n.name) != sorted(current, key=lambda n: n.name)
